"""hyrl.algorithms.overlong: DAPO's soft over-long penalty and truncated rows, by hand."""

import pytest
import torch

from hyrl.algorithms.overlong import overlong_penalty, truncated_rows


def test_the_penalty_falls_linearly_over_the_buffer_before_the_limit():
    # L_max = 8, L_cache = 4: free up to 4 tokens, then -1/4 per token down to -1 at 8
    lengths = torch.tensor([1, 4, 5, 6, 8])
    assert overlong_penalty(lengths, 8, 4).tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(lengths, 8, 4, factor=0.5).tolist() == [0.0, 0.0, -0.125, -0.25, -0.5]
    assert overlong_penalty(torch.tensor([3]), 4, 4).tolist() == [-0.75]  # the whole length
    with pytest.raises(ValueError, match=r"buffer_len must be in \[1, 8\]"):
        overlong_penalty(lengths, 8, 9)


def test_truncated_rows_are_the_ones_cut_at_the_limit():
    assert truncated_rows(["stop", "length", "stop"]).tolist() == [False, True, False]


def test_shape_overlong_adds_the_penalty_masks_truncated_rows_and_says_how_much():
    import torch

    from hyrl.algorithms.overlong import shape_overlong

    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    mask = torch.ones(4, 3)
    shaped, metrics = shape_overlong(
        rewards, [4, 8, 10, 10], ["stop", "stop", "length", "length"], mask, 10, 4, 1.0, True
    )
    # L_max - L_cache = 6: 4 -> 0, 8 -> -0.5, 10 -> -1.0
    assert shaped.tolist() == [1.0, 0.5, -1.0, 0.0]
    assert mask.sum(dim=1).tolist() == [3.0, 3.0, 0.0, 0.0]
    assert metrics == {
        "train/overlong_penalty_mean": -0.625,
        "train/overlong_penalized_frac": 0.75,
        "train/overlong_filtered_frac": 0.5,
    }
    unchanged, none = shape_overlong(rewards, [10] * 4, ["length"] * 4, mask, 10, None, 1.0, False)
    assert unchanged is rewards and none == {}


def test_the_flags_shaping_is_the_penalty_and_filter_they_ask_for():
    from hyrl.algorithms.overlong import OverlongShaping
    from hyrl.config import RunConfig, resolve

    cfg = resolve(
        RunConfig(rollout_max_response_len=10, overlong_buffer_len=4, overlong_filtering=True)
    )
    shaping = OverlongShaping.of(cfg.algorithm, cfg.rollout)
    rewards, mask = torch.tensor([1.0, 1.0]), torch.ones(2, 3)
    shaped, metrics = shaping(rewards, [8, 10], ["stop", "length"], mask)
    assert shaped.tolist() == [0.5, 0.0]  # the same -0.5 and -1.0 as above
    assert mask.sum(dim=1).tolist() == [3.0, 0.0] and metrics["train/overlong_filtered_frac"] == 0.5
