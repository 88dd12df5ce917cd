"""Pack variable-length (prompt, response) pairs into padded token tensors for the trainer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

# One row of RoutedExperts: (start position, int16 expert ids [T, layers, top-k]).
ExpertRow = tuple[int, torch.Tensor]


@dataclass
class TokenBatch:
    """N sequences right-padded to length L. Position t holds the prediction of token t+1.

    tokens:        [N, L] prompt + response token ids, then padding
    targets:       [N, L] tokens shifted left by one (the token each position predicts)
    loss_mask:     [N, L] 1.0 where the target is a response token the model sampled
    advantages:    [N] or [N, L]
    old_log_probs: [N, L] log pi_old(target) from the trainer before this update (None until set)
    ref_log_probs: [N, L] log pi_ref(target) from the frozen reference (None without KL)
    old_values:    [N, L] critic values before this update (PPO)
    returns:       [N, L] value targets (PPO)
    rollout_log_probs: [N, L] log pi_rollout(target), the engine's own, on response positions
    pg_weights:    [N, L] per-token weight of the policy-gradient term (--use-tis/--use-mis)
    loss_weights:  [N, L] per-token factor of the actor's loss terms, summing over the global
                   batch as --loss-agg-mode says (losses.loss_weights); None: token-mean
    routed_experts: RoutedExperts, the expert ids the engine routed the token at each position
                   to (--use-rollout-routing-replay), behaving as an [N, L, layers, top-k] field;
                   its `dense()` gives the int16 tensor, -1 where the engine gave none
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    rollout_log_probs: torch.Tensor | None = None
    pg_weights: torch.Tensor | None = None
    loss_weights: torch.Tensor | None = None
    routed_experts: RoutedExperts | None = None
    # a backend's layout of exactly these rows as one packed sequence (--qkv-format thd), set
    # on micro-batches; moving the batch keeps it, any change of its rows or positions drops it
    packing: Any = None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def _map_fields(self, fn: Callable[[Any], Any]) -> TokenBatch:
        """This batch with fn applied to every field that is set (a None field stays None)."""
        mapped: dict[str, Any] = {  # Tensor, RoutedExperts or None by field
            f.name: None if (value := getattr(self, f.name)) is None else fn(value)
            for f in fields(self)
            if f.name != "packing"
        }
        return replace(self, **mapped, packing=None)

    def select(self, index: slice | torch.Tensor) -> TokenBatch:
        return self._map_fields(lambda value: value[index])

    def to(self, device: torch.device) -> TokenBatch:
        return replace(self._map_fields(lambda value: value.to(device)), packing=self.packing)

    @property
    def num_response_tokens(self) -> float:
        return float(self.loss_mask.sum())

    def sequence_lengths(self) -> list[int]:
        """Tokens each row needs: through its last response token (prompt + response)."""
        positions = torch.arange(self.loss_mask.shape[1], device=self.loss_mask.device)
        last = torch.where(self.loss_mask > 0, positions, -1).max(dim=1).values
        return [int(x) + 2 for x in last]  # position x predicts token x+1, the last response token

    def without_loss(self) -> TokenBatch:
        """This batch with no loss positions and no advantage: it runs forward and backward,
        the collectives in them included, and adds nothing."""
        return replace(
            self,
            loss_mask=torch.zeros_like(self.loss_mask),
            advantages=torch.zeros_like(self.advantages),
            loss_weights=None if self.loss_weights is None else torch.zeros_like(self.loss_weights),
            packing=None,
        )

    def with_rows(self, rows: int) -> TokenBatch:
        """This batch grown to `rows` rows by copies of its first row without loss (see
        without_loss)."""
        extra = rows - len(self)
        if extra <= 0:
            return self
        first = self.select(slice(0, 1)).without_loss()

        def grow(value, copy):
            if value is None:
                return None
            if isinstance(value, RoutedExperts):
                return RoutedExperts(
                    value.rows + copy.rows * extra, value.seq_len, value.layers, value.top_k
                )
            return torch.cat([value, copy.expand(extra, *value.shape[1:])])

        return replace(
            self,
            **{
                f.name: grow(getattr(self, f.name), getattr(first, f.name))
                for f in fields(self)
                if f.name != "packing"
            },
            packing=None,
        )

    def trim(self, length: int) -> TokenBatch:
        """The first `length` positions of every [N, L, ...] field ([N] advantages are kept)."""
        return self._map_fields(lambda value: value[:, :length] if value.ndim >= 2 else value)


