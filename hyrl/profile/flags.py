"""`hyrl profile-rollout`'s flags checked before any model is built: every value against what
is allowed, and --out proven writable. Standard library only, so a bad flag costs no torch import.
"""

from __future__ import annotations

import os
from pathlib import Path

ENGINES = ("hf", "sglang")


class ProfileError(ValueError):
    """A bad input; the message names the flag and what is allowed."""


def parse_concurrencies(text: str, num_prompts: int) -> list[int]:
    """ "1,2,4" -> [1, 2, 4]: positive integers, strictly increasing, each <= --num-prompts."""
    allowed = (
        f"allowed: comma-separated positive integers, strictly increasing, each <= "
        f"--num-prompts ({num_prompts}), e.g. 1,2,4,8"
    )
    try:
        values = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise ProfileError(f"--concurrency {text!r}: not a list of integers; {allowed}") from None
    if any(v < 1 for v in values):
        raise ProfileError(f"--concurrency {text!r}: every value must be >= 1; {allowed}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ProfileError(f"--concurrency {text!r}: must be strictly increasing; {allowed}")
    if values[-1] > num_prompts:
        raise ProfileError(
            f"--concurrency {text!r}: {values[-1]} exceeds --num-prompts "
            f"{num_prompts} (a chunk cannot hold more prompts than there are); "
            f"{allowed}"
        )
    return values


def validate_flags(
    *,
    engine: str,
    concurrency: str,
    num_prompts: int,
    max_new_tokens: int,
    repeats: int,
    warmup: int,
    seed: int,
    out: str,
    prompt_tokens: int | None = None,
    max_positions: int | None = None,
    sglang_url: str | None = None,
    model_path: str | None = None,
) -> list[int]:
    """Check every flag; return the concurrencies. Creates --out to prove it is writable."""
    if engine not in ENGINES:
        raise ProfileError(f"--engine {engine!r}: allowed: {', '.join(ENGINES)}")
    if engine == "sglang" and (sglang_url is None) == (model_path is None):
        raise ProfileError(
            "--engine sglang: give exactly one of --sglang-url URL (a running "
            "server or router) and --model-path DIR (hyrl starts a server on this "
            f"machine's GPUs); got {'both' if sglang_url else 'neither'}"
        )
    if engine == "hf" and (sglang_url is not None or model_path is not None):
        flag = "--sglang-url" if sglang_url is not None else "--model-path"
        raise ProfileError(
            f"{flag}: applies to --engine sglang only; the hf engine profiles "
            "the tiny Qwen3-MoE in this process"
        )
    if sglang_url is not None and not sglang_url.startswith(("http://", "https://")):
        raise ProfileError(f"--sglang-url {sglang_url!r}: allowed: http(s)://HOST:PORT")
    if model_path is not None and not os.path.isfile(os.path.join(model_path, "config.json")):
        raise ProfileError(
            f"--model-path {model_path!r}: no config.json there; allowed: a "
            "local Hugging Face model directory"
        )
    if num_prompts < 1:
        raise ProfileError(f"--num-prompts {num_prompts}: must be >= 1")
    if max_new_tokens < 1:
        raise ProfileError(f"--max-new-tokens {max_new_tokens}: must be >= 1")
    if prompt_tokens is not None and max_positions is not None:
        longest = max_positions - prompt_tokens
        if max_new_tokens > longest:
            raise ProfileError(
                f"--max-new-tokens {max_new_tokens}: {prompt_tokens}-token prompts "
                f"plus the response must fit the model's {max_positions} "
                f"positions; allowed: 1..{longest}"
            )
    if repeats < 1:
        raise ProfileError(f"--repeats {repeats}: must be >= 1")
    if warmup < 0:
        raise ProfileError(f"--warmup {warmup}: must be >= 0")
    if seed < 0:
        raise ProfileError(f"--seed {seed}: must be >= 0")
    concurrencies = parse_concurrencies(concurrency, num_prompts)
    check_writable(out)
    return concurrencies


def check_writable(out_dir) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".profile-rollout-write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as err:
        raise ProfileError(f"--out {out_dir}: not a writable directory ({err})") from None
    return out
