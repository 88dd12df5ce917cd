"""Checkpoints of Qwen3-MoE: Hugging Face directories <-> Megatron distributed checkpoints.

`hyrl convert hf-to-mcore | mcore-to-hf` (cli.py) and, for the trainer, `load_mcore_into`
(a sharded load into an already built GPTModel under the active layout) and `save_mcore`.
"""

from hyrl.checkpoint.convert import check_layout, hf_to_mcore, mcore_to_hf
from hyrl.checkpoint.hf_io import (
    ConversionError,
    load_hf_state_dict,
    read_hf_arch,
    save_hf_state_dict,
)
from hyrl.checkpoint.mcore_io import (
    CheckpointMetadata,
    load_mcore_into,
    read_checkpoint_metadata,
    save_mcore,
)

__all__ = [
    "CheckpointMetadata",
    "ConversionError",
    "check_layout",
    "hf_to_mcore",
    "load_hf_state_dict",
    "load_mcore_into",
    "mcore_to_hf",
    "read_checkpoint_metadata",
    "read_hf_arch",
    "save_hf_state_dict",
    "save_mcore",
]
