"""The parallel layout of the trainer: tensor, pipeline (virtual stages included) and expert
parallelism, how the layers and heads split over them, activation recomputation, precision,
megatron's DDP and distributed optimizer, and the machine facts `hyrl plan` checks against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyrl.config.errors import _fail, divisors
from hyrl.config.kinds import AppliesOnlyWith, _on, _opt, _set

if TYPE_CHECKING:  # not imported when run: fields.py imports this module
    from hyrl.config.concerns.model import ModelFlags


@dataclass
class ParallelFlags:
    tensor_model_parallel_size: int = _opt(
        1, "tensor-parallel size TP (ranks)", "parallelism", resume_may_change=True
    )
    pipeline_model_parallel_size: int = _opt(
        1, "pipeline-parallel size PP (ranks)", "parallelism", resume_may_change=True
    )
    num_layers_per_virtual_pipeline_stage: int | None = _opt(
        None,
        "layers in each virtual pipeline stage (layers), as Megatron's flag: each pipeline rank "
        "holds V = L / PP / N model chunks, run by megatron's interleaved 1F1B schedule; "
        "needs PP > 1; none = one chunk per rank",
        "parallelism",
        resume_may_change=True,
    )
    num_virtual_stages_per_pipeline_rank: int | None = _opt(
        None,
        "virtual pipeline stages V per pipeline rank (chunks), as Megatron's flag: the other "
        "way to set --num-layers-per-virtual-pipeline-stage (N = L / PP / V); needs PP > 1; "
        "none = one chunk per rank",
        "parallelism",
        resume_may_change=True,
    )
    expert_model_parallel_size: int = _opt(
        1, "expert-parallel size EP (ranks)", "parallelism", resume_may_change=True
    )
    expert_tensor_parallel_size: int = _opt(
        1, "tensor-parallel size inside each expert (ranks)", "parallelism", resume_may_change=True
    )
    sequence_parallel: bool = _opt(
        False,
        "shard activations along the sequence across TP ranks (on/off; needs TP > 1)",
        "parallelism",
        resume_may_change=True,
    )
    recompute_granularity: str | None = _opt(
        None,
        "activation recomputation in the backward pass (name): full = whole layers, "
        "selective = the attention core; none = keep activations",
        "parallelism",
        choices=("full", "selective"),
    )
    recompute_method: str | None = _opt(
        None,
        "which layers full recomputation covers (name): uniform = groups of "
        "--recompute-num-layers, block = the first --recompute-num-layers per pipeline stage; "
        "none = uniform with full recomputation",
        "parallelism",
        choices=("uniform", "block"),
    )
    recompute_num_layers: int | None = _opt(
        None,
        "layers per recomputation group (uniform) or layers recomputed (block) (layers); "
        "none = 1 with full recomputation",
        "parallelism",
    )
    distributed_timeout_minutes: float = _opt(
        10.0,
        "timeout of the trainer's NCCL (gloo on CPU) collectives (minutes, > 0), as "
        "Megatron's flag; ranks waiting for rank 0's generation, rewards and evaluation wait "
        "in a gloo group of their own without it",
        "parallelism",
        resume_may_change=True,
    )
    use_distributed_optimizer: bool = _opt(
        False,
        "shard the fp32 main params and Adam states over data-parallel ranks (expert "
        "parameters over expert-data-parallel ranks): megatron-core's distributed optimizer, "
        "gradients reduce-scattered (on/off)",
        "parallelism",
    )
    bf16: bool = _opt(
        False,
        "bfloat16 weights and activations, fp32 main params and Adam states in the "
        "optimizer (megatron's Float16Module and mixed-precision optimizer) (on/off); off = "
        "float32 throughout",
        "parallelism",
    )
    accumulate_allreduce_grads_in_fp32: bool = _opt(
        True,
        "accumulate and reduce gradients in float32 buffers even under --bf16 (on/off)",
        "parallelism",
    )
    overlap_grad_reduce: bool = _opt(
        False,
        "start each gradient bucket's DP reduction as soon as its gradients are ready in "
        "the last micro-batch's backward pass (on/off)",
        "parallelism",
        resume_may_change=True,
    )
    ddp_bucket_size: int | None = _opt(
        None,
        "parameters per gradient-reduction bucket of megatron's DDP (elements); none = "
        "megatron's default (40M, or one bucket without overlap)",
        "parallelism",
        resume_may_change=True,
    )
    gpus_per_node: int | None = _opt(
        None,
        "GPUs per node (GPUs), for hyrl plan: TP and EP groups should not cross nodes; "
        "none = not checked",
        "parallelism",
    )
    gpu_memory_gib: float | None = _opt(
        None, "memory of one GPU (GiB), for hyrl plan's fit check; none = no check", "parallelism"
    )

    def data_parallel_size(self, world_size: int) -> int:
        """Data-parallel size DP = world size // (TP * PP)."""
        return world_size // (self.tensor_model_parallel_size * self.pipeline_model_parallel_size)


