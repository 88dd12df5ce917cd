"""Hugging Face model directories: config.json -> architecture, safetensors <-> state dict.

In memory, state dicts use transformers 5's layout for Qwen3-MoE (each layer's experts fused:
`mlp.experts.gate_up_proj` [E, 2F, H] = [gate; up], `mlp.experts.down_proj` [E, H, F]), the
layout hyrl's `hf_mapping` reads. On disk, transformers 5 and the released Qwen3 checkpoints
store one tensor per expert and projection (`mlp.experts.{e}.gate_proj.weight`, ...); reading
fuses them, writing splits them again, so a saved directory looks like `save_pretrained`'s.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
TORCH_INDEX = "pytorch_model.bin.index.json"
TORCH_SINGLE = "pytorch_model.bin"
# Files besides the weights that make a directory usable by transformers / SGLang.
ASSET_PATTERNS = (
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template*",
)


class ConversionError(ValueError):
    """Bad input to a conversion: the message names the flag or field and the offending value."""


def read_hf_config(hf_dir: str | Path) -> dict:
    path = Path(hf_dir) / "config.json"
    if not Path(hf_dir).is_dir():
        raise ConversionError(f"--hf-dir {hf_dir}: not a directory")
    if not path.is_file():
        raise ConversionError(
            f"--hf-dir {hf_dir}: no config.json (not a Hugging Face model directory)"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConversionError(f"--hf-dir {hf_dir}: config.json is not valid JSON ({err})") from None


def _rope_theta(config: dict) -> float:
    # transformers 5 writes rope_parameters = {"rope_theta": ..., "rope_type": ...}; 4.x and the
    # released Qwen3 checkpoints write a top-level rope_theta.
    rope = config.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", "default")
    scaling = config.get("rope_scaling")
    if rope_type != "default" or (
        scaling and scaling.get("rope_type", scaling.get("type")) != "default"
    ):
        raise ConversionError(
            f"config.json: rope scaling {rope or scaling} is not supported "
            "(hyrl's Megatron model uses plain RoPE: rope_type 'default')"
        )
    return float(rope.get("rope_theta", config.get("rope_theta", 10_000.0)))


def _num_experts(config: dict, source: str) -> int:
    # The released checkpoints say num_experts; transformers 5 writes num_local_experts.
    values = {k: config[k] for k in ("num_experts", "num_local_experts") if k in config}
    if len(set(values.values())) > 1:
        raise ConversionError(
            f"{source}: num_experts {values['num_experts']} and num_local_experts "
            f"{values['num_local_experts']} disagree"
        )
    if not values:
        raise ConversionError(f"{source}: neither num_experts nor num_local_experts is set")
    return int(next(iter(values.values())))


def arch_from_hf_config(config: dict, source: str = "config.json") -> Qwen3MoeArch:
    """The architecture a Qwen3-MoE config.json describes; refuses what hyrl cannot build."""
    if config.get("model_type") != "qwen3_moe":
        raise ConversionError(
            f"{source}: model_type {config.get('model_type')!r}; hyrl converts "
            "Qwen3-MoE only (model_type 'qwen3_moe')"
        )
    # Features of the HF class that hyrl's Megatron model does not build: refuse, do not guess.
    unsupported = {
        "decoder_sparse_step": (config.get("decoder_sparse_step", 1), 1),
        "mlp_only_layers": (config.get("mlp_only_layers") or [], []),
        "attention_bias": (config.get("attention_bias", False), False),
        "norm_topk_prob": (config.get("norm_topk_prob", True), True),
        "hidden_act": (config.get("hidden_act", "silu"), "silu"),
        "use_sliding_window": (config.get("use_sliding_window", False), False),
    }
    for field, (found, needed) in unsupported.items():
        if found != needed:
            raise ConversionError(
                f"{source}: {field} {found!r} is not supported (hyrl builds "
                f"{field} {needed!r}: MoE in every layer, no biases, renormalised top-k)"
            )
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return Qwen3MoeArch(
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=int(config.get("num_key_value_heads") or heads),
        kv_channels=int(config.get("head_dim") or hidden // heads),
        num_experts=_num_experts(config, source),
        moe_ffn_hidden_size=int(config["moe_intermediate_size"]),
        moe_router_topk=int(config["num_experts_per_tok"]),
        vocab_size=int(config["vocab_size"]),
        ffn_hidden_size=int(config.get("intermediate_size") or 0),
        norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        rotary_base=_rope_theta(config),
        max_position_embeddings=int(config.get("max_position_embeddings", 40960)),
        qk_layernorm=True,  # Qwen3 always normalises q and k per head
        normalization="RMSNorm",
        untie_embeddings_and_output_weights=not config.get("tie_word_embeddings", False),
    )


def read_hf_arch(hf_dir: str | Path) -> Qwen3MoeArch:
    """The Qwen3MoeArch of a Hugging Face model directory, from its config.json."""
    return arch_from_hf_config(read_hf_config(hf_dir), source=f"--hf-dir {hf_dir}: config.json")


def hf_shapes(arch: Qwen3MoeArch) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen3MoeForCausalLM state dict (transformers' fused layout) and its
    shape."""
    h, d, v, e, f = (
        arch.hidden_size,
        arch.kv_channels,
        arch.vocab_size,
        arch.num_experts,
        arch.moe_ffn_hidden_size,
    )
    q_rows, kv_rows = arch.num_attention_heads * d, arch.num_query_groups * d
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if arch.untie_embeddings_and_output_weights:
        shapes["lm_head.weight"] = (v, h)
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_rows, h),
            p + "self_attn.k_proj.weight": (kv_rows, h),
            p + "self_attn.v_proj.weight": (kv_rows, h),
            p + "self_attn.o_proj.weight": (h, q_rows),
            p + "self_attn.q_norm.weight": (d,),
            p + "self_attn.k_norm.weight": (d,),
            p + "mlp.gate.weight": (e, h),
            p + "mlp.experts.gate_up_proj": (e, 2 * f, h),
            p + "mlp.experts.down_proj": (e, h, f),
        }
    return shapes


