"""One forward/backward/Adam step under PP=2 with two virtual stages per pipeline rank
(megatron's interleaved schedule; chunk v of rank p holds layer 2v + p: rank 0 layers 0 and 2,
rank 1 layers 1 and 3) equals PP=1.

A 4-layer TINY, so each of the 2 x 2 virtual stages holds one layer. Both layouts run
tests/helpers/parity_worker.py under torchrun on the same HF weights and the same 8 responses
in 4 micro-batches of 2 (two groups of PP=2: the steady state of the schedule runs too).
"""

import json
from pathlib import Path

import pytest
from testpaths import HELPERS
from torchrun_worker import run_ranks

WORKER = HELPERS / "parity_worker.py"
LAYERS = 4
LAYOUTS = {"pp1": (1, 1, 0), "pp2vp2": (2, 2, 2)}  # nproc, PP, virtual stages


def _run(layout: str, tmp_path: Path) -> dict:
    nproc, pp, vp = LAYOUTS[layout]
    out = tmp_path / f"{layout}.json"
    run_ranks(WORKER, nproc, out, 1, 1, pp, vp, LAYERS)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vpp_parity")
    return {layout: _run(layout, tmp) for layout in LAYOUTS}


@pytest.mark.slow
def test_log_probs_match_transformers_under_virtual_stages(results):
    assert results["pp2vp2"]["max_logprob_diff_vs_hf"] <= 1e-5


@pytest.mark.slow
def test_loss_and_grad_norm_match_one_rank(results):
    got, reference = results["pp2vp2"], results["pp1"]
    assert abs(got["loss"] - reference["loss"]) <= 1e-5
    assert abs(got["grad_norm"] - reference["grad_norm"]) <= 1e-5 * max(1.0, reference["grad_norm"])
    # and transformers' own autograd through the 4 layers
    assert abs(got["grad_norm"] - got["hf_grad_norm"]) <= 1e-5 * max(1.0, got["hf_grad_norm"])


@pytest.mark.slow
def test_weights_after_one_adam_step_match_one_rank(results):
    """The exported weights (every chunk's layers under their global numbers) after one step."""
    reference, got = results["pp1"]["weights_after_step"], results["pp2vp2"]["weights_after_step"]
    assert set(got) == set(reference)
    assert {f"model.layers.{i}.self_attn.q_proj.weight" for i in range(LAYERS)} <= set(got)
    worst = max(abs(a - b) for name in reference for a, b in zip(reference[name], got[name]))
    assert worst <= 1e-5


@pytest.mark.slow
def test_critic_loss_grad_norm_and_values_after_one_step_match_one_rank(results):
    reference, got = results["pp1"], results["pp2vp2"]
    assert abs(got["critic_value_loss"] - reference["critic_value_loss"]) <= 1e-6
    assert abs(got["critic_grad_norm"] - reference["critic_grad_norm"]) <= 1e-5 * max(
        1.0, reference["critic_grad_norm"]
    )
    assert got["critic_grad_norm"] > 0
    worst = max(
        abs(a - b)
        for a, b in zip(reference["critic_values_after_step"], got["critic_values_after_step"])
    )
    assert worst <= 1e-5