def virtual_pipeline_size(c: ParallelFlags, model: ModelFlags) -> int | None:
    """V model chunks per pipeline rank (megatron's virtual_pipeline_model_parallel_size),
    from either virtual-stage flag; None without them (one chunk)."""
    if c.num_virtual_stages_per_pipeline_rank is not None:
        return c.num_virtual_stages_per_pipeline_rank
    if c.num_layers_per_virtual_pipeline_stage is None:
        return None
    layers_per_rank = model.num_layers // c.pipeline_model_parallel_size
    return layers_per_rank // c.num_layers_per_virtual_pipeline_stage


@dataclass(frozen=True)
class ParallelView:
    """The parallelism concern's settings, resolved (`ResolvedConfig.parallel`): megatron's
    layout, recomputation, precision and the data-parallel machinery."""

    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    num_layers_per_virtual_pipeline_stage: int | None
    num_virtual_stages_per_pipeline_rank: int | None
    expert_model_parallel_size: int
    expert_tensor_parallel_size: int
    sequence_parallel: bool
    recompute_granularity: str | None
    recompute_method: str | None
    recompute_num_layers: int | None
    distributed_timeout_minutes: float
    use_distributed_optimizer: bool
    bf16: bool
    accumulate_allreduce_grads_in_fp32: bool
    overlap_grad_reduce: bool
    ddp_bucket_size: int | None
    gpus_per_node: int | None
    gpu_memory_gib: float | None
    virtual_pipeline_model_parallel_size: int | None  # V chunks per pipeline rank; None: one


POSITIVE_COUNTS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
)

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the virtual
# pipeline stages, only with a pipeline; --sequence-parallel, only with tensor parallelism.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[ParallelFlags], ...] = (
    AppliesOnlyWith(
        ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank"),
        "--pipeline-model-parallel-size > 1",
        lambda c: c.pipeline_model_parallel_size > 1,
        "virtual pipeline stages split each pipeline rank's layers, and there is no pipeline "
        "(PP={pipeline_model_parallel_size})",
        "--pipeline-model-parallel-size > 1, or no {flag}",
        _set,
    ),
    AppliesOnlyWith(
        ("sequence_parallel",),
        "--tensor-model-parallel-size > 1",
        lambda c: c.tensor_model_parallel_size > 1,
        "sequence parallelism needs tensor parallelism (TP=1 here)",
        "--sequence-parallel only with --tensor-model-parallel-size > 1",
        _on,
    ),
)
# The recompute settings, only with --recompute-granularity full: a tuple of their own, as
# hyrl.config.conditional_flags checks them later than the rows above.
RECOMPUTE_APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[ParallelFlags], ...] = (
    AppliesOnlyWith(
        ("recompute_method", "recompute_num_layers"),
        "--recompute-granularity full",
        lambda c: c.recompute_granularity == "full",
        "applies to --recompute-granularity full only",
        "leave it unset, or --recompute-granularity full",
    ),
)


def check_given(c: ParallelFlags) -> None:
    """The collectives' timeout."""
    if not c.distributed_timeout_minutes > 0:
        _fail(
            "distributed_timeout_minutes",
            c.distributed_timeout_minutes,
            "must be positive",
            "minutes > 0 (Megatron's default: 10)",
        )


