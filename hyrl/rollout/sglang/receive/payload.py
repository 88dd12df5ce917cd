"""What SGLang's weight routes carry: tensors under the per-expert checkpoint names SGLang loads,
in buckets, and a bucket serialized for ``/update_weights_from_tensor``.

* ``checkpoint_named_tensors``: hyrl's HF state dict (fused experts) as the per-expert
  checkpoint names of SGLang's ``load_weights``; ``bucket_named_tensors`` cuts them into buckets.
* ``SGLangSerializer`` (``sglang_serializer()``): SGLang's own ``MultiprocessingSerializer``,
  which sends CUDA IPC handles, not bytes. A bucket travels flattened
  (``load_format="flattened_bucket"``: one flat copy of the bucket, one handle;
  ``flatten_bucket``) unless made with ``flattened=False``. With CPU tensors the handles are
  file descriptors, which only a process sharing the sender's multiprocessing auth key can open
  (a child it forked: the contract tier's scheduler); hyrl's engines always send from a GPU.
  Every training rank makes its own with ``--colocate`` (hyrl.weight_sync.tensor), through the
  engine factory (hyrl.rollout.build).
* ``serialize_per_rank``: one payload per TP rank of a server, each serialized on its own.
* ``load_format_of`` is the load_format a post must name for a serializer's payloads, and
  ``release_payload`` lets the serializer drop what it held once the servers have copied it.
  Tests inject a plain serializer (any ``Serializer``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.weight_buckets import NamedTensors, iter_buckets, tensor_bytes
from hyrl.rollout.sglang.client import SGLangError

Serializer = Callable[[NamedTensors], str]


def checkpoint_named_tensors(hf_state_dict: Mapping[str, torch.Tensor]) -> NamedTensors:
    """hyrl's HF state dict (fused experts) -> the per-expert checkpoint names SGLang loads."""
    return hf_mapping.split_fused_experts(hf_state_dict)


def bucket_named_tensors(
    named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int
) -> list[NamedTensors]:
    """Consecutive buckets of <= buffer_bytes each; an oversize tensor is a bucket by itself."""
    return list(iter_buckets(named, buffer_bytes))


FLATTENED_BUCKET = "flattened_bucket"  # SGLang's load_format for one flat tensor per bucket
_FLAT_ALIGN = 16  # bytes: each tensor of a flat bucket starts at a multiple of this