class RoutedExperts:
    """TokenBatch's routed_experts: per row, the engine's expert ids, unpadded and held only
    for the rows this rank needs (each data-parallel rank receives its own rows).

    rows[i] is None (not held here) or (start, ids): int16 ids [T, layers, top-k] of sequence
    positions start .. start + T - 1. Row slices (`select`) and position cuts (`trim`) behave as
    on an [N, L, layers, top-k] tensor; `dense()` builds that int16 tensor, -1 where no ids.
    """

    ndim = 4

    def __init__(self, rows: list[ExpertRow | None], seq_len: int, layers: int, top_k: int):
        self.rows, self.seq_len, self.layers, self.top_k = rows, seq_len, layers, top_k

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.rows), self.seq_len, self.layers, self.top_k)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        rows, positions = index if isinstance(index, tuple) else (index, slice(None))
        if (
            not isinstance(rows, slice)
            or not isinstance(positions, slice)
            or positions.start not in (None, 0)
            or positions.step not in (None, 1)
        ):
            raise TypeError(
                f"RoutedExperts takes [row slice] or [row slice, :length], got {index!r}"
            )
        seq_len = self.seq_len if positions.stop is None else min(self.seq_len, positions.stop)
        return RoutedExperts(self.rows[rows], seq_len, self.layers, self.top_k)

    def to(self, device) -> RoutedExperts:
        return self  # stays in host memory; dense() goes to the device per micro-batch

    def dense(self) -> torch.Tensor:
        """[n, L, layers, top-k] int16, -1 where the engine gave no ids (padding, the last
        response token, prompt positions an engine left out)."""
        out = torch.full(self.shape, -1, dtype=torch.int16)
        for row, held in enumerate(self.rows):
            if held is None:
                raise RuntimeError(
                    f"hyrl bug: the routing of row {row} of this micro-batch was "
                    "not sent to this rank"
                )
            start, ids = held
            stop = min(start + ids.shape[0], self.seq_len)
            if stop > start:
                out[row, start:stop] = ids[: stop - start]
        return out


