"""Specification of hyrl.train.heldout: the unbiased pass@k estimator (Chen et al. 2021) on
hand-computed numbers, and what evaluate logs per held-out set."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from hyrl.config import eval_max_response_len, eval_pass_ks, parse_args, resolve
from hyrl.rewards.pool import ScoredBatch
from hyrl.rollout.base import Generation
from hyrl.train.heldout import evaluate, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),  # c/n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 1, 4, 1.0),  # every 4-subset holds the one correct sample
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 3, 0.0),  # nothing correct
        (5, 5, 1, 1.0),
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
    ],
)
def test_pass_at_k_on_hand_computed_numbers(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_fraction_of_k_subsets_holding_a_correct_sample():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                share = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(share, abs=1e-12), (n, c, k)


def test_pass_at_k_stays_finite_where_the_binomials_overflow_a_float():
    n, c, k = 2000, 3, 500  # C(2000, 500) ~ 1e486 > float max
    with pytest.raises(OverflowError):
        float(math.comb(n, k))
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)  # int / int: the exact ratio, rounded once
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_refuses_counts_outside_their_ranges(n, c, k):
    with pytest.raises(ValueError, match=f"n={n}, c={c}, k={k}"):
        pass_at_k(n, c, k)


class _Rollout:
    """The part of RolloutManager evaluate uses: held-out sets, generate and score; each prompt's
    responses get the rewards listed for it, in order."""

    def __init__(self, sets: dict[str, list[list[float]]]):
        self.rewards = [r for per_prompt in sets.values() for rs in per_prompt for r in rs]
        self.eval_sets = {
            name: [SimpleNamespace(prompt_ids=[1, 2], label="7") for _ in per_prompt]
            for name, per_prompt in sets.items()
        }
        self.params = None

    def generate(self, prompt_ids, params):
        self.params = params
        return [Generation(p, [3], [0.0], "stop") for p in prompt_ids]

    def score(self, generations, labels):
        assert len(generations) == len(self.rewards)
        return ScoredBatch(rewards=list(self.rewards))


def _cfg(*argv: str):
    return resolve(parse_args(["--eval-interval", "1", *argv]))


def _evaluate(cfg, rollout: _Rollout) -> tuple[dict, float]:
    """evaluate as the trainer calls it: the views, and the values the config derives."""
    return evaluate(
        cfg.evaluation,
        cfg.rollout,
        rollout,
        torch.device("cpu"),
        max_response_len=eval_max_response_len(cfg, rollout=cfg),
        pass_ks=eval_pass_ks(cfg),
    )


def test_evaluate_logs_pass_at_k_per_set_and_their_mean():
    # set a: prompts with c = 1 and c = 3 correct of n = 4; set b: c = 0 and c = 4
    rollout = _Rollout(
        {
            "a": [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]],
            "b": [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]],
        }
    )
    cfg = _cfg("--n-samples-per-eval-prompt", "4", "--eval-pass-k", "2,1,4")
    metrics, _ = _evaluate(cfg, rollout)
    # pass@2: a = (1 - C(3,2)/C(4,2) + 1) / 2 = (0.5 + 1) / 2; b = (0 + 1) / 2
    assert metrics["eval/a/pass@1"] == pytest.approx((0.25 + 0.75) / 2)
    assert metrics["eval/a/pass@2"] == pytest.approx(0.75)
    assert metrics["eval/a/pass@4"] == pytest.approx(1.0)
    assert metrics["eval/b/pass@1"] == metrics["eval/b/pass@2"] == metrics["eval/b/pass@4"] == 0.5
    assert metrics["eval/pass@2"] == pytest.approx((0.75 + 0.5) / 2)  # each set weighs the same
    assert metrics["eval/pass@1"] == pytest.approx(metrics["eval/accuracy"])  # 0/1 rewards
    assert "eval/pass@3" not in metrics


def test_the_threshold_decides_which_rewards_count_as_correct():
    rollout = _Rollout({"": [[0.5, 0.9, 1.0, 0.2]]})
    for threshold, c in (("1.0", 1), ("0.5", 3), ("0.95", 1), ("0.1", 4)):
        cfg = _cfg("--n-samples-per-eval-prompt", "4", "--eval-pass-threshold", threshold)
        metrics, _ = _evaluate(cfg, rollout)
        assert metrics["eval/pass@1"] == pytest.approx(c / 4), threshold
        assert metrics["eval/accuracy"] == pytest.approx(2.6 / 4)  # mean@k: the rewards
        assert metrics["eval/pass@2"] == pytest.approx(pass_at_k(4, c, 2))  # default k: 1, 2, 4


def test_evaluation_generates_up_to_its_own_response_length():
    rollout = _Rollout({"": [[1.0]]})
    _evaluate(_cfg("--rollout-max-response-len", "2"), rollout)
    assert rollout.params.max_new_tokens == 2  # none = --rollout-max-response-len
    cfg = _cfg("--rollout-max-response-len", "2", "--eval-max-response-len", "5")
    metrics, _ = _evaluate(cfg, rollout)
    assert rollout.params.max_new_tokens == 5
    assert metrics["eval/pass@1"] == 1.0 and "eval/pass@2" not in metrics  # n = 1: pass@1 only