def flatten_bucket(bucket: NamedTensors, metadata_type: Callable[..., Any]) -> dict[str, Any]:
    """One bucket as SGLang 0.5.23's ``load_format="flattened_bucket"`` payload: one uint8
    tensor on the bucket's device holding every tensor's bytes, and per tensor a
    ``metadata_type(name, shape, dtype, start_idx, end_idx, numel)`` (SGLang's
    ``FlattenedTensorMetadata``), which the server turns back into tensors by slicing
    [start_idx:end_idx], viewing it as dtype and reshaping (``FlattenedTensorBucket.
    reconstruct_tensors``). Each tensor starts at a multiple of 16 bytes: a view as a wider
    dtype needs an aligned offset, which a bf16 tensor of odd size before an fp32 one would
    break. One copy of the bucket (one serialized handle instead of one per tensor)."""
    if not bucket:
        raise ValueError("an empty bucket has nothing to flatten")
    starts, total = [], 0
    for _, tensor in bucket:
        start = -(-total // _FLAT_ALIGN) * _FLAT_ALIGN
        starts.append(start)
        total = start + tensor_bytes(tensor)
    flat = torch.empty(total, dtype=torch.uint8, device=bucket[0][1].device)
    metadata = []
    for (name, tensor), start in zip(bucket, starts):
        end = start + tensor_bytes(tensor)
        flat[start:end].view(tensor.dtype).view(tensor.shape).copy_(tensor.detach())
        metadata.append(metadata_type(name, tensor.shape, tensor.dtype, start, end, end - start))
    return {"flattened_tensor": flat, "metadata": metadata}


class SGLangSerializer:
    """SGLang's own serializer (``MultiprocessingSerializer``): CUDA tensors travel as IPC
    handles (GPU, same node only). ``load_format``: what the server must be told the payload
    is, None (a list of named tensors, one handle each) or ``"flattened_bucket"`` (with
    ``flattened``, the default: ``flatten_bucket``, one handle per bucket). The flat copy is
    kept until ``release()`` (the server reads it in place), or the next bucket."""

    def __init__(self, cuda: bool | None = None, flattened: bool = True):
        try:
            from sglang.srt.utils import MultiprocessingSerializer
            from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
            from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorMetadata
        except ImportError as err:
            raise SGLangError(
                "weight_sync='tensor' needs sglang importable in the trainer process (its "
                "MultiprocessingSerializer makes the CUDA IPC handles): pip install "
                "sglang==0.5.23, or use weight_sync='distributed' or 'disk'"
            ) from err
        if cuda if cuda is not None else torch.cuda.is_available():
            monkey_patch_torch_reductions()  # idempotent
        self._serialize = MultiprocessingSerializer.serialize
        self._metadata_type = FlattenedTensorMetadata
        self.load_format = FLATTENED_BUCKET if flattened else None
        self.held: dict[str, Any] | None = None  # the flat bucket the server may still read

    def __call__(self, named: NamedTensors) -> str:
        return self.per_rank(named, 1)[0]

    def per_rank(self, named: NamedTensors, ranks: int) -> list[str]:
        """``ranks`` serializations of one bucket (of one flat copy when flattened): one
        payload per TP rank (``serialize_per_rank``)."""
        self.release()
        if self.load_format is None:
            return [self._serialize(named, output_str=True) for _ in range(ranks)]
        self.held = flatten_bucket(named, self._metadata_type)
        return [self._serialize(self.held, output_str=True) for _ in range(ranks)]

    def release(self) -> None:
        """Drop the flat copy of the last bucket (once the servers have copied it)."""
        self.held = None


def sglang_serializer(cuda: bool | None = None, flattened: bool = True) -> SGLangSerializer:
    """SGLang's own serializer (``SGLangSerializer``).

    With ``cuda`` (None: whenever this machine has CUDA) it first applies SGLang's torch
    reduction patch (``sglang.srt.utils.patch_torch.monkey_patch_torch_reductions``), as SGLang's
    own senders do: a handle then names its GPU by UUID instead of this process's device
    ordinal, which means another GPU in a server that sees other CUDA_VISIBLE_DEVICES (an
    engine smaller than the node). The patch is process-wide and cannot reduce CPU tensors (it
    rewrites an argument only CUDA reductions have), so CPU-only processes go without it.
    """
    return SGLangSerializer(cuda, flattened)


def load_format_of(serializer: Serializer, given: str | None) -> str | None:
    """The load_format a post must name for ``serializer``'s payloads: its own (SGLang's
    serializer says whether it flattens), else ``given``; a conflict is refused."""
    own = getattr(serializer, "load_format", given)
    if given is not None and own != given:
        raise ValueError(
            f"load_format={given!r} with a serializer whose payloads are {own!r}: pass "
            f"sglang_serializer(flattened={given == FLATTENED_BUCKET}) or load_format={own!r}"
        )
    return own


def serialize_per_rank(serializer: Serializer, named: NamedTensors, ranks: int) -> list[str]:
    """One payload per TP rank, each its own serialization of the same tensors, as SGLang
    0.5.23's engine makes them (``Engine._serialize_tensors_per_rank``): each rank opens only
    its own (``TpModelWorker.deserialize_own_rank``), and a serialized handle is good for one
    opening (a CPU tensor's file descriptor is handed over once; a CUDA storage's producer-side
    IPC refcount gains one per serialization and loses one per opening), so ``[payload] *
    ranks`` breaks on every rank but the first."""
    per_rank = getattr(serializer, "per_rank", None)
    if per_rank is not None:
        return list(per_rank(named, ranks))
    return [serializer(named) for _ in range(ranks)]


def release_payload(serializer: Serializer) -> None:
    """The servers have copied the bucket: the serializer may drop what it held for them."""
    release = getattr(serializer, "release", None)
    if release is not None:
        release()
