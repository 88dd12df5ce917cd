"""tools/bench_floor.py: the floor's GRPO arithmetic on hand-computed numbers, the run summaries
and the report. No training and no timing here: the benchmark itself is run by hand."""

import importlib.util
import math
import sys

import pytest
import torch
from testpaths import ROOT

from hyrl.algorithms.grpo import group_advantages as hyrl_group_advantages
from hyrl.algorithms.losses import grpo_loss as hyrl_grpo_loss
from hyrl.data.tokenizer import VOCAB, build_tokenizer

TOOL = ROOT / "tools" / "bench_floor.py"
_spec = importlib.util.spec_from_file_location("bench_floor", TOOL)
floor = importlib.util.module_from_spec(_spec)
sys.modules["bench_floor"] = floor
_spec.loader.exec_module(floor)

DIGIT = {str(d): VOCAB.index(str(d)) for d in range(10)}
EOS = VOCAB.index("<eos>")


def test_group_advantages_by_hand():
    # group 1: mean 0.25, population std sqrt(0.25 * 0.75) = 0.4330127; group 2: all equal
    got = floor.group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), 4)
    std = math.sqrt(0.25 * 0.75) + 1e-6
    want = [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std, 0.0, 0.0, 0.0, 0.0]
    assert got.tolist() == pytest.approx(want, rel=1e-6)
    assert got[4:].eq(0).all()  # exactly 0, not rounding noise


def test_group_advantages_agree_with_hyrl():
    rewards = torch.randint(0, 2, (128,), generator=torch.Generator().manual_seed(0)).float()
    assert torch.equal(floor.group_advantages(rewards, 8), hyrl_group_advantages(rewards, 8))


def test_response_mask_stops_after_the_first_eos():
    responses = torch.tensor([[DIGIT["2"], EOS], [EOS, DIGIT["3"]], [DIGIT["4"], DIGIT["5"]]])
    assert floor.response_mask(responses).tolist() == [[1, 1], [1, 0], [1, 1]]


def test_rewards_are_hyrls_exact_match():
    responses = [
        [DIGIT["2"], EOS],  # "2", stopped: right
        [DIGIT["2"], EOS],  # "2" against label "3": wrong
        [EOS, DIGIT["2"]],  # empty, stopped: wrong
        [DIGIT["2"], DIGIT["2"]],  # no eos (truncated): wrong
        [VOCAB.index("<bos>"), EOS],  # specials decode to nothing: wrong
    ]
    assert floor.exact_match_rewards(responses, ["2", "3", "2", "2", "2"]) == [1, 0, 0, 0, 0]
    assert floor.exact_match_rewards([[VOCAB.index("<bos>"), DIGIT["7"], EOS]], ["7"]) == [1.0]


def test_the_decode_table_is_the_tokenizers():
    tokenizer = build_tokenizer()
    for token_id, text in enumerate(floor.DECODED):
        assert tokenizer.decode([token_id], skip_special_tokens=True) == text


def test_grpo_loss_on_policy_and_clipped_by_hand():
    # on policy (ratio 1): -(A0 * 2 tokens + A1 * 1 token) / 3 tokens = -(2 - 1) / 3
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss = floor.grpo_loss(lp, lp.detach(), adv, mask, 3.0, 0.2, 0.28)
    assert loss.item() == pytest.approx(-1 / 3)
    # ratio 1.5 with A=1 clips at 1.28; ratio 0.5 with A=-1 clips at 0.8: -(1.28 - 0.8) / 2
    new = torch.log(torch.tensor([[1.5], [0.5]]))
    old = torch.zeros(2, 1)
    clipped = floor.grpo_loss(new, old, adv, torch.ones(2, 1), 2.0, 0.2, 0.28)
    assert clipped.item() == pytest.approx(-0.24)


def test_grpo_loss_and_gradient_agree_with_hyrl():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 2, 16, generator=g, requires_grad=True)
    tokens = torch.randint(0, 16, (6, 2), generator=g)
    adv = torch.randn(6, generator=g)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]] * 3)
    lp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    ours = floor.grpo_loss(lp, lp.detach(), adv, mask, float(mask.sum()), 0.2, 0.28)
    (grad_ours,) = torch.autograd.grad(ours, logits, retain_graph=True)
    theirs, _ = hyrl_grpo_loss(
        lp, lp.detach(), adv, mask, eps_clip=0.2, eps_clip_high=0.28, total_tokens=float(mask.sum())
    )
    (grad_theirs,) = torch.autograd.grad(theirs, logits)
    assert ours.item() == pytest.approx(theirs.item())
    assert torch.allclose(grad_ours, grad_theirs)


