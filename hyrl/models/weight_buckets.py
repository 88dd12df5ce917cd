"""Weights in transfer buckets: the one bucketing rule of weight sync, and its memory account.

    live = LiveBytes()
    for bucket in iter_buckets(named_tensors, buffer_bytes=512 << 20, live=live):
        send(bucket)            # the bucket is released when the loop asks for the next one
    live.peak                   # -> perf/weight_sync_peak_bytes

A bucket is a list of (name, tensor) pairs, consecutive in the input, of at most
``buffer_bytes`` bytes; a tensor larger than ``buffer_bytes`` is a bucket by itself. The input is
read lazily, so a generator that gathers one parameter at a time never runs ahead of the bucket
being filled: what the pipeline holds at once is one bucket plus the tensors that did not fit in
it (at most one parameter's worth) plus whatever the producer holds for the parameter in flight.

On disk (--update-weight-transport disk) a bucket is one safetensors shard (``write_shard``) and
the shards of one sync make a Hugging Face checkpoint with ``write_index``'s
``model.safetensors.index.json``, which a server loads as it loads any checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import torch

NamedTensors = list[tuple[str, torch.Tensor]]


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class LiveBytes:
    """Bytes a weight sync holds right now (``current``) and the most it held at once (``peak``).

    Producers ``add`` what they allocate or hold and ``release`` it when they let go; a count,
    not an allocator probe: it is exact for what is reported and blind to anything else."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    def add(self, num_bytes: int) -> None:
        self.current += num_bytes
        self.peak = max(self.peak, self.current)

    def release(self, num_bytes: int) -> None:
        self.current -= num_bytes


def iter_buckets(
    named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int, live: LiveBytes | None = None
) -> Iterator[NamedTensors]:
    """Consecutive buckets of <= buffer_bytes each; an oversize tensor is a bucket by itself.

    With ``live``, every tensor counts from the moment it joins a bucket until the consumer asks
    for the bucket after the one that holds it (by then it must have sent and dropped it)."""
    if buffer_bytes < 1:
        raise ValueError(f"buffer_bytes must be >= 1, got {buffer_bytes}")
    live = live if live is not None else LiveBytes()
    current: NamedTensors = []
    current_bytes = 0
    for name, tensor in named:
        size = tensor_bytes(tensor)
        if current and current_bytes + size > buffer_bytes:
            yield current
            current = []
            live.release(current_bytes)
            current_bytes = 0
        current.append((name, tensor))
        current_bytes += size
        live.add(size)
    if current:
        yield current
        current = []
        live.release(current_bytes)


def write_shard(bucket: NamedTensors, path: str | Path) -> dict[str, str]:
    """One bucket as one safetensors file; returns its part of the index's weight_map."""
    from safetensors.torch import save_file

    path = Path(path)
    # clone(): split expert views share storage, which safetensors refuses to write.
    save_file({n: t.detach().cpu().clone() for n, t in bucket}, path, metadata={"format": "pt"})
    return {n: path.name for n, _ in bucket}


def write_index(
    directory: str | Path,
    weight_map: Mapping[str, str],
    total_bytes: int,
    config_json: Mapping | None = None,
) -> None:
    """``model.safetensors.index.json`` (SGLang loads only the shards it names) (+ config.json)."""
    directory = Path(directory)
    index = {"metadata": {"total_size": total_bytes}, "weight_map": dict(weight_map)}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    if config_json is not None:
        (directory / "config.json").write_text(json.dumps(dict(config_json), indent=1))