def split_to_count(ranges: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """The same rows in `count` contiguous ranges: the range with the most rows is halved until
    there are `count` of them (a range of one row is never split). Fewer ranges come back when
    there are fewer rows than `count`; the caller pads with micro-batches that carry no loss.
    Used so that every data-parallel rank runs the same number of micro-batches (the MoE
    dispatch under EP is a collective of every forward pass)."""
    ranges = list(ranges)
    while len(ranges) < count:
        widest = max(range(len(ranges)), key=lambda i: ranges[i][1] - ranges[i][0])
        start, stop = ranges[widest]
        if stop - start < 2:
            break
        middle = (start + stop) // 2
        ranges[widest : widest + 1] = [(start, middle), (middle, stop)]
    return ranges


def token_budget_ranges(
    lengths: list[int], max_tokens: int, pad_to_multiple_of: int = 1, packed: bool = False
) -> list[tuple[int, int]]:
    """Contiguous [start, stop) row ranges for dynamic micro-batches (--use-dynamic-batch-size).

    A range's cost is rows x its longest sequence rounded up to `pad_to_multiple_of` (what its
    padded [rows, length] tensors hold), or packed (--qkv-format thd) its sequences' summed
    lengths rounded up; each range is the longest run from its start whose cost stays <=
    max_tokens. Rows keep their order, so the split is deterministic and a pass
    over the ranges sees every row exactly once. Raises ValueError for a row that alone exceeds
    max_tokens.
    """
    ranges, start = [], 0
    while start < len(lengths):
        stop, longest, summed = start, 0, 0
        while stop < len(lengths):
            if packed:
                cost = -(-(summed + lengths[stop]) // pad_to_multiple_of) * pad_to_multiple_of
            else:
                padded = -(-max(longest, lengths[stop]) // pad_to_multiple_of) * pad_to_multiple_of
                cost = padded * (stop - start + 1)
            if cost > max_tokens:
                break
            longest, summed = max(longest, lengths[stop]), summed + lengths[stop]
            stop += 1
        if stop == start:
            raise ValueError(
                f"a sequence of {lengths[start]} tokens (row {start}) exceeds "
                f"--max-tokens-per-gpu={max_tokens}"
            )
        ranges.append((start, stop))
        start = stop
    return ranges


def pack(
    prompts: list[list[int]],
    responses: list[list[int]],
    advantages: torch.Tensor,
    pad_id: int,
    pad_to_multiple_of: int = 1,
    rollout_log_probs: list[list[float]] | None = None,
    routed_experts: list[torch.Tensor | None] | None = None,
    sampled: list[list[int]] | None = None,
) -> TokenBatch:
    """Right-pad prompt+response; mask the positions whose target is a response token the model
    sampled.

    rollout_log_probs: the engine's log-prob of each response token, placed on the positions
        that predict them (those of the mask).
    routed_experts: per row None (a row this rank does not need) or [T, layers, top-k] expert
        ids of sequence positions len(prompt)+len(response)-1-T ... len(prompt)+len(response)-2
        (see hyrl.rollout.base.Generation); becomes a RoutedExperts.
    sampled: per response token 1 where the model sampled it, 0 where an environment wrote it
        (a tool's output): those positions stay out of the loss mask. None: every token.
    """
    if len(prompts) != len(responses) or len(prompts) != advantages.shape[0]:
        raise ValueError("prompts, responses and advantages must have the same length")
    for name, per_row in (
        ("rollout_log_probs", rollout_log_probs),
        ("routed_experts", routed_experts),
        ("sampled", sampled),
    ):
        if per_row is not None and len(per_row) != len(prompts):
            raise ValueError(f"{name} has {len(per_row)} rows for {len(prompts)} sequences")
    empty = [i for i, prompt in enumerate(prompts) if not prompt]
    if empty:
        raise ValueError(
            f"empty prompt at rows {empty[:5]}: a response needs a prompt token to follow"
        )
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    seq_len = max(lengths) + 1  # one spare position so the last response token is a target
    seq_len = -(-seq_len // pad_to_multiple_of) * pad_to_multiple_of
    # Each field is built as lists and made a tensor once: a copy per row cost about 2 ms a
    # step at 128 rows (measured with py-spy on the tiny recipe).
    tokens = torch.tensor(
        [
            list(prompt) + list(response) + [pad_id] * (seq_len - length)
            for prompt, response, length in zip(prompts, responses, lengths)
        ],
        dtype=torch.long,
    )
    # position t predicts token t+1: response tokens are predicted from len(prompt)-1 on
    if sampled is None:  # every response token was sampled
        marks_of = [[1.0] * len(response) for response in responses]
    else:
        for row, (response, marks) in enumerate(zip(responses, sampled)):
            if len(marks) != len(response) or not set(marks) <= {0, 1}:
                raise ValueError(
                    f"row {row}: the sampled mask must hold one 0 or 1 per response token "
                    f"({len(response)}), got {len(marks)} values {sorted(set(marks))[:4]}"
                )
        marks_of = [[float(mark) for mark in marks] for marks in sampled]
    loss_mask = torch.tensor(
        [_on_response(marks, len(prompt), seq_len) for prompt, marks in zip(prompts, marks_of)],
        dtype=torch.float32,
    )
    targets = torch.roll(tokens, shifts=-1, dims=1)
    targets[:, -1] = pad_id
    batch = TokenBatch(tokens=tokens, targets=targets, loss_mask=loss_mask, advantages=advantages)
    if rollout_log_probs is not None:
        for row, (response, values) in enumerate(zip(responses, rollout_log_probs)):
            if len(values) != len(response):
                raise ValueError(
                    f"row {row}: {len(values)} rollout log-probs for "
                    f"{len(response)} response tokens"
                )
        batch.rollout_log_probs = torch.tensor(
            [
                _on_response(list(values), len(prompt), seq_len)
                for prompt, values in zip(prompts, rollout_log_probs)
            ],
            dtype=torch.float32,
        )
    if routed_experts is not None:
        batch.routed_experts = _place_routed_experts(prompts, responses, routed_experts, seq_len)
    return batch


def _on_response(values: list[float], prompt_len: int, seq_len: int) -> list[float]:
    """A row of seq_len zeros with `values` on the positions that predict the response's
    tokens: len(prompt)-1 on."""
    start = prompt_len - 1
    return [0.0] * start + values + [0.0] * (seq_len - start - len(values))


def _place_routed_experts(prompts, responses, routed_experts, seq_len: int) -> RoutedExperts:
    """The rows' ids as int16 with their start positions (see `pack`)."""
    shapes = {tuple(r.shape[1:]) for r in routed_experts if r is not None}
    if len(shapes) > 1:
        raise ValueError(f"routed_experts rows differ in [layers, top-k]: {sorted(shapes)}")
    layers, top_k = shapes.pop() if shapes else (0, 0)
    rows: list[ExpertRow | None] = []
    for row, (prompt, response, ids) in enumerate(zip(prompts, responses, routed_experts)):
        if ids is None:
            rows.append(None)
            continue
        through_model = len(prompt) + len(response) - 1  # the last token is never fed back
        if ids.shape[0] > through_model:
            raise ValueError(
                f"row {row}: routed experts for {ids.shape[0]} tokens, but only "
                f"{through_model} went through the model (prompt {len(prompt)} + "
                f"response {len(response)} - 1)"
            )
        if ids.numel() and int(ids.max()) > torch.iinfo(torch.int16).max:
            raise ValueError(f"row {row}: expert id {int(ids.max())} does not fit int16")
        rows.append((through_model - ids.shape[0], ids.to(torch.int16)))
    return RoutedExperts(rows, seq_len, layers, top_k)
