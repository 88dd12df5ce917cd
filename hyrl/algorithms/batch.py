"""Pack variable-length (prompt, response) pairs into padded token tensors for the trainer."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch


@dataclass
class TokenBatch:
    """N sequences right-padded to length L. Position t holds the prediction of token t+1.

    tokens:        [N, L] prompt + response token ids, then padding
    targets:       [N, L] tokens shifted left by one (the token each position predicts)
    loss_mask:     [N, L] 1.0 where the target is a response token
    advantages:    [N] or [N, L]
    old_log_probs: [N, L] log pi_old(target) from the trainer before this update (None until set)
    ref_log_probs: [N, L] log pi_ref(target) from the frozen reference (None without KL)
    old_values:    [N, L] critic values before this update (PPO)
    returns:       [N, L] value targets (PPO)
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def select(self, index: slice | torch.Tensor) -> "TokenBatch":
        return replace(self, **{f.name: None if getattr(self, f.name) is None
                                else getattr(self, f.name)[index] for f in fields(self)})

    def to(self, device: torch.device) -> "TokenBatch":
        return replace(self, **{f.name: None if getattr(self, f.name) is None
                                else getattr(self, f.name).to(device) for f in fields(self)})

    @property
    def num_response_tokens(self) -> float:
        return float(self.loss_mask.sum())

    def sequence_lengths(self) -> list[int]:
        """Tokens each row needs: through its last response token (prompt + response)."""
        positions = torch.arange(self.loss_mask.shape[1])
        last = torch.where(self.loss_mask > 0, positions, -1).max(dim=1).values
        return [int(x) + 2 for x in last]  # position x predicts token x+1, the last response token

    def trim(self, length: int) -> "TokenBatch":
        """The first `length` positions of every [N, L] field ([N] advantages are kept)."""
        return replace(self, **{
            f.name: None if (value := getattr(self, f.name)) is None
            else value[:, :length] if value.ndim == 2 else value for f in fields(self)})


def token_budget_ranges(lengths: list[int], max_tokens: int, pad_to_multiple_of: int = 1
                        ) -> list[tuple[int, int]]:
    """Contiguous [start, stop) row ranges for dynamic micro-batches (--use-dynamic-batch-size).

    A range's cost is rows x its longest sequence rounded up to `pad_to_multiple_of` (what its
    padded [rows, length] tensors hold); each range is the longest run from its start whose
    cost stays <= max_tokens. Rows keep their order, so the split is deterministic and a pass
    over the ranges sees every row exactly once. Raises ValueError for a row that alone exceeds
    max_tokens.
    """
    ranges, start = [], 0
    while start < len(lengths):
        stop, longest = start, 0
        while stop < len(lengths):
            padded = -(-max(longest, lengths[stop]) // pad_to_multiple_of) * pad_to_multiple_of
            if padded * (stop - start + 1) > max_tokens:
                break
            longest, stop = max(longest, lengths[stop]), stop + 1
        if stop == start:
            raise ValueError(f"a sequence of {lengths[start]} tokens (row {start}) exceeds "
                             f"--max-tokens-per-gpu={max_tokens}")
        ranges.append((start, stop))
        start = stop
    return ranges


def pack(prompts: list[list[int]], responses: list[list[int]], advantages: torch.Tensor,
         pad_id: int, pad_to_multiple_of: int = 1) -> TokenBatch:
    """Right-pad prompt+response; mask the positions whose target is a response token."""
    if len(prompts) != len(responses) or len(prompts) != advantages.shape[0]:
        raise ValueError("prompts, responses and advantages must have the same length")
    empty = [i for i, prompt in enumerate(prompts) if not prompt]
    if empty:
        raise ValueError(f"empty prompt at rows {empty[:5]}: a response needs a prompt token to follow")
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    seq_len = max(lengths) + 1  # one spare position so the last response token is a target
    seq_len = -(-seq_len // pad_to_multiple_of) * pad_to_multiple_of
    tokens = torch.full((len(prompts), seq_len), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(prompts), seq_len), dtype=torch.float32)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        tokens[row, : len(prompt) + len(response)] = torch.tensor(prompt + response, dtype=torch.long)
        # position t predicts token t+1: response tokens are predicted from len(prompt)-1 on
        loss_mask[row, len(prompt) - 1 : len(prompt) - 1 + len(response)] = 1.0
    targets = torch.roll(tokens, shifts=-1, dims=1)
    targets[:, -1] = pad_id
    return TokenBatch(tokens=tokens, targets=targets, loss_mask=loss_mask, advantages=advantages)