def test_run_summary_skips_warm_up_steps_and_reads_reward_ends():
    step_s = [9.0] * 10 + [0.1, 0.3, 0.2]
    rewards = [0.0] * 10 + [1.0, 1.0, 1.0]
    records = [
        {"step": i + 1, "perf/step_s": s, "perf/rollout_s": 0.05, "train/reward_mean": r}
        for i, (s, r) in enumerate(zip(step_s, rewards, strict=True))
    ]
    out = floor.summarize_run(records, ("rollout", "weight_sync"))
    assert out["step_s"] == pytest.approx(0.2)  # median of 0.1, 0.3, 0.2; the 9 s left out
    assert out["stage_s"] == {"rollout": pytest.approx(0.05)}  # a stage never logged is absent
    assert out["steps"] == 13
    # 10% of 13 steps rounds to 1 step each end
    assert (out["reward_first_10pct"], out["reward_last_10pct"]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="train/reward_mean"):
        floor.reward_ends([{"step": 1}])


def test_cpu_per_step_counts_from_the_first_sample_past_the_warm_up():
    # (steps logged, CPU s): from (10, 5.0) to (30, 7.0): 2 s over 20 steps; the warm-up and
    # the CPU spent after the last step (shutdown, 30 -> 9.0) left out
    samples = [(0, 1.0), (4, 3.0), (10, 5.0), (20, 6.1), (30, 7.0), (30, 9.0)]
    assert floor.cpu_per_step_s(samples) == pytest.approx(0.1)
    assert floor.cpu_per_step_s([(3, 1.0), (12, 2.0)]) is None  # one sample past the warm-up
    assert floor.cpu_per_step_s([(12, 1.0), (12, 2.0)]) is None  # no step in between


def _run(side, repeat, step_s, first=0.0, last=0.9, stage_s=None):
    return {
        "side": side,
        "repeat": repeat,
        "steps": 100,
        "step_s": step_s,
        "cpu_s": step_s / 2,
        "stage_s": stage_s or {},
        "reward_first_10pct": first,
        "reward_last_10pct": last,
    }


def test_report_takes_medians_over_repeats_and_the_ratio_of_medians():
    runs = [
        _run("hyrl", 0, 0.080, stage_s={"rollout": 0.02, "actor_train": 0.05}),
        _run("floor", 0, 0.040, stage_s={"rollout": 0.01}),
        _run("hyrl", 1, 0.100, stage_s={"rollout": 0.03, "actor_train": 0.06}),
        _run("floor", 1, 0.040, stage_s={"rollout": 0.01}),
        _run("hyrl", 2, 0.090, stage_s={"rollout": 0.01, "actor_train": 0.07}),
        _run("floor", 2, 0.060, stage_s={"rollout": 0.02}),
    ]
    report = floor.build_report(runs, machine="cpu, 2 cores", settings={}, command="c")
    assert report["hyrl_step_s"] == pytest.approx(0.090)
    assert report["floor_step_s"] == pytest.approx(0.040)
    assert report["ratio_hyrl_over_floor"] == pytest.approx(2.25)
    assert report["ratio_per_repeat"] == pytest.approx([2.0, 2.5, 1.5])
    assert (report["hyrl_cpu_s"], report["floor_cpu_s"]) == pytest.approx((0.045, 0.020))
    assert report["cpu_ratio_hyrl_over_floor"] == pytest.approx(2.25)
    assert report["hyrl_stage_s"] == pytest.approx({"rollout": 0.02, "actor_train": 0.06})
    assert list(report["hyrl_stage_s"]) == ["rollout", "actor_train"]  # the loop's order
    assert report["hyrl_stage_share"]["actor_train"] == pytest.approx(0.06 / 0.09)
    assert report["floor_stage_s"] == pytest.approx({"rollout": 0.01})
    settings = {"threads": 1, "num_steps": 100, "repeats": 3, "seed": 1}
    text = floor.render_markdown({**report, "settings": settings})
    assert "| hyrl tiny recipe | 90.0 ms | 0.00 | 0.90 |" in text
    assert "| plain PyTorch floor | 40.0 ms |" in text
    assert "hyrl / floor step time: 2.25x (per repeat: 2.00, 2.50, 1.50)" in text
    assert "hyrl 45.0 ms, floor 20.0 ms, hyrl / floor 2.25x" in text


@pytest.mark.parametrize(
    "flags",
    [
        ["--num-steps", "10"],
        ["--repeats", "0"],
        ["--threads", "0"],
        ["--seed", "-1"],
        ["--micro-batch-size", "48"],
    ],
)
def test_bad_flags_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        floor.parse_args(flags)
    assert "allowed" in capsys.readouterr().err


def test_defaults():
    args = floor.parse_args([])
    assert (args.num_steps, args.repeats, args.threads, args.micro_batch_size) == (300, 3, 1, 32)
