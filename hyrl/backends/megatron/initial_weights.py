"""One fresh initial model per seed at every layout, under megatron's CPU initialisation.

With ``use_cpu_initialization`` (hyrl on CPU) megatron draws each parameter's *full* tensor
from the global torch RNG as it constructs the module, then keeps the TP slice. So the draws
depend on which parameters a rank constructs: TP ranks construct every parameter (TP=2 equals
TP=1), but a pipeline stage constructs only its layers and an EP rank only its experts, and
their RNG stream is shifted (measured: step-1 grad norm 0.2416 at PP=2 against 0.0035 at PP=1,
same seed).

The reference is megatron's own init at TP=1, PP=1, EP=1 (unchanged: documented runs depend
on it). Every other layout replays the reference's draws after megatron built its shard: from
the RNG state megatron started from, the full tensor of every parameter of the whole model in
the reference's construction order (``reference_draws``), one parameter at a time; a rank keeps
the slice of the parameters it holds and drops the rest. The global RNG ends where the
reference's build leaves it, so whatever draws next (the reference copy, the critic's value
head) draws the same numbers at every layout.

On CUDA megatron initialises each TP/EP shard from its own CUDA RNG stream: there the initial
model depends on the layout and nothing here runs (``describe`` says so in the startup line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hyrl.backends.megatron import weights
from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

EMBEDDING = "embedding.word_embeddings.weight"
OUTPUT_LAYER = "output_layer.weight"
# the critic's head replaces the output layer and has the same module name: its own key here
VALUE_HEAD = "value_head.weight"


@dataclass(frozen=True)
class Draw:
    """One RNG draw of megatron's reference build: the parameter (megatron name, global layer
    and expert ids), its full shape, and which of the config's init methods draws it:
    "embedding" (embedding_init_method), "hidden" (init_method), "output" (output_layer_init_
    method, megatron's scaled std for projections back into the residual stream) or "value_head"
    (hyrl's ValueHead: normal with init_method_std, drawn in the parameter's dtype)."""

    name: str
    shape: tuple[int, ...]
    init: str


def reference_draws(arch: Qwen3MoeArch, value_head: bool = False) -> list[Draw]:
    """Every RNG draw of megatron's CPU init of the whole Qwen3-MoE GPTModel, in construction
    order (recorded with a dispatch mode in tests/unit/backends/test_initial_weights.py): the
    word embeddings; per layer the attention's output projection (built by Attention before
    SelfAttention builds linear_qkv), linear_qkv, the router, then each expert's fc1 (gate and
    up, 2 x moe_ffn_hidden_size rows) and fc2; the output layer when it is not tied to the
    embeddings; the critic's value head last (built after the GPTModel). Norms are ones: no
    draws."""
    hidden, kv = arch.hidden_size, arch.kv_channels
    qkv_rows = (arch.num_attention_heads + 2 * arch.num_query_groups) * kv
    draws = [Draw(EMBEDDING, (arch.vocab_size, hidden), "embedding")]
    for layer in range(arch.num_layers):
        prefix = f"decoder.layers.{layer}."
        draws += [
            Draw(
                f"{prefix}self_attention.linear_proj.weight",
                (hidden, arch.num_attention_heads * kv),
                "output",
            ),
            Draw(f"{prefix}self_attention.linear_qkv.weight", (qkv_rows, hidden), "hidden"),
            Draw(f"{prefix}mlp.router.weight", (arch.num_experts, hidden), "hidden"),
        ]
        for expert in range(arch.num_experts):
            experts = f"{prefix}mlp.experts.local_experts.{expert}."
            draws += [
                Draw(
                    f"{experts}linear_fc1.weight", (2 * arch.moe_ffn_hidden_size, hidden), "hidden"
                ),
                Draw(f"{experts}linear_fc2.weight", (hidden, arch.moe_ffn_hidden_size), "output"),
            ]
    if arch.untie_embeddings_and_output_weights:
        draws.append(Draw(OUTPUT_LAYER, (arch.vocab_size, hidden), "hidden"))
    if value_head:
        draws.append(Draw(VALUE_HEAD, (1, hidden), "value_head"))
    return draws


def draw_full_tensor(draw: Draw, config) -> torch.Tensor:
    """The full tensor of one draw from the global RNG, as megatron's CPU init makes it: an
    fp32 master drawn by the config's init method, then cast to params_dtype
    (tensor_parallel.layers._initialize_affine_weight_cpu; the router does the same). The value
    head is drawn directly in params_dtype, as ValueHead does."""
    if draw.init == "value_head":
        tensor = torch.empty(draw.shape, dtype=config.params_dtype)
        return torch.nn.init.normal_(tensor, std=config.init_method_std)
    methods: dict[str, Callable] = {
        "embedding": config.embedding_init_method,
        "hidden": config.init_method,
        "output": config.output_layer_init_method,
    }
    master = torch.empty(draw.shape, dtype=torch.float32)
    methods[draw.init](master)
    return master.to(dtype=config.params_dtype)


def tp_slice(full: torch.Tensor, param: torch.nn.Parameter, name: str) -> torch.Tensor:
    """This TP rank's part of a parameter's full tensor, cut as megatron's CPU init cuts it:
    split into pieces of (partition size / stride) along the partition dimension, this rank
    keeping pieces rank, rank + TP, ... (a stride of 1 is a plain chunk). Parameters that are
    not TP-split (norms, the router, experts at expert-TP 1, the value head) are the full
    tensor."""
    from megatron.core import parallel_state

    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    if tp_size == 1 or not weights._tp_split(param, name):
        return full
    dim = weights._partition_dim(param)
    stride = getattr(param, "partition_stride", 1)
    pieces = torch.split(full, param.shape[dim] // stride, dim=dim)
    return torch.cat(pieces[parallel_state.get_tensor_model_parallel_rank() :: tp_size], dim=dim)


def local_targets(
    chunks: list[torch.nn.Module], arch: Qwen3MoeArch, value_head: bool = False
) -> dict[str, list[tuple[str, torch.nn.Parameter]]]:
    """This rank's parameters by the reference draw that initialises them: (local name,
    parameter) under the megatron name with global layer and expert ids; a value head under
    VALUE_HEAD (a critic: value_head=True); under tied embeddings a last stage's own copy of
    the output weight under the embedding (megatron copies it from the first stage)."""
    tied = not arch.untie_embeddings_and_output_weights
    targets: dict[str, list[tuple[str, torch.nn.Parameter]]] = {}
    for chunk in chunks:
        offset = weights.layer_offset(chunk)
        for te_name, param in chunk.named_parameters():
            name = hf_mapping.from_te_name(te_name)
            key = weights.global_name(name, arch, offset)
            if key == OUTPUT_LAYER and value_head:
                key = VALUE_HEAD  # the critic's head replaced megatron's output layer
            elif key == OUTPUT_LAYER and tied:
                key = EMBEDDING
            targets.setdefault(key, []).append((name, param))
    return targets


@torch.no_grad()
def replay_reference_init(
    chunks: list[torch.nn.Module],
    arch: Qwen3MoeArch,
    config,
    rng_state: torch.Tensor,
    value_head: bool = False,
) -> None:
    """Give this rank's parameters the reference's initial values: from ``rng_state`` (the
    global RNG state megatron's build started from) every reference draw in order, one full
    tensor at a time, each copied (this rank's TP slice) into the parameters that hold it and
    dropped; parameters no draw names (norms: ones) keep megatron's values. The global RNG is
    left where the reference's build leaves it. ValueError when a drawn parameter's slice does
    not fit, or a parameter that megatron drew is named by no draw (the sequence would be
    stale)."""
    targets = local_targets(chunks, arch, value_head)
    torch.set_rng_state(rng_state)
    drawn = set()
    for draw in reference_draws(arch, value_head):
        full = draw_full_tensor(draw, config)
        for name, param in targets.get(draw.name, []):
            part = tp_slice(full, param, name)
            if part.shape != param.shape:
                raise ValueError(
                    f"{draw.name}: drawn slice {tuple(part.shape)} != parameter "
                    f"{tuple(param.shape)}"
                )
            param.copy_(part)
        drawn.add(draw.name)
        del full
    undrawn = [key for key in targets if key not in drawn and not _never_drawn(key)]
    if undrawn:
        raise ValueError(f"parameters megatron initialises that no reference draw names: {undrawn}")


def _never_drawn(key: str) -> bool:
    """Parameters megatron initialises without the RNG: the norms (ones)."""
    return key.endswith("layernorm.weight") or key.endswith("layernorm.bias")


def builds_whole_model(layout) -> bool:
    """Whether megatron's own CPU init already draws the reference's sequence on this layout:
    every rank constructs every parameter (no pipeline stages, no expert parallelism); TP and
    sequence parallelism only slice what was drawn in full."""
    return (
        layout.pipeline_model_parallel_size == 1
        and layout.expert_model_parallel_size == 1
        and layout.virtual_pipeline_model_parallel_size is None
    )


def describe(config, loaded_from: str | None, seed: int) -> str:
    """What a run's initial model depends on, for its startup line."""
    if loaded_from is not None:
        return f"initial model: {loaded_from}"
    if config.use_cpu_initialization:
        return (
            f"initial model: fresh from seed {seed}, the same at every layout "
            "(megatron's TP=1 PP=1 EP=1 CPU init)"
        )
    return (
        f"initial model: fresh from seed {seed} and this layout (megatron's CUDA init: "
        "each TP/EP shard from its own RNG stream; another TP, PP or EP starts elsewhere)"
    )
