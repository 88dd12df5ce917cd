"""An hyrl model checkpoint directory and the metadata hyrl writes beside the weights, read
and written as JSON (no megatron: the weights themselves are saved and loaded by the backend,
hyrl.backends.megatron.model_checkpoint).

    OUT/
      hyrl_checkpoint.json   what hyrl needs to use it without flags (written last: a directory
                             holding it is complete)
      model/                 megatron.core.dist_checkpointing.save of GPTModel.sharded_state_dict()
                             (metadata.json, .metadata, common.pt, __*_*.distcp)
      hf/                    config.json and tokenizer files of the HF model it came from (if any)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hyrl.checkpoint.hf_io import ConversionError
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

METADATA_FILE = "hyrl_checkpoint.json"
MODEL_SUBDIR = "model"
HF_ASSETS_SUBDIR = "hf"
FORMAT = "hyrl.mcore"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class CheckpointMetadata:
    arch: Qwen3MoeArch
    spec: (
        str  # which layer spec's sharded keys the checkpoint uses: "local" or "transformer_engine"
    )
    dtype: str  # parameter dtype as saved, e.g. "bfloat16"
    saved_layout: dict  # the parallel layout of the job that wrote it
    intended_layout: dict = field(default_factory=dict)  # the layout it was converted for (checked)
    source: str = ""  # e.g. the HF directory it was converted from
    hyrl_version: str = ""
    megatron_core_version: str = ""
    model_type: str = "qwen3_moe"
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        record = asdict(self)
        record["arch"] = self.arch.as_dict()
        return json.dumps(record, indent=2, sort_keys=True) + "\n"


def package_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def is_hyrl_checkpoint(path: str | Path) -> bool:
    return (Path(path) / METADATA_FILE).is_file()


def read_checkpoint_metadata(load_dir: str | Path) -> CheckpointMetadata:
    """hyrl's metadata of a checkpoint directory; a clear error when it is not one."""
    load_dir = Path(load_dir)
    if not load_dir.is_dir():
        raise ConversionError(f"--load {load_dir}: not a directory")
    path = load_dir / METADATA_FILE
    if not path.is_file():
        what = (
            "a Megatron distributed checkpoint without"
            if (load_dir / "metadata.json").is_file()
            else "not an hyrl mcore checkpoint: no"
        )
        raise ConversionError(
            f"--load {load_dir}: {what} {METADATA_FILE} (written by `hyrl convert hf-to-mcore`)"
        )
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConversionError(
            f"--load {load_dir}: {METADATA_FILE} is not valid JSON ({err})"
        ) from None
    if record.get("format") != FORMAT or record.get("format_version") != FORMAT_VERSION:
        raise ConversionError(
            f"--load {load_dir}: {METADATA_FILE} has format "
            f"{record.get('format')!r} version {record.get('format_version')!r}; "
            f"this hyrl reads {FORMAT!r} version {FORMAT_VERSION}"
        )
    if record.get("model_type") != "qwen3_moe":
        raise ConversionError(
            f"--load {load_dir}: model_type {record.get('model_type')!r}; "
            "hyrl converts Qwen3-MoE only"
        )
    if not (load_dir / MODEL_SUBDIR / "metadata.json").is_file():
        raise ConversionError(f"--load {load_dir}: {MODEL_SUBDIR}/ holds no distributed checkpoint")
    record["arch"] = Qwen3MoeArch(**record["arch"])
    return CheckpointMetadata(**record)


def arch_mismatches(
    found: Qwen3MoeArch,
    expected: Qwen3MoeArch,
    found_in: str,
    expected_in: str,
    label=lambda name: name,
) -> list[str]:
    """Fields where two architectures differ, as 'label(field): A in found_in, B in expected_in'."""
    ours, theirs = found.as_dict(), expected.as_dict()
    return [
        f"{label(name)}: {ours[name]!r} in {found_in}, {theirs[name]!r} in {expected_in}"
        for name in ours
        if ours[name] != theirs[name]
    ]