def _weight_files(hf_dir: Path) -> list[Path]:
    for index_name in (SAFETENSORS_INDEX, TORCH_INDEX):
        index = hf_dir / index_name
        if index.is_file():
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return [hf_dir / name for name in names]
    for single in (SAFETENSORS_SINGLE, TORCH_SINGLE):
        if (hf_dir / single).is_file():
            return [hf_dir / single]
    raise ConversionError(
        f"--hf-dir {hf_dir}: no weights ({SAFETENSORS_SINGLE}, {SAFETENSORS_INDEX}, "
        f"{TORCH_SINGLE} or {TORCH_INDEX})"
    )


def load_raw_hf_tensors(hf_dir: str | Path) -> dict[str, torch.Tensor]:
    """The tensors exactly as stored on disk (names, values and dtypes untouched)."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in _weight_files(Path(hf_dir)):
        if path.suffix == ".safetensors":
            tensors.update(load_file(path))
        else:
            tensors.update(torch.load(path, map_location="cpu", weights_only=True))
    return tensors


class HFWeights:
    """A Hugging Face directory's weights read lazily, one tensor or one slice at a time
    (``safe_open(...).get_slice`` for safetensors; ``torch.load(mmap=True)`` for
    pytorch_model.bin), under the names and in the dtype they are stored in. Nothing is read
    until asked for: a rank reads only its TP/EP/PP slices
    (``hf_mapping.read_megatron_shard``).

    safetensors maps a file into memory, and the pages a read touches stay resident (and count
    in the process's RSS) until the mapping goes with its handle. So at most ``max_open``
    files are open at once, and a handle is dropped, to be opened again when next needed, once
    ``max_mapped_bytes`` have been read through it: what a rank holds of the files stays that
    small. (At 30B-A3B, ~15 GB read per rank, 8 MiB costs about two thousand re-openings, each
    a parse of the file's header: 1.2 ms for a 1,200-tensor header on the 2-core development
    machine, so 2-3 s a rank.) ``hf_dir``'s weights are found as ``load_raw_hf_tensors``
    finds them. Use as a context manager, or call close()."""

    def __init__(self, hf_dir: str | Path, max_open: int = 1, max_mapped_bytes: int = 8 * 2**20):
        self.hf_dir = Path(hf_dir)
        self.max_open, self.max_mapped_bytes = max_open, max_mapped_bytes
        self._open: dict[Path, object] = {}  # file -> handle, least recently used first
        self._mapped: dict[Path, int] = {}  # file -> bytes read through its open handle
        self._file: dict[str, Path] = {}  # tensor name -> its file
        self._meta: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        for path in _weight_files(self.hf_dir):
            handle = self._handle(path)
            for name in handle.keys():
                self._file[name] = path
                self._meta[name] = self._describe(handle, path, name)

    # -- what is stored --------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._file

    def names(self) -> list[str]:
        return list(self._file)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._meta[self._known(name)][0]

    def dtype(self, name: str) -> torch.dtype:
        return self._meta[self._known(name)][1]

    def fused_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape in transformers' in-memory layout (a layer's per-expert tensors
        as its fused gate_up_proj [E, 2F, H] and down_proj [E, H, F]), from the metadata only.
        ConversionError as ``fuse_experts`` when a layer's experts are incomplete."""
        meta = {
            name: torch.empty(shape, dtype=dtype, device="meta")
            for name, (shape, dtype) in self._meta.items()
        }
        return {name: tuple(t.shape) for name, t in fuse_experts(meta).items()}

    def nbytes(self) -> int:
        """The stored tensors' bytes."""
        return sum(
            torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            for shape, dtype in self._meta.values()
        )

    # -- reading ---------------------------------------------------------------------------
    def read(
        self, name: str, dim: int = 0, start: int | None = None, stop: int | None = None
    ) -> torch.Tensor:
        """The tensor ``name``, or its [start, stop) along ``dim`` only: a new tensor (not a
        view of the file), in the stored dtype."""
        path = self._file[self._known(name)]
        handle = self._handle(path)
        index = (slice(None),) * dim + (slice(start, stop),)
        if path.suffix == ".safetensors":
            if start is None and stop is None:
                out = handle.get_tensor(name)
            else:
                out = handle.get_slice(name)[index]
        else:  # a bin file mapped by torch.load(mmap=True): copy the slice
            out = handle[name][index].clone()
        self._mapped[path] = self._mapped.get(path, 0) + out.numel() * out.element_size()
        if self._mapped[path] >= self.max_mapped_bytes:  # unmap what it has touched
            self._drop(path)
        return out

    def close(self) -> None:
        self._open.clear()
        self._mapped.clear()

    def _drop(self, path: Path) -> None:
        self._open.pop(path, None)
        self._mapped.pop(path, None)

    def __enter__(self) -> HFWeights:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _known(self, name: str) -> str:
        if name not in self._file:
            raise KeyError(f"{self.hf_dir}: no tensor {name} in the weights")
        return name

    def _handle(self, path: Path):
        handle = self._open.pop(path, None)
        if handle is None:
            from safetensors import SafetensorError, safe_open

            try:
                if path.suffix == ".safetensors":
                    handle = safe_open(str(path), framework="pt")
                else:
                    handle = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except (SafetensorError, OSError, RuntimeError, pickle.UnpicklingError) as err:
                raise ConversionError(f"{path}: cannot be read ({err})") from None
            while len(self._open) >= self.max_open:  # the least recently used file goes
                self._drop(next(iter(self._open)))
        self._open[path] = handle  # most recently used last
        return handle

    @staticmethod
    def _describe(handle, path: Path, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        if path.suffix == ".safetensors":
            view = handle.get_slice(name)
            return tuple(view.get_shape()), _SAFETENSORS_DTYPES[view.get_dtype()]
        tensor = handle[name]
        return tuple(tensor.shape), tensor.dtype


# safetensors' dtype names (get_slice(...).get_dtype()) -> torch's
_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


def fuse_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """On-disk per-expert tensors -> transformers 5's fused gate_up_proj / down_proj."""
    try:
        return hf_mapping.fuse_split_experts(tensors)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def load_hf_state_dict(hf_dir: str | Path) -> dict[str, torch.Tensor]:
    """A Hugging Face Qwen3-MoE directory's weights in transformers 5's in-memory layout.

    Reads sharded (index.json) or single-file safetensors (or pytorch_model.bin); float dtypes
    are kept as stored.
    """
    return fuse_experts(load_raw_hf_tensors(hf_dir))


def save_hf_state_dict(
    hf_state: dict[str, torch.Tensor], out_dir: str | Path, max_shard_bytes: int = 5 * 1024**3
) -> list[str]:
    """Write weights the way `save_pretrained` does: per-expert names, safetensors shards of at
    most max_shard_bytes (one `model.safetensors`, or numbered shards plus an index). Returns the
    files."""
    writer = HFShardWriter(out_dir, max_shard_bytes)
    for name, tensor in sorted(hf_mapping.split_fused_experts(hf_state)):
        writer.add(name, tensor)
    return writer.finish()


class HFShardWriter:
    """Safetensors shards written as tensors arrive (checkpoint-layout names, one at a time),
    holding at most one shard: each shard is written once it would pass max_shard_bytes. At
    finish() a single shard is `model.safetensors`, more are renamed
    `model-0000i-of-0000N.safetensors` with the index `save_pretrained` writes."""

    def __init__(self, out_dir: str | Path, max_shard_bytes: int = 5 * 1024**3):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.max_shard_bytes = max_shard_bytes
        self._shard: dict[str, torch.Tensor] = {}
        self._shard_bytes = 0
        self._written: list[tuple[Path, list[str]]] = []  # (its provisional path, its tensors)
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Take a copy of `tensor` (it may be a view of a model's parameter)."""
        size = tensor.numel() * tensor.element_size()
        if self._shard and self._shard_bytes + size > self.max_shard_bytes:
            self._flush()
        # safetensors refuses tensors that share storage: each gets its own contiguous copy
        self._shard[name] = tensor.detach().to("cpu", copy=True).contiguous()
        self._shard_bytes += size
        self.total_bytes += size

    def finish(self) -> list[str]:
        """Write the last shard and name the files; returns them (the index last)."""
        if self._shard or not self._written:
            self._flush()
        if len(self._written) == 1:
            path, _ = self._written[0]
            path.rename(self.out_dir / SAFETENSORS_SINGLE)
            return [SAFETENSORS_SINGLE]
        count = len(self._written)
        names: list[str] = []
        weight_map: dict[str, str] = {}
        for i, (path, tensor_names) in enumerate(self._written):
            name = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            path.rename(self.out_dir / name)
            names.append(name)
            weight_map |= {tensor_name: name for tensor_name in tensor_names}
        index = {
            "metadata": {"total_size": self.total_bytes},
            "weight_map": dict(sorted(weight_map.items())),
        }
        (self.out_dir / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return names + [SAFETENSORS_INDEX]

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.out_dir / f".shard-{len(self._written):05d}.safetensors.tmp"
        save_file(self._shard, path, metadata={"format": "pt"})
        self._written.append((path, list(self._shard)))
        self._shard, self._shard_bytes = {}, 0


def copy_assets(src_dir: str | Path, dst_dir: str | Path) -> list[str]:
    """Copy config, generation config and tokenizer files (not weights) from src_dir to dst_dir."""
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for pattern in ASSET_PATTERNS:
        for path in sorted(src_dir.glob(pattern)):
            if path.is_file():
                shutil.copy2(path, dst_dir / path.name)
                copied.append(path.name)
    return copied
