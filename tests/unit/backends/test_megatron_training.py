"""The trainer on megatron-core's machinery: DDP, the distributed optimizer, bf16 (all on CPU,
gloo). One optimizer step of the actor under DP = 2 runs tests/helpers/dp_worker.py under
torchrun."""

import json
import sys

import pytest
import torch
from testpaths import HELPERS
from torchrun_worker import run_ranks

WORKER = HELPERS / "dp_worker.py"
RUNS = {
    "one rank": (1, 0, 0),
    "dp2": (2, 0, 0),
    "dp2 distributed": (2, 1, 0),
    "dp2 distributed bf16": (2, 1, 1),
    "one rank bf16": (1, 0, 1),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dp")
    out = {}
    for name, (nproc, distributed, bf16) in RUNS.items():
        path = tmp / f"{name.replace(' ', '_')}.json"
        run_ranks(WORKER, nproc, path, distributed, bf16)
        out[name] = json.loads(path.read_text())
    return out


def _worst_weight_diff(a: dict, b: dict) -> float:
    return max(
        abs(x - y)
        for name in a["weights_after"]
        for x, y in zip(a["weights_after"][name], b["weights_after"][name])
    )


@pytest.mark.slow
def test_the_distributed_optimizer_holds_half_the_adam_states_on_each_of_two_ranks(results):
    full = results["dp2"]["adam_elements"]
    sharded = results["dp2 distributed"]["adam_elements"]
    params = results["dp2"]["params"]
    assert full == [2 * params, 2 * params]  # m and v of every parameter on both ranks
    # megatron pads each bucket to a multiple of DP: the shards cover the model once, +- padding
    assert sum(sharded) == pytest.approx(2 * params, rel=0.01)
    assert all(x == pytest.approx(params, rel=0.05) for x in sharded)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dp2", "dp2 distributed"])
def test_one_step_under_dp2_equals_one_rank(results, name):
    one, got = results["one rank"], results[name]
    assert got["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-6)
    assert _worst_weight_diff(got, one) <= 1e-6


@pytest.mark.slow
def test_bf16_keeps_bf16_weights_and_steps_like_fp32_within_bf16_precision(results):
    bf16, fp32 = results["one rank bf16"], results["one rank"]
    assert bf16["param_dtype"] == "torch.bfloat16" and fp32["param_dtype"] == "torch.float32"
    assert bf16["grad_norm"] == pytest.approx(fp32["grad_norm"], rel=2e-2)
    # one Adam step of lr 1e-2 moves weights by ~1e-2; bf16 rounding of weights ~ 0.4% of them
    assert 0 < _worst_weight_diff(bf16, fp32) <= 5e-3
    distributed = results["dp2 distributed bf16"]
    assert distributed["grad_norm"] == pytest.approx(bf16["grad_norm"], rel=1e-3)
    assert _worst_weight_diff(distributed, bf16) <= 1e-2  # at most a bf16 ulp at these sizes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dp2", "dp2 distributed"])
def test_noise_scale_small_batch_norms_are_each_ranks_own_gradient(results, name, tmp_path):
    """Each DP rank's small-batch |g|^2 is the squared norm of the gradient of its own rows'
    token-mean loss: the one-rank gradient norm on those rows alone."""
    small_sq = results[name]["small_sq"]
    assert small_sq is not None and len(small_sq) == 2
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.models.qwen3_moe.config import TINY

    sys.path.insert(0, str(WORKER.parent))
    from dp_worker import batch

    init_distributed(ParallelLayout(), seed=7)
    try:
        torch.manual_seed(0)
        from transformers import Qwen3MoeForCausalLM

        hf_model = Qwen3MoeForCausalLM(TINY.to_hf_config()).eval()
        actor = MegatronActor(
            TINY,
            ParallelLayout(),
            ActorSettings(
                optim=OptimizerSettings(micro_batch_size=4, clip_grad=0.0, noise_scale_beta=None)
            ),
        )
        actor.load_hf_state_dict(hf_model.state_dict())
        full = batch()
        for rank in (0, 1):
            rows = full.select(slice(rank * 4, rank * 4 + 4))
            rows.old_log_probs, _ = actor.log_probs(rows)
            norm = actor.train_step(rows, rows.num_response_tokens, lr=0.0)["actor/grad_norm"]
            assert small_sq[rank] == pytest.approx(norm**2, rel=1e-5)
    finally:
        destroy_distributed()
