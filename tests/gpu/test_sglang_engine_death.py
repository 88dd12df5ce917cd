"""Fault 1 on a GPU: a real SGLang server whose scheduler fails is replaced, and the rollout it
was serving loses no prompt. Needs one GPU, sglang and Ray; skipped without them.

The CPU suite checks the same with a fake server whose scheduler child is killed the way
SGLang's is (tests/unit/rollout/test_sglang_fleet.py). Here the servers are SGLang 0.5.23 on a
tiny Qwen3-MoE, launched by hyrl's own factory (`make_sglang_engine`, as a run's fleet does),
two engines sharing one GPU, and engine 0's scheduler fails after its first chunk of a rollout:

* "scheduler raised": SIGQUIT to the server, what SGLang's scheduler sends when its loop
  raises (a CUDA error, an OOM, an NCCL error; no CUDA error is provoked: the scheduler's own
  handler is the part that matters to hyrl, and SGLang validates token ids, so a bad id
  cannot raise one);
* "scheduler died": SIGKILL to the scheduler process (NCCL's abort, the OOM killer), which
  SGLang's subprocess watchdog answers with the same SIGQUIT.

Either way the server must take its whole process tree down and give its GPU memory back, the
engine actor must report the engine dead (EngineDied, hyrl.rollout.fleet_engine), and the fleet
must replace it, resend its prompts and answer every prompt with the weights of the last sync.

Run on a GPU machine with requirements.txt installed: `bash tools/gpu_tests.sh` (all of
tests/gpu) or `python -m pytest tests/gpu/test_sglang_engine_death.py -q` (a few minutes:
six server start-ups).
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
from sglang_gpu import (
    BUFFER_BYTES,
    EOS,
    MEM_FRACTION_STATIC,
    REQUEST_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    counted,
    counting_weights,
    crash,
    needs,
    ray_on_gpus,
    server_options,
    server_process_at,
    tiny_hf_state_dict,
    visible_gpus,
    wait_ended,
)

pytestmark = needs(1)

PROMPTS = [[c] for c in range(2, 14)]  # 6 chunks of 2 over 2 engines: each serves several
MAX_NEW_TOKENS = 4


@pytest.mark.parametrize("how", ["scheduler raised", "scheduler died"])
def test_a_crashed_sglang_server_is_replaced_and_every_prompt_is_answered(how, tmp_path):
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.fleet import RolloutFleet
    from hyrl.rollout.sglang.launch import make_sglang_engine, write_rollout_model

    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    expected = [counted(p, 1, MAX_NEW_TOKENS, TINY.vocab_size) for p in PROMPTS]
    model_path = write_rollout_model(TINY, tmp_path / "rollout_model", [EOS])
    factory = functools.partial(
        make_sglang_engine,
        server_options(model_path, str(tmp_path / "logs"), gpus_per_engine=1, concurrency=2),
        [EOS],
        "tensor",
        BUFFER_BYTES,
        STARTUP_TIMEOUT_S,
        request_timeout_s=REQUEST_TIMEOUT_S,
    )
    with ray_on_gpus(visible_gpus()[:1]):  # the engines on this process's cuda:0
        free_at_start = torch.cuda.mem_get_info(0)[0]
        fleet = RolloutFleet(
            factory,
            num_engines=2,
            concurrency_per_engine=2,
            num_gpus_per_engine=0.5,  # both servers on the one GPU
            max_restarts=1,
            startup_timeout_s=STARTUP_TIMEOUT_S,
        )
        try:
            fleet.update_weights(counting_weights(tiny_hf_state_dict(), TINY.vocab_size, 1))
            first_urls = fleet.call_all("server_url")
            crashed: dict[str, float] = {}

            def crash_engine_0(engine_index: int, chunk: int) -> None:
                """After engine 0's first chunk, before it gets another: its scheduler fails,
                and the driver waits until the server's processes have ended."""
                if engine_index != 0 or crashed:
                    return
                server = server_process_at(first_urls[0])
                tree = [server, *server.children(recursive=True)]
                free_before = torch.cuda.mem_get_info(0)[0]
                crash(server, how)
                wait_ended(tree, timeout_s=60.0)
                deadline = time.monotonic() + 30.0  # the driver frees it as the processes end
                while time.monotonic() < deadline:
                    crashed["freed_bytes"] = torch.cuda.mem_get_info(0)[0] - free_before
                    if crashed["freed_bytes"] >= 0.5 * MEM_FRACTION_STATIC * free_at_start:
                        break
                    time.sleep(0.5)

            fleet.on_chunk_done = crash_engine_0
            generations = fleet.generate(PROMPTS, params)
            fleet.on_chunk_done = None

            assert crashed, "engine 0 served no chunk before the others finished the rollout"
            print(f"{how}: the server's end freed {crashed['freed_bytes'] / 2**30:.2f} GiB")
            # a server holds MEM_FRACTION_STATIC of the memory free when it started (at least
            # 0.78 of free_at_start with the other server up): half of that is a safe floor
            assert crashed["freed_bytes"] >= 0.5 * MEM_FRACTION_STATIC * free_at_start, crashed
            assert [g.response_ids for g in generations] == expected
            stats = fleet.stats()
            assert stats["restarts"] == [1, 0] and stats["resubmitted_prompts"] >= 1
            assert "its SGLang server at" in fleet._slots[0].last_error  # EngineDied's words

            # the replacement starts on the freed GPU, with a server of its own, and serves
            fleet.settle()
            urls = fleet.call_all("server_url")
            assert urls[0] != first_urls[0] and urls[1] == first_urls[1]
            served_before = fleet.stats()["chunks_served"][0]
            again = fleet.generate(PROMPTS, params)
            assert [g.response_ids for g in again] == expected
            assert fleet.stats()["chunks_served"][0] > served_before
        finally:
            fleet.close()
