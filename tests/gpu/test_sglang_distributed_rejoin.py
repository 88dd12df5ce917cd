"""Fault 2 on GPUs: under --update-weight-transport distributed, a replaced engine rejoins the
NCCL weight sync. Needs 2 GPUs, sglang and Ray; skipped without them.

This process is rank 0 of the weight-update group on its cuda:0, as the trainer's rank 0 is;
one engine (hyrl's `make_sglang_engine` on Ray, as in a run) serves on the second GPU. Two GPUs
because NCCL refuses two ranks of one communicator on one GPU. The CPU suite and the contract
tier check the same steps over gloo (tests/unit/rollout/test_sglang_fleet.py,
tests/contract/test_replaced_engine_sync.py); what only NCCL can show is that rank 0 leaves a
group whose other member is dead without hanging, and that the new group then works.

1. sync the weights that count up by 1 over NCCL group 1 (SGLangFleet.update_weights, which
   also stages them for replacements);
2. kill the engine (its actor, and with it its server): the next rollout replaces it, and the
   replacement loads the staged weights through its own tensor path before it serves;
3. sync the weights that count up by 2: `prepare_weight_sync` sees a new server URL, leaves
   group 1 (its other member is dead) and forms group 2 with the new server, then broadcasts;
   the whole sync is bounded (a hang fails the check instead of holding the run);
4. greedy output counts up by 2: the replacement's server took the new weights over NCCL.

Run on a machine with 2 GPUs and requirements.txt installed: `bash tools/gpu_tests.sh` or
`python -m pytest tests/gpu/test_sglang_distributed_rejoin.py -q`.
"""

from __future__ import annotations

import functools
import time

import torch
from sglang_gpu import (
    BUFFER_BYTES,
    EOS,
    REQUEST_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    call_within,
    counted,
    counting_weights,
    needs,
    ray_on_gpus,
    server_options,
    tiny_hf_state_dict,
    visible_gpus,
)

pytestmark = needs(2, "NCCL refuses two ranks of one communicator on one GPU")

PROMPTS = [[c] for c in range(2, 10)]
MAX_NEW_TOKENS = 4
RESYNC_TIMEOUT_S = 300.0  # leave the old group, form a new one, broadcast: seconds when it works


def test_a_replaced_engine_rejoins_the_nccl_weight_sync_over_a_new_group(tmp_path):
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.fleet import RolloutFleet
    from hyrl.rollout.sglang.fleet import SGLangFleet
    from hyrl.rollout.sglang.launch import make_sglang_engine, write_rollout_model

    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    hf_state_dict = tiny_hf_state_dict()
    model_path = write_rollout_model(TINY, tmp_path / "rollout_model", [EOS])
    factory = functools.partial(
        make_sglang_engine,
        server_options(model_path, str(tmp_path / "logs"), gpus_per_engine=1, concurrency=4),
        [EOS],
        "distributed",
        BUFFER_BYTES,
        STARTUP_TIMEOUT_S,
        request_timeout_s=REQUEST_TIMEOUT_S,
    )
    torch.cuda.set_device(0)  # rank 0 of the weight-update group
    with ray_on_gpus(visible_gpus()[1:2]):  # the engine on the other GPU
        fleet = RolloutFleet(
            factory,
            num_engines=1,
            concurrency_per_engine=4,
            num_gpus_per_engine=1,
            max_restarts=1,
            startup_timeout_s=STARTUP_TIMEOUT_S,
        )
        hung = False
        try:
            engine = SGLangFleet(fleet, "distributed", BUFFER_BYTES, 1)  # group 1, over NCCL
        except BaseException:
            fleet.close()
            raise
        try:
            engine.update_weights(counting_weights(hf_state_dict, TINY.vocab_size, 1))
            assert engine.last_sync_stats is not None and engine.last_sync_stats.buckets > 1
            generations = engine.generate(PROMPTS, params)
            assert [g.response_ids for g in generations] == [
                counted(p, 1, MAX_NEW_TOKENS, TINY.vocab_size) for p in PROMPTS
            ]
            first_url = fleet.call_all("server_url")[0]

            fleet.kill_engine(0)  # the actor; its server follows it (PR_SET_PDEATHSIG)
            generations = engine.generate(PROMPTS, params)  # replaced; loads the staged weights
            assert fleet.stats()["restarts"] == [1]
            assert [g.response_ids for g in generations] == [
                counted(p, 1, MAX_NEW_TOKENS, TINY.vocab_size) for p in PROMPTS
            ]
            assert fleet.call_all("server_url")[0] != first_url

            began = time.monotonic()
            try:
                call_within(
                    RESYNC_TIMEOUT_S,
                    "the sync that leaves the group with a dead member and forms a new one",
                    lambda: engine.update_weights(
                        counting_weights(hf_state_dict, TINY.vocab_size, 2)
                    ),
                )
            except TimeoutError:
                hung = True
                raise
            resync_s = time.monotonic() - began
            print(f"sync after the replacement (leave group 1, form group 2): {resync_s:.1f} s")
            assert engine.last_sync_stats is not None
            assert engine.last_sync_stats.transport == "distributed"
            generations = engine.generate(PROMPTS, params)
            assert [g.response_ids for g in generations] == [
                counted(p, 2, MAX_NEW_TOKENS, TINY.vocab_size) for p in PROMPTS
            ]
        finally:
            if hung:  # leaving the group again would hang as well: end the engines only
                fleet.close()
            else:
                engine.close()
