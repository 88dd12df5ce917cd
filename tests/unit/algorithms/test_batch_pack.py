"""Specification of hyrl.algorithms.batch: `pack` and `TokenBatch`, with tensors written by hand.

The running example: prompts [2,3,13,4,14] and [2,5,13], responses [7,1] and [9], pad 0.
Longest prompt+response is 5+2 = 7 tokens; one spare position makes 8, already a multiple of 4.
"""

from __future__ import annotations

import pytest
import torch

from hyrl.algorithms.batch import TokenBatch, pack

PROMPTS = [[2, 3, 13, 4, 14], [2, 5, 13]]
RESPONSES = [[7, 1], [9]]
ADVANTAGES = torch.tensor([0.5, -0.5])


def long(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


def floats(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


@pytest.fixture
def batch() -> TokenBatch:
    return pack(PROMPTS, RESPONSES, ADVANTAGES, pad_id=0, pad_to_multiple_of=4)


def test_tokens_are_prompt_then_response_right_padded(batch):
    assert torch.equal(
        batch.tokens,
        long(
            [2, 3, 13, 4, 14, 7, 1, 0],
            [2, 5, 13, 9, 0, 0, 0, 0],
        ),
    )


def test_targets_are_tokens_shifted_left_with_pad_in_the_last_column(batch):
    assert torch.equal(
        batch.targets,
        long(
            [3, 13, 4, 14, 7, 1, 0, 0],
            [5, 13, 9, 0, 0, 0, 0, 0],
        ),
    )


def test_loss_mask_covers_exactly_the_positions_whose_target_is_a_response_token(batch):
    # row 0: positions 4 and 5 predict 7 and 1; row 1: position 2 predicts 9
    assert torch.equal(
        batch.loss_mask,
        floats(
            [0, 0, 0, 0, 1, 1, 0, 0],
            [0, 0, 1, 0, 0, 0, 0, 0],
        ),
    )
    assert batch.loss_mask.dtype == torch.float32
    assert batch.targets[batch.loss_mask.bool()].tolist() == [7, 1, 9]


def test_tokens_an_environment_wrote_stay_out_of_the_loss_mask():
    # row 0's response is a turn: model token 7, an environment's token 8, model token 1; the
    # environment's position (5, predicting 8) is no target of the loss; tokens and targets
    # keep every token
    batch = pack(
        PROMPTS,
        [[7, 8, 1], [9]],
        ADVANTAGES,
        pad_id=0,
        pad_to_multiple_of=4,
        rollout_log_probs=[[-0.1, 0.0, -0.3], [-0.5]],
        sampled=[[1, 0, 1], [1]],
    )
    # 5 + 3 tokens and a spare position: 9, padded to 12
    assert batch.tokens[0].tolist() == [2, 3, 13, 4, 14, 7, 8, 1, 0, 0, 0, 0]
    assert torch.equal(
        batch.loss_mask,
        floats([0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    )
    assert batch.targets[batch.loss_mask.bool()].tolist() == [7, 1, 9]
    assert batch.rollout_log_probs[batch.loss_mask.bool()].tolist() == pytest.approx(
        [-0.1, -0.3, -0.5]
    )
    assert batch.num_response_tokens == 3


@pytest.mark.parametrize("marks", [[[1, 0], [1]], [[1, 0, 2], [1]]])
def test_a_sampled_mask_of_the_wrong_length_or_values_is_refused_naming_the_row(marks):
    with pytest.raises(ValueError, match="row 0: the sampled mask"):
        pack(PROMPTS, [[7, 8, 1], [9]], ADVANTAGES, pad_id=0, sampled=marks)


def test_advantages_pass_through_and_log_probs_start_unset(batch):
    assert torch.equal(batch.advantages, ADVANTAGES)
    assert batch.old_log_probs is None and batch.ref_log_probs is None


def test_length_is_padded_up_to_the_multiple():
    # 7 tokens + 1 spare = 8: a multiple of 1 stays 8, of 3 becomes 9, of 16 becomes 16
    assert pack(PROMPTS, RESPONSES, ADVANTAGES, pad_id=0).tokens.shape == (2, 8)
    assert pack(PROMPTS, RESPONSES, ADVANTAGES, pad_id=0, pad_to_multiple_of=3).tokens.shape == (
        2,
        9,
    )
    assert pack(PROMPTS, RESPONSES, ADVANTAGES, pad_id=0, pad_to_multiple_of=16).tokens.shape == (
        2,
        16,
    )


def test_padding_uses_the_given_pad_id():
    # 3 + 1 = 4 tokens, + 1 spare = 5, padded up to 8
    b = pack([[2, 5, 13]], [[9]], torch.tensor([1.0]), pad_id=15, pad_to_multiple_of=4)
    assert torch.equal(b.tokens, long([2, 5, 13, 9, 15, 15, 15, 15]))
    assert torch.equal(b.targets, long([5, 13, 9, 15, 15, 15, 15, 15]))


def test_num_response_tokens_counts_masked_positions(batch):
    assert batch.num_response_tokens == 3.0
    assert isinstance(batch.num_response_tokens, float)
    assert len(batch) == 2


def test_select_takes_the_same_rows_of_every_tensor_and_keeps_none_fields(batch):
    row1 = batch.select(slice(1, 2))
    assert len(row1) == 1
    assert torch.equal(row1.tokens, long([2, 5, 13, 9, 0, 0, 0, 0]))
    assert torch.equal(row1.targets, long([5, 13, 9, 0, 0, 0, 0, 0]))
    assert torch.equal(row1.loss_mask, floats([0, 0, 1, 0, 0, 0, 0, 0]))
    assert torch.equal(row1.advantages, torch.tensor([-0.5]))
    assert row1.old_log_probs is None and row1.ref_log_probs is None
    assert row1.num_response_tokens == 1.0


def test_select_with_an_index_tensor_reorders_rows_including_set_log_probs(batch):
    batch.old_log_probs = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    swapped = batch.select(torch.tensor([1, 0]))
    assert torch.equal(swapped.tokens[0], batch.tokens[1])
    assert torch.equal(swapped.tokens[1], batch.tokens[0])
    assert torch.equal(swapped.advantages, torch.tensor([-0.5, 0.5]))
    assert torch.equal(swapped.old_log_probs[0], torch.arange(8, 16, dtype=torch.float32))
    assert swapped.ref_log_probs is None
    assert batch.tokens[0, 0] == 2  # the original batch is untouched


@pytest.mark.parametrize(
    "prompts, responses, advantages",
    [
        (PROMPTS, RESPONSES[:1], ADVANTAGES),  # fewer responses than prompts
        (PROMPTS[:1], RESPONSES, ADVANTAGES),  # fewer prompts than responses
        (PROMPTS, RESPONSES, torch.tensor([0.5, -0.5, 0.0])),  # one advantage too many
    ],
)
def test_mismatched_lengths_raise_value_error(prompts, responses, advantages):
    with pytest.raises(ValueError):
        pack(prompts, responses, advantages, pad_id=0)


def test_empty_prompt_is_refused_not_silently_unmasked():
    with pytest.raises(ValueError, match="empty prompt"):
        pack([[2, 3], []], [[7, 1], [9]], torch.zeros(2), pad_id=0)
