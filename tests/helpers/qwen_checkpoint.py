"""The special-token entries of Qwen3-30B-A3B's config.json and generation_config.json, as a
checkpoint directory without weights (what the rollout model directory reads from one)."""

from __future__ import annotations

import json
from pathlib import Path

IM_END, ENDOFTEXT = 151645, 151643  # Qwen3's <|im_end|> and <|endoftext|>


def qwen_checkpoint(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"eos_token_id": IM_END, "bos_token_id": 151643}))
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [IM_END, ENDOFTEXT], "temperature": 0.6, "top_k": 20})
    )
    return path
