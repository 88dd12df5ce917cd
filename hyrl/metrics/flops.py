"""Model FLOPs of a rollout step's training work and the GPU's peak: perf/tokens_per_s_per_gpu
and perf/mfu on the record that closes each rollout step.

Conventions (the same as megatron's `num_floating_point_operations`, Megatron-LM
megatron/training/training.py, which follows the PaLM paper's appendix B, arXiv:2204.02311; the
pinned megatron-core 0.16.1 package does not ship that file):

- A matmul of an [m, n] by an [n, k] tensor is 2mnk FLOPs, so a token's forward pass through a
  weight of P entries is 2P FLOPs; the backward pass is twice the forward (input and weight
  gradients): forward + backward is 6P per token.
- P counts the matmul weights a token goes through (`active_params_per_token`): per layer the
  attention projections q, k, v, o (GQA: k and v are num_query_groups x kv_channels wide), the
  router (hidden x num_experts; megatron's formula leaves it out, 0.5% of 30B-A3B's total), and
  the top-k experts of moe_ffn_hidden_size, SwiGLU's three matrices each; then the output layer
  (hidden x vocab; a critic's value head is hidden x 1). Qwen3-MoE has an MoE in every layer
  and no shared experts (Qwen3MoeArch has no field for them; ffn_hidden_size is unused). Not
  counted: the embedding lookup (no matmul), norms, rotary, softmax, the activation.
- Attention's score and value matmuls (QK^T and AV) of a sequence of n tokens, causal: half of
  the n x n pairs, 2 x 2 x n^2 / 2 x (num_attention_heads x kv_channels) FLOPs per layer
  forward, three times that forward + backward: megatron's "query_projection_size x seq_length
  / 2 x 2" term, with each sequence's own length in place of a fixed seq_length.
- Model FLOPs, not hardware FLOPs: activation recomputation is not counted (PaLM's MFU).

Which passes a rollout step counts (`StepPasses`): the actor's update (forward + backward over
every row, each row once across the step's optimizer steps), the actor's no-grad forward
passes (the old log-probs unless they come from the update's own forward pass, and the
reference's), the critic's values (forward) and the critic's update (forward + backward).
Generation (the engine's), rewards, evaluation and weight sync are not counted, but their time
is in the step's wall time: perf/mfu is the trainer's model FLOPs over the whole rollout step.

Tokens: prompt + response of every row the step trains on, through its last response token in
the loss (TokenBatch.sequence_lengths). Padding does not count; nor does a row with no loss
position (--overlong-filtering masks truncated responses out), whose gradient is zero.

The peak is the vendor's dense (not 2:4-sparse) BF16 tensor FLOP/s of the GPU that
torch.cuda.get_device_name() names (`GPUS`), also for a run without --bf16 (an fp32 run's MFU
then reads low). A GPU not in the table gets no perf/mfu, said once; a CPU run gets none.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hyrl.models.qwen3_moe.config import Qwen3MoeArch


# -- parameters and FLOPs ----------------------------------------------------------------------
def attention_params_per_layer(arch: Qwen3MoeArch) -> int:
    """q, k, v and o projections of one layer (no biases: add_bias_linear=False)."""
    query_width = arch.num_attention_heads * arch.kv_channels
    key_value_width = arch.num_query_groups * arch.kv_channels
    return arch.hidden_size * (2 * query_width + 2 * key_value_width)


def moe_params_per_token_per_layer(arch: Qwen3MoeArch) -> int:
    """The router and the top-k experts one token goes through (SwiGLU: gate, up, down)."""
    router = arch.hidden_size * arch.num_experts
    experts = arch.moe_router_topk * 3 * arch.hidden_size * arch.moe_ffn_hidden_size
    return router + experts


def active_params_per_token(arch: Qwen3MoeArch, value_head: bool = False) -> int:
    """Matmul weights a token goes through: every layer's attention and active MoE, then the
    output layer (vocab-wide; a critic's value head: one output). Embeddings not included."""
    layers = arch.num_layers * (
        attention_params_per_layer(arch) + moe_params_per_token_per_layer(arch)
    )
    return layers + arch.hidden_size * (1 if value_head else arch.vocab_size)


def embedding_params(arch: Qwen3MoeArch) -> int:
    """The input embedding table (a lookup, no FLOPs; for comparing with stated active counts)."""
    return arch.vocab_size * arch.hidden_size


def forward_flops(
    arch: Qwen3MoeArch, sequence_lengths: Sequence[int], value_head: bool = False
) -> float:
    """One forward pass over sequences of these lengths: 2 x active params per token, plus the
    causal score and value matmuls, 2 x layers x (heads x kv_channels) x n^2 per sequence."""
    tokens = sum(sequence_lengths)
    squares = sum(n * n for n in sequence_lengths)
    query_width = arch.num_attention_heads * arch.kv_channels
    return float(
        2 * active_params_per_token(arch, value_head) * tokens
        + 2 * arch.num_layers * query_width * squares
    )


@dataclass(frozen=True)
class StepPasses:
    """The passes over the step's rows that count (module docstring).

    actor_update: the actor trained this step (not a critic-only warm-up step)
    actor_forwards: no-grad actor passes (old log-probs unless on policy, the reference's)
    critic_update: the critic trained; critic_forwards: its values passes (gae)
    """

    actor_update: bool
    actor_forwards: int
    critic_update: bool = False
    critic_forwards: int = 0


def step_flops(arch: Qwen3MoeArch, sequence_lengths: Sequence[int], passes: StepPasses) -> float:
    """Model FLOPs of a rollout step: forward + backward is 3 forwards."""
    actor = forward_flops(arch, sequence_lengths) * (
        3 * passes.actor_update + passes.actor_forwards
    )
    critic_passes = 3 * passes.critic_update + passes.critic_forwards
    critic = forward_flops(arch, sequence_lengths, value_head=True) * critic_passes
    return actor + critic


def trained_sequence_lengths(batch: Any) -> list[int]:
    """Prompt + response tokens of each row of a TokenBatch that has a loss position; padding
    and rows without one (TokenBatch.sequence_lengths gives those 1) are left out."""
    return [n for n in batch.sequence_lengths() if n > 1]


# -- the GPU's peak ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Gpu:
    product: str
    peak_bf16_flops_per_s: float  # dense, not 2:4 sparse
    device_names: tuple[str, ...]  # as torch.cuda.get_device_name() reports them
    source: str


# Datasheets give BF16 tensor FLOP/s "with sparsity" for NVIDIA's Hopper and Blackwell parts:
# the dense figure is half of it (their footnote).
GPUS: tuple[Gpu, ...] = (
    Gpu("H100 SXM", 989.4e12, ("NVIDIA H100 80GB HBM3",), "NVIDIA H100 datasheet: 1,979 sparse"),
    Gpu("H100 PCIe", 756.5e12, ("NVIDIA H100 PCIe",), "NVIDIA H100 datasheet: 1,513 sparse"),
    Gpu("H100 NVL", 835.5e12, ("NVIDIA H100 NVL",), "NVIDIA H100 datasheet: 1,671 sparse"),
    Gpu("H200 SXM", 989.4e12, ("NVIDIA H200",), "NVIDIA H200 datasheet: 1,979 sparse"),
    Gpu("H200 NVL", 835.5e12, ("NVIDIA H200 NVL",), "NVIDIA H200 datasheet: 1,671 sparse"),
    Gpu(
        "A100",
        312e12,
        (
            "NVIDIA A100-SXM4-40GB",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100-PCIE-40GB",
            "NVIDIA A100 80GB PCIe",
        ),
        "NVIDIA A100 datasheet: 312 dense (624 sparse), SXM and PCIe",
    ),
    Gpu("B200", 2.25e15, ("NVIDIA B200",), "NVIDIA HGX B200 datasheet: 4.5 PF sparse per GPU"),
    Gpu("GB200", 2.5e15, ("NVIDIA GB200",), "NVIDIA GB200 NVL72 datasheet: 5 PF sparse per GPU"),
    Gpu("L40S", 362.05e12, ("NVIDIA L40S",), "NVIDIA L40S datasheet: 362.05 dense (733 sparse)"),
    Gpu(
        "MI300X",
        1307.4e12,
        ("AMD Instinct MI300X",),
        "AMD Instinct MI300X datasheet: 1,307.4 dense (2,614.9 sparse)",
    ),
)


def _normalised(name: str) -> str:
    return " ".join(name.split()).lower()


def gpu_of(device_name: str) -> Gpu | None:
    """The table's entry for the name torch reports (case and spacing aside), None if unknown:
    never the nearest match, since a wrong peak gives a wrong MFU."""
    wanted = _normalised(device_name)
    for gpu in GPUS:
        if any(_normalised(name) == wanted for name in gpu.device_names):
            return gpu
    return None


@functools.cache
def device_gpu(device: Any) -> Gpu | None:
    """The Gpu of a torch.device: None on CPU, and for a GPU not in `GPUS`, which is said once."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch  # only for a CUDA device; this module stays importable without torch

    name = torch.cuda.get_device_name(device)
    gpu = gpu_of(name)
    if gpu is None:
        known = ", ".join(f"{g.product} ({' / '.join(g.device_names)})" for g in GPUS)
        print(
            f"hyrl: no perf/mfu: the peak bf16 FLOP/s of GPU {name!r} is not in "
            f"hyrl/metrics/flops.py GPUS (known: {known})",
            flush=True,
        )
    return gpu


def step_perf(
    arch: Qwen3MoeArch,
    sequence_lengths: Sequence[int],
    passes: StepPasses,
    step_s: float,
    world_size: int,
    gpu: Gpu | None,
) -> dict[str, float]:
    """perf/tokens_per_s_per_gpu, and perf/mfu when the GPU's peak is known, of one rollout
    step of step_s seconds on world_size trainer GPUs (or CPU ranks)."""
    if step_s <= 0:
        return {}
    gpu_s = step_s * world_size
    perf = {"perf/tokens_per_s_per_gpu": sum(sequence_lengths) / gpu_s}
    if gpu is not None:
        achieved = step_flops(arch, sequence_lengths, passes) / gpu_s
        perf["perf/mfu"] = achieved / gpu.peak_bf16_flops_per_s
    return perf
