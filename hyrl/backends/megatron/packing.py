"""Packed sequences (--qkv-format thd): a micro-batch's rows laid end to end as one sequence.

Padded rows ([n, l] tokens, a dense [l, l] mask) spend every layer and the attention on
padding: at 1k prompt + 8k response tokens most of a micro-batch can be padding. Packed, the
model sees [1, T] tokens, T = the rows' own lengths summed (then rounded up: a multiple of TP
under sequence parallelism, or a total agreed with other ranks), and megatron's
PackedSeqParams (cu_seqlens) tell the attention where each sequence starts: the Transformer
Engine spec runs a varlen (THD) kernel, the local spec a block-diagonal causal mask
(model.PackedDotProductAttention); megatron applies rotary positions per cu_seqlens segment.
Tokens past T's last sequence form one padding segment that attends only to itself.

Only the model's input and output are packed: log-probs and values are unpacked back to the
[n, l] layout (`unpack`), so losses, masks and everything after them are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

QKV_FORMATS = ("bshd", "thd")  # padded rows (batch, sequence, heads, dim) / packed tokens


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class PackedRows:
    """Where each of n padded rows of width `width` sits in one packed sequence of `total`.

    lengths: tokens kept of each row (its prompt + response, >= 1), in row order."""

    lengths: tuple[int, ...]
    width: int
    total: int

    @classmethod
    def of(
        cls, lengths: list[int], width: int, multiple: int = 1, total: int | None = None
    ) -> PackedRows:
        """Rows of these sequence lengths packed into `total` tokens (None: their sum rounded
        up to `multiple`). A length is at least 1 (a row without loss still runs one token) and
        at most the width."""
        kept = tuple(min(max(1, int(n)), width) for n in lengths)
        needed = round_up(sum(kept), multiple)
        if total is None:
            total = needed
        if total < needed or total % multiple:
            raise ValueError(
                f"a packed total of {total} tokens for rows of {sum(kept)} tokens (multiple of "
                f"{multiple}): it must be a multiple of {multiple} and at least {needed}"
            )
        return cls(kept, width, total)

    @staticmethod
    def needed(lengths: list[int], width: int, multiple: int = 1) -> int:
        """The packed total `of` gives these rows without an agreed total."""
        return round_up(sum(min(max(1, int(n)), width) for n in lengths), multiple)

    @property
    def real_tokens(self) -> int:
        return sum(self.lengths)

    @property
    def segments(self) -> list[int]:
        """Lengths of the packed sequence's segments: each row, then the padding (if any)."""
        pad = self.total - self.real_tokens
        return list(self.lengths) + ([pad] if pad else [])

    @property
    def max_seqlen(self) -> int:
        return max(self.segments)

    @cached_property
    def _index(self) -> torch.Tensor:
        """Flat [n * width] position of each packed real token, in packed order."""
        return torch.cat(
            [
                row * self.width + torch.arange(n, dtype=torch.long)
                for row, n in enumerate(self.lengths)
            ]
        )

    def cu_seqlens(self, device: torch.device) -> torch.Tensor:
        """int32 [segments + 1]: where each segment starts, then the total (megatron/TE's form)."""
        starts = torch.tensor([0, *self.segments], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        return starts.to(device)

    def positions(self, device: torch.device) -> torch.Tensor:
        """[1, total] position of each token within its own segment (0 at every start)."""
        return torch.cat([torch.arange(n, device=device) for n in self.segments])[None]

    def pack(self, padded: torch.Tensor, fill: float | int | bool = 0) -> torch.Tensor:
        """[n, width, ...] -> [1, total, ...]: the rows' kept tokens end to end, then `fill`."""
        rows, width = padded.shape[:2]
        if (rows, width) != (len(self.lengths), self.width):
            raise ValueError(
                f"packing [{rows}, {width}, ...] with a layout of {len(self.lengths)} rows of "
                f"width {self.width}"
            )
        flat = padded.reshape(rows * width, *padded.shape[2:])
        out = flat.new_full((self.total, *padded.shape[2:]), fill)
        out[: self.real_tokens] = flat[self._index.to(padded.device)]
        return out[None]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, total, ...] -> [n, width, ...], zero past each row's length (differentiable)."""
        if packed.shape[:2] != (1, self.total):
            raise ValueError(
                f"unpacking {tuple(packed.shape)} with a layout of {self.total} packed tokens"
            )
        rest = packed.shape[2:]
        out = packed.new_zeros((len(self.lengths) * self.width, *rest))
        out = out.index_copy(0, self._index.to(packed.device), packed[0, : self.real_tokens])
        return out.view(len(self.lengths), self.width, *rest)

    def packed_seq_params(self, device: torch.device):
        """megatron-core's PackedSeqParams for this layout (THD: one cu_seqlens for q and kv)."""
        from megatron.core.packed_seq_params import PackedSeqParams

        cu_seqlens = self.cu_seqlens(device)
        return PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=cu_seqlens,
            cu_seqlens_kv=cu_seqlens,
            max_seqlen_q=self.max_seqlen,
            max_seqlen_kv=self.max_seqlen,
        )


def block_causal_mask(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """[1, 1, total, total] bool, True where a query may NOT attend (megatron's convention):
    a later position or another segment of the packed sequence."""
    device = cu_seqlens.device
    segment = torch.searchsorted(
        cu_seqlens[1:].long(), torch.arange(total, device=device), right=True
    )
    positions = torch.arange(total, device=device)
    other = segment[:, None] != segment[None, :]
    later = positions[None, :] > positions[:, None]
    return (other | later)[None, None]