def check_layout(
    c: ParallelFlags, world_size: int, *, model: ModelFlags, noise_scale_beta: float | None
) -> None:
    """TP, PP and EP against the world size and the model's layers, heads, vocabulary and
    experts; sequence parallelism under MoE with TP; DDP's overlapped reduction (against
    `noise_scale_beta`, the batch concern's --noise-scale-beta) and buckets."""
    tp, pp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size
    ep, etp = c.expert_model_parallel_size, c.expert_tensor_parallel_size
    if model.num_layers % pp != 0:
        _fail(
            "pipeline_model_parallel_size",
            pp,
            f"{model.num_layers} layers (--num-layers) do not split evenly into {pp} stages",
            f"a PP dividing {model.num_layers}: {divisors(model.num_layers)}",
        )
    if world_size % (tp * pp) != 0:
        _fail(
            "tensor_model_parallel_size",
            tp,
            f"world size {world_size} is not divisible by TP x PP = {tp} x {pp} = {tp * pp}",
            f"TP x PP dividing the world size {world_size}: TP in {divisors(world_size)}",
        )
    if model.num_attention_heads % tp != 0:
        _fail(
            "tensor_model_parallel_size",
            tp,
            f"{model.num_attention_heads} attention heads (--num-attention-heads) do not split "
            f"evenly over TP={tp}",
            f"a TP dividing {model.num_attention_heads}: {divisors(model.num_attention_heads)}",
        )
    if model.num_query_groups % tp != 0:
        _fail(
            "tensor_model_parallel_size",
            tp,
            f"{model.num_query_groups} query groups (--num-query-groups) do not split evenly "
            f"over TP={tp}",
            f"a TP dividing {model.num_query_groups}: {divisors(model.num_query_groups)}",
        )
    if model.num_attention_heads % model.num_query_groups != 0:
        _fail(
            "num_query_groups",
            model.num_query_groups,
            f"{model.num_attention_heads} attention heads do not split evenly into "
            f"{model.num_query_groups} query groups",
            f"a divisor of {model.num_attention_heads}: {divisors(model.num_attention_heads)}",
        )
    if model.vocab_size % tp != 0:
        _fail(
            "vocab_size",
            model.vocab_size,
            f"the vocabulary does not split evenly over TP={tp}",
            f"a multiple of {tp}",
        )
    if model.ffn_hidden_size % tp != 0:
        _fail(
            "ffn_hidden_size",
            model.ffn_hidden_size,
            f"does not split evenly over TP={tp}",
            f"a multiple of {tp}",
        )
    if etp != 1:
        _fail(
            "expert_tensor_parallel_size",
            etp,
            "expert tensor parallelism other than 1 is not supported yet",
            "1",
        )
    if model.moe_ffn_hidden_size % etp != 0:
        _fail(
            "moe_ffn_hidden_size",
            model.moe_ffn_hidden_size,
            f"does not split evenly over expert TP={etp}",
            f"a multiple of {etp}",
        )
    if model.num_experts % ep != 0:
        _fail(
            "expert_model_parallel_size",
            ep,
            f"{model.num_experts} experts (--num-experts) do not split evenly over EP={ep}",
            f"an EP dividing {model.num_experts}: {divisors(model.num_experts)}",
        )
    if model.moe_router_topk > model.num_experts:
        _fail(
            "moe_router_topk",
            model.moe_router_topk,
            f"cannot route each token to more than the {model.num_experts} experts",
            f"1 <= topk <= {model.num_experts}",
        )
    if (world_size // pp) % (ep * etp) != 0:
        _fail(
            "expert_model_parallel_size",
            ep,
            f"world size {world_size} (per pipeline stage: {world_size // pp}) is not "
            f"divisible by EP x expert TP = {ep} x {etp} = {ep * etp}",
            f"an EP dividing {world_size // pp}",
        )
    if tp > 1 and model.num_experts > 0 and not c.sequence_parallel:
        _fail(
            "sequence_parallel",
            c.sequence_parallel,
            f"Megatron requires sequence parallelism with MoE when TP > 1 (TP={tp})",
            "add --sequence-parallel",
        )
    dp = c.data_parallel_size(world_size)
    if c.overlap_grad_reduce and dp > 1 and noise_scale_beta is not None:
        _fail(
            "overlap_grad_reduce",
            c.overlap_grad_reduce,
            f"the gradient noise scale (--noise-scale-beta={noise_scale_beta}) reads each "
            f"data-parallel rank's gradient before the reduction (DP={dp}), which an overlapped "
            "reduction overwrites as it runs",
            "--noise-scale-beta none, or no --overlap-grad-reduce",
        )
    if c.ddp_bucket_size is not None and c.ddp_bucket_size < 1:
        _fail(
            "ddp_bucket_size",
            c.ddp_bucket_size,
            "must be positive",
            "elements >= 1, or none for megatron's default",
        )


def check_virtual_pipeline(c: ParallelFlags, *, model: ModelFlags) -> None:
    """Virtual pipeline stages (megatron's interleaved schedule): each pipeline rank's L / PP
    layers split into V >= 2 chunks of N layers (PP > 1: `APPLIES_ONLY_WITH`)."""
    per_layer = c.num_layers_per_virtual_pipeline_stage
    per_rank = c.num_virtual_stages_per_pipeline_rank
    if per_layer is None and per_rank is None:
        return
    pp = c.pipeline_model_parallel_size
    layers_per_rank = model.num_layers // pp
    if per_layer is not None and per_rank is not None:
        _fail(
            "num_virtual_stages_per_pipeline_rank",
            per_rank,
            "given with --num-layers-per-virtual-pipeline-stage: both set the virtual stages",
            "one of the two flags",
        )
    # the ways to split a rank's layers into two or more chunks
    chunkings = [d for d in divisors(layers_per_rank) if d < layers_per_rank]
    if per_layer is not None and (layers_per_rank % per_layer != 0 or per_layer == layers_per_rank):
        _fail(
            "num_layers_per_virtual_pipeline_stage",
            per_layer,
            f"each pipeline rank holds L / PP = {model.num_layers} / {pp} = {layers_per_rank} "
            f"layers, which {per_layer}-layer virtual stages "
            + (
                "make one chunk (the plain schedule)"
                if per_layer == layers_per_rank
                else "do not split evenly"
            ),
            f"a divisor of {layers_per_rank} below it: {chunkings}"
            if chunkings
            else "more layers per pipeline rank (--num-layers), or no virtual stages",
        )
    if per_rank is not None and (per_rank < 2 or layers_per_rank % per_rank != 0):
        counts = [d for d in divisors(layers_per_rank) if d >= 2]
        _fail(
            "num_virtual_stages_per_pipeline_rank",
            per_rank,
            f"each pipeline rank holds L / PP = {model.num_layers} / {pp} = {layers_per_rank} "
            "layers, "
            + (
                "and one virtual stage is the plain schedule"
                if per_rank == 1
                else f"which do not split evenly into {per_rank} virtual stages"
            ),
            f"a divisor of {layers_per_rank} from 2: {counts}"
            if counts
            else "more layers per pipeline rank (--num-layers), or no virtual stages",
        )


def check_recompute(c: ParallelFlags, *, model: ModelFlags) -> None:
    """--recompute-num-layers counts layers of the model."""
    if c.recompute_num_layers is not None and not 1 <= c.recompute_num_layers <= model.num_layers:
        _fail(
            "recompute_num_layers",
            c.recompute_num_layers,
            "not a count of layers",
            f"1..{model.num_layers}",
        )


def check_plan_hints(c: ParallelFlags) -> None:
    """The machine facts `hyrl plan` reads (--gpus-per-node, --gpu-memory-gib)."""
    if c.gpus_per_node is not None and c.gpus_per_node < 1:
        _fail("gpus_per_node", c.gpus_per_node, "must be a positive count", "an integer >= 1")
    if c.gpu_memory_gib is not None and not c.gpu_memory_gib > 0:
        _fail("gpu_memory_gib", c.gpu_memory_gib, "must be positive", "GiB > 0, or none")
