"""hyrl's tensor-sync payloads against SGLang 0.5.23's serializer.

SGLang's own senders call ``sglang.srt.utils.patch_torch.monkey_patch_torch_reductions()`` before
they serialize CUDA tensors: the IPC handle then names its GPU by UUID, not by the sender's
device ordinal, which is another GPU in a server that sees other CUDA_VISIBLE_DEVICES (an engine
smaller than the node). hyrl at 74107ac did not. SGLang's receiver unpickles with its
SafeUnpickler, which allows only listed globals.
"""

from __future__ import annotations

import subprocess
import sys

import torch
from sglang.srt.utils import MultiprocessingSerializer

from hyrl.rollout.sglang.receive.payload import sglang_serializer


def test_a_payload_round_trips_through_sglangs_safe_unpickler():
    named = [("model.embed_tokens.weight", torch.arange(6.0).view(2, 3)), ("b", torch.ones(2))]
    payload = sglang_serializer(cuda=False, flattened=False)(named)
    assert isinstance(payload, str)  # base64, as the HTTP route's Base64Bytes field expects
    received = MultiprocessingSerializer.deserialize(payload)
    assert [name for name, _ in received] == [name for name, _ in named]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(received, named))


def test_a_flattened_payload_round_trips_through_sglangs_safe_unpickler_and_bucket():
    """What the server does with load_format="flattened_bucket": SafeUnpickler (which allows
    FlattenedTensorMetadata), then FlattenedTensorBucket.reconstruct_tensors."""
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    named = [
        ("odd_bf16", torch.arange(3, dtype=torch.bfloat16)),
        ("fp32", torch.arange(6.0).view(2, 3)),
        ("int64", torch.tensor([7, -1])),
    ]
    received = MultiprocessingSerializer.deserialize(sglang_serializer(cuda=False)(named))
    bucket = FlattenedTensorBucket(
        flattened_tensor=received["flattened_tensor"], metadata=received["metadata"]
    )
    rebuilt = bucket.reconstruct_tensors()
    assert [name for name, _ in rebuilt] == [name for name, _ in named]
    for (_, got), (_, sent) in zip(rebuilt, named):
        assert got.dtype == sent.dtype and torch.equal(got, sent)


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


# A fresh process as the trainer's: the serializer hyrl's engines make (no arguments) on a
# machine with or without CUDA; then, is torch.Tensor's reducer in the pickler's table SGLang's?
TABLE = """
import torch
from multiprocessing.reduction import ForkingPickler
from sglang.srt.utils import patch_torch  # SGLang picks its platform on import: before the patch
from hyrl.rollout.sglang.receive.payload import sglang_serializer
torch.cuda.is_available = lambda: {cuda}
sglang_serializer()
print(ForkingPickler._extra_reducers[torch.Tensor] is patch_torch._reduce_tensor_modified)
"""


def test_on_a_cuda_machine_sglangs_reduction_patch_is_installed_before_serializing():
    """A CUDA tensor's handle then carries its GPU's UUID."""
    assert run_python(TABLE.format(cuda=True)) == "True"


def test_without_cuda_the_reductions_stay_torchs():
    """The patch cannot reduce CPU tensors (it rewrites an argument only CUDA reductions have),
    so a CPU-only process goes without it."""
    assert run_python(TABLE.format(cuda=False)) == "False"
