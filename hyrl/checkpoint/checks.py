"""The input of a conversion or of a load, checked before any process group or model: the layout
a checkpoint is meant for, the output directory, and a Hugging Face directory's weights against
its config.json (from their metadata: nothing is read). Failures raise ConversionError with the
flag or config field, the value found and the value expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from hyrl.checkpoint.hf_io import ConversionError, HFWeights, hf_shapes
from hyrl.config.errors import divisors
from hyrl.models.qwen3_moe.config import Qwen3MoeArch


def check_layout(
    arch: Qwen3MoeArch, tp: int = 1, ep: int = 1, pp: int = 1, vp_layers: int | None = None
) -> None:
    """Refuse a layout hyrl cannot build for this architecture, naming the flag (vp_layers:
    --num-layers-per-virtual-pipeline-stage, None without virtual stages)."""
    for flag, value in (("--tp", tp), ("--ep", ep), ("--pp", pp)):
        if not isinstance(value, int) or value < 1:
            raise ConversionError(f"{flag} {value}: must be a positive integer")
    # TP splits attention heads, key/value groups and (hyrl pads no vocabulary) the embedding rows.
    tp_must_divide = {
        "num_attention_heads": arch.num_attention_heads,
        "num_query_groups": arch.num_query_groups,
        "vocab_size": arch.vocab_size,
    }
    bad = {name: n for name, n in tp_must_divide.items() if n % tp}
    if bad:
        valid = [
            d
            for d in divisors(arch.num_query_groups)
            if all(n % d == 0 for n in tp_must_divide.values())
        ]
        raise ConversionError(
            f"--tp {tp}: must divide "
            + ", ".join(f"{k} ({v})" for k, v in bad.items())
            + f"; valid: {valid}"
        )
    if arch.num_experts % ep:
        raise ConversionError(
            f"--ep {ep}: must divide num_experts ({arch.num_experts}); "
            f"valid: {divisors(arch.num_experts)}"
        )
    if arch.num_layers % pp:
        raise ConversionError(
            f"--pp {pp}: must divide num_layers ({arch.num_layers}); "
            f"valid: {divisors(arch.num_layers)}"
        )
    if vp_layers is not None:
        flag = f"--num-layers-per-virtual-pipeline-stage {vp_layers}"
        if pp == 1:
            raise ConversionError(f"{flag}: needs --pp > 1 (virtual stages split a pipeline rank)")
        per_rank = arch.num_layers // pp
        if vp_layers < 1 or per_rank % vp_layers or vp_layers == per_rank:
            valid = [d for d in divisors(per_rank) if d < per_rank]
            raise ConversionError(
                f"{flag}: must split each pipeline rank's {per_rank} layers into two or more "
                f"virtual stages; valid: {valid}"
            )


def check_out_dir(out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"--out {out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise ConversionError(f"--out {out_dir}: exists and is not empty; refusing to overwrite")


def _found_in_weights(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[object, str]]:
    """The architecture fields the weights themselves determine (from their shapes in
    transformers' fused layout), each with its evidence."""
    found: dict[str, tuple[object, str]] = {}

    def shape(name: str):
        return tuple(shapes[name]) if name in shapes else None

    if (embed := shape("model.embed_tokens.weight")) is not None:
        found["vocab_size"] = (embed[0], f"model.embed_tokens.weight {embed}")
        found["hidden_size"] = (embed[1], f"model.embed_tokens.weight {embed}")
    layers = {int(n.split(".")[2]) for n in shapes if n.startswith("model.layers.")}
    if layers:
        found["num_hidden_layers"] = (max(layers) + 1, f"layers model.layers.0..{max(layers)}")
    p = "model.layers.0."
    head_dim = shape(p + "self_attn.q_norm.weight")
    if head_dim is not None:
        found["head_dim"] = (head_dim[0], f"{p}self_attn.q_norm.weight {head_dim}")
        for field, proj in (("num_attention_heads", "q_proj"), ("num_key_value_heads", "k_proj")):
            if (rows := shape(f"{p}self_attn.{proj}.weight")) is not None:
                found[field] = (
                    rows[0] // head_dim[0],
                    f"{p}self_attn.{proj}.weight {rows} / head_dim",
                )
    if (router := shape(p + "mlp.gate.weight")) is not None:
        found["num_experts"] = (router[0], f"{p}mlp.gate.weight {router}")
    if (down := shape(p + "mlp.experts.down_proj")) is not None:
        found["moe_intermediate_size"] = (down[2], f"{p}mlp.experts.0.down_proj.weight {down[1:]}")
    found["tie_word_embeddings"] = (
        "lm_head.weight" not in shapes,
        "lm_head.weight " + ("absent" if "lm_head.weight" not in shapes else "present"),
    )
    return found


def _in_config(arch: Qwen3MoeArch) -> dict[str, object]:
    return {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "head_dim": arch.kv_channels,
        "num_attention_heads": arch.num_attention_heads,
        "num_key_value_heads": arch.num_query_groups,
        "num_experts": arch.num_experts,
        "moe_intermediate_size": arch.moe_ffn_hidden_size,
        "tie_word_embeddings": not arch.untie_embeddings_and_output_weights,
    }


def check_weights_match_config(
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: set[torch.dtype],
    arch: Qwen3MoeArch,
    hf_dir: str | Path,
    flag: str = "--hf-dir",
) -> torch.dtype:
    """Refuse weights that config.json does not describe (shapes: every tensor's, in
    transformers' fused layout; dtypes: those stored); returns their (single) dtype. flag: the
    flag that named hf_dir, for the message."""
    expected = _in_config(arch)
    problems = [
        f"{field}: {value!r} in the weights ({evidence}), {expected[field]!r} in config.json"
        for field, (value, evidence) in _found_in_weights(shapes).items()
        if value != expected[field]
    ]
    if not problems:  # every field agrees: any remaining difference is a missing or odd tensor
        wanted = hf_shapes(arch)
        problems += [f"{name}: missing" for name in wanted if name not in shapes][:5]
        problems += [f"{name}: not a Qwen3-MoE tensor" for name in shapes if name not in wanted][:5]
        problems += [
            f"{name}: shape {tuple(shapes[name])}, config.json implies {shape}"
            for name, shape in wanted.items()
            if name in shapes and tuple(shapes[name]) != shape
        ][:5]
    if problems:
        raise ConversionError(
            f"{flag} {hf_dir}: config.json disagrees with the weights:\n  " + "\n  ".join(problems)
        )
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise ConversionError(
            f"{flag} {hf_dir}: weights in dtypes {sorted(map(str, dtypes))}; "
            "hyrl reads checkpoints stored in one floating-point dtype"
        )
    return next(iter(dtypes))


def check_hf_weights(reader: HFWeights, arch: Qwen3MoeArch, flag: str = "--hf-dir") -> torch.dtype:
    """check_weights_match_config of a lazily read directory, from its metadata only (nothing
    is read); returns the stored dtype."""
    dtypes = {reader.dtype(name) for name in reader.names()}
    return check_weights_match_config(reader.fused_shapes(), dtypes, arch, reader.hf_dir, flag)
