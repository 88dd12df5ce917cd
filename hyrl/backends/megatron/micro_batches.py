"""One rank's rows cut into micro-batches: --micro-batch-size rows, or runs of rows packed to
--max-tokens-per-gpu, trimmed and padded so that every rank's expert dispatch and every
pipeline stage meet micro-batches of the shapes they need (agreed across the data-parallel
ranks, collectively), and under --qkv-format thd each one's packed layout; and the outputs of
trimmed micro-batches laid back out as the batch's rows (`cat_padded`)."""

from __future__ import annotations

from dataclasses import replace

import torch

from hyrl.algorithms.batch import TokenBatch, split_to_count, token_budget_ranges
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.backends.megatron.packing import PackedRows
from hyrl.backends.megatron.pipeline import pipelined


def split_micro_batches(
    batch: TokenBatch, optim: OptimizerSettings, dispatcher: str, device: torch.device
) -> list[tuple[TokenBatch, int]]:
    """(micro-batch, rows of `batch` it holds) pairs (see _padded_micro_batches); `dispatcher`
    is the model's --moe-token-dispatcher-type. Under --qkv-format thd each micro-batch
    carries its rows' packed layout (`packing`): their own lengths end to end, a multiple of
    TP tokens, and where the expert dispatch (the allgather dispatcher under EP) or the
    pipeline needs equal shapes, the most tokens any rank or micro-batch packs (collective
    over DP under EP)."""
    from megatron.core import parallel_state

    parts = list(_padded_micro_batches(batch, optim, dispatcher, device))
    if not optim.packed_sequences or not parts:
        return parts
    multiple = optim.pad_to_multiple_of
    totals = [
        PackedRows.needed(part.sequence_lengths(), part.tokens.shape[1], multiple)
        for part, _ in parts
    ]
    if (
        parallel_state.get_expert_model_parallel_world_size() > 1 and dispatcher == "allgather"
    ):  # every DP rank runs as many micro-batches here (_padded_micro_batches)
        totals = agreed_maxima(totals, device)
    if pipelined():
        totals = [max(totals)] * len(totals)
    return [
        (
            replace(
                part,
                packing=PackedRows.of(
                    part.sequence_lengths(), part.tokens.shape[1], multiple, total
                ),
            ),
            rows,
        )
        for (part, rows), total in zip(parts, totals)
    ]


def _padded_micro_batches(
    batch: TokenBatch, optim: OptimizerSettings, dispatcher: str, device: torch.device
):
    """(micro-batch, rows of `batch` it holds) pairs: --micro-batch-size rows, or with
    --use-dynamic-batch-size contiguous runs of rows packed to --max-tokens-per-gpu and
    trimmed to their longest sequence.

    Under EP > 1 every data-parallel rank runs the same number of micro-batches (collective):
    the expert dispatch of each forward pass is a collective over the EP ranks; with
    megatron's allgather dispatcher, which gathers equal token counts, also of the same
    shapes. A rank's micro-batch is then grown by rows and positions that carry no loss
    (TokenBatch.with_rows), and a rank with fewer rows than micro-batches runs loss-free
    copies; the first `rows` rows of each micro-batch are the real ones. Under PP > 1 all
    micro-batches of a pass share one shape (the pipeline's activations are exchanged at a
    fixed shape)."""
    from megatron.core import parallel_state

    budget = optim.max_tokens_per_micro_batch
    if budget is None:
        size = optim.micro_batch_size
        for start in range(0, len(batch), size):
            part = batch.select(slice(start, start + size))
            yield part, len(part)
        return
    lengths = batch.sequence_lengths()
    multiple = optim.pad_to_multiple_of
    ranges = token_budget_ranges(lengths, budget, multiple, optim.packed_sequences)
    expert_parallel = parallel_state.get_expert_model_parallel_world_size() > 1
    if expert_parallel:
        ranges = split_to_count(ranges, agreed_count(len(ranges), device))
    # (rows, length): each range trimmed to its longest sequence, in multiples for SP
    shapes = [
        (
            stop - start,
            min(-(-max(lengths[start:stop]) // multiple) * multiple, batch.tokens.shape[1]),
        )
        for start, stop in ranges
    ]
    if expert_parallel:
        if dispatcher == "allgather":
            shapes = agreed_shapes(shapes, device)  # it gathers equal token counts
        else:  # alltoall exchanges any counts: only the number of micro-batches is agreed
            shapes += [shapes[-1] if shapes else (1, batch.tokens.shape[1])] * (
                agreed_count(len(shapes), device) - len(shapes)
            )
    if pipelined() and shapes:
        # stages pass activations of one fixed shape (megatron allows variable lengths
        # only with the alltoall dispatcher): every micro-batch grows to the largest
        shapes = [(max(r for r, _ in shapes), max(n for _, n in shapes))] * len(shapes)
    for index, (rows, length) in enumerate(shapes):
        if index < len(ranges):
            start, stop = ranges[index]
            yield batch.select(slice(start, stop)).trim(length).with_rows(rows), stop - start
        else:  # this rank has fewer rows than the agreed number of micro-batches
            yield batch.select(slice(0, 1)).trim(length).without_loss().with_rows(rows), 0


def agreed_maxima(values: list[int], device: torch.device) -> list[int]:
    """Each value the largest over the DP ranks (collective; every rank passes as many)."""
    from megatron.core import parallel_state

    if parallel_state.get_data_parallel_world_size() == 1:
        return values
    local = torch.tensor(values, dtype=torch.int64, device=device)
    torch.distributed.all_reduce(
        local, op=torch.distributed.ReduceOp.MAX, group=parallel_state.get_data_parallel_group()
    )
    return [int(v) for v in local.cpu()]


def agreed_shapes(shapes: list[tuple[int, int]], device: torch.device) -> list[tuple[int, int]]:
    """The (rows, length) of every micro-batch, the largest over the DP ranks (collective;
    every rank passes as many shapes, or fewer when it has fewer rows: agreed_count)."""
    from megatron.core import parallel_state

    count = agreed_count(len(shapes), device)
    local = torch.zeros((count, 2), dtype=torch.int64, device=device)
    if shapes:
        local[: len(shapes)] = torch.tensor(shapes, dtype=torch.int64)
    torch.distributed.all_reduce(
        local, op=torch.distributed.ReduceOp.MAX, group=parallel_state.get_data_parallel_group()
    )
    return [(int(r), int(n)) for r, n in local.cpu()]


def agreed_count(local_count: int, device: torch.device) -> int:
    """The most micro-batches any data-parallel rank needs (collective over DP): every rank
    runs that many, so the expert dispatch of each forward pass meets on every EP rank."""
    from megatron.core import parallel_state

    if parallel_state.get_data_parallel_world_size() == 1:
        return local_count
    count = torch.tensor([local_count], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(
        count, op=torch.distributed.ReduceOp.MAX, group=parallel_state.get_data_parallel_group()
    )
    return int(count.item())


def pad_to(output: torch.Tensor, length: int) -> torch.Tensor:
    """A trimmed micro-batch's [n, l, ...] output zero-padded back to [n, length, ...]."""
    if output.shape[1] == length:
        return output
    pad = output.new_zeros((output.shape[0], length - output.shape[1], *output.shape[2:]))
    return torch.cat([output, pad], dim=1)


def cat_padded(parts: list[tuple[torch.Tensor, ...]], length: int) -> tuple[torch.Tensor, ...]:
    """Micro-batches' tuples of [n, l] outputs as [N, length] tensors in host memory."""
    return tuple(
        torch.cat([pad_to(part[i], length) for part in parts]).cpu() for i in range(len(parts[0]))
    )
