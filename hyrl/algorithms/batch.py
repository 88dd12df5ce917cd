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
