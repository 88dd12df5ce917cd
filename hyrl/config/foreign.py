"""Placeholder: the table of slime's and Megatron-LM's flags (filled in by the table change)."""

SAME_MEANING: dict[str, str] = {"--wandb-team": "wandb_entity"}
FOREIGN_FLAGS: dict[str, tuple[str, str]] = {}
