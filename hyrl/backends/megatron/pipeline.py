"""Pipeline parallelism (PP > 1): micro-batches through megatron-core's pipeline schedules
(1F1B; interleaved over the chunks under virtual pipeline stages; or forward only), and the
last stage's results handed to every stage. Without PP none of this runs: `pipelined` is
False and the trained model loops over its micro-batches itself."""

from __future__ import annotations

from dataclasses import replace

import torch


def pipelined() -> bool:
    """Whether this run splits the model's layers over pipeline stages (PP > 1)."""
    from megatron.core import parallel_state

    return parallel_state.get_pipeline_model_parallel_world_size() > 1


def run_pipeline(
    chunks: list,
    micro_batches: list,
    forward,
    on_last_stage,
    forward_only: bool,
    device: torch.device,
) -> list[dict]:
    """Every (micro-batch, rows) through megatron's pipeline schedule: `forward(model,
    micro_batch)` is a chunk's forward pass (the model's last layer on the last stage, the
    activations elsewhere), `on_last_stage(micro_batch, rows, output)` turns the last stage's
    output into (loss, stats dict); the stats of every micro-batch come back on the last stage,
    [] on the others (collective over the pipeline group)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    micro_batches = interleavable(micro_batches, len(chunks))

    def forward_step(data_iterator, model):
        micro_batch, rows = next(data_iterator)
        micro_batch = micro_batch.to(device)
        output = forward(model, micro_batch)

        def loss_func(output_tensor):
            loss, stats = on_last_stage(micro_batch, rows, output_tensor)
            # (loss, token count, stats): with calculate_per_token_loss megatron leaves the
            # loss as it is (hyrl's is already a share of the global token mean)
            return loss, torch.ones((), dtype=torch.int, device=device), stats

        return output, loss_func

    results = get_forward_backward_func()(
        forward_step_func=forward_step,
        # the interleaved schedule runs each chunk's forward over every micro-batch in
        # order, from an iterator of its own
        data_iterator=(
            iter(micro_batches) if len(chunks) == 1 else [iter(micro_batches) for _ in chunks]
        ),
        model=chunks,
        num_microbatches=len(micro_batches),
        # the activations' shape between stages: [T, 1] packed (every micro-batch packs one T)
        seq_length=max(
            mb.tokens.shape[1] if mb.packing is None else mb.packing.total
            for mb, _ in micro_batches
        ),
        micro_batch_size=max(1 if mb.packing else len(mb) for mb, _ in micro_batches),
        forward_only=forward_only,
    )
    return list(results or [])  # the last stage's list of stats; nothing elsewhere


def interleavable(micro_batches: list, num_chunks: int) -> list:
    """Under virtual pipeline stages, the micro-batches grown by loss-free copies of the
    last one (0 rows of the batch: they add nothing) to a multiple of PP: megatron-core
    0.16.1's interleaved schedule runs groups of PP micro-batches
    (microbatch_group_size_per_vp_stage) and refuses any other count. Validation refuses
    fixed micro-batches that would need this; token-packed ones and other B of a batch
    schedule get it here."""
    from megatron.core import parallel_state

    if num_chunks == 1 or not micro_batches:
        return micro_batches
    pp = parallel_state.get_pipeline_model_parallel_world_size()
    missing = -len(micro_batches) % pp
    last, _ = micro_batches[-1]
    filler = replace(last.without_loss(), packing=last.packing)  # the same shape
    return micro_batches + [(filler, 0)] * missing


def from_last_stage(value):
    """The last pipeline stage's value (a tensor, or a dict of them) on every stage of this
    rank's pipeline (collective over the pipeline group); the value itself without PP."""
    if not pipelined():
        return value
    from megatron.core import parallel_state

    from hyrl.backends.megatron.collectives import collective_device

    group = parallel_state.get_pipeline_model_parallel_group()
    last = torch.distributed.get_process_group_ranks(group)[-1]
    holder = [value]
    torch.distributed.broadcast_object_list(
        holder, src=last, group=group, device=collective_device(group)
    )
    return holder[0]
