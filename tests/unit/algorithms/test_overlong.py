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
