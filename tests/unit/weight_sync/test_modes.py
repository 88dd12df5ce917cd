"""hyrl.weight_sync: the trainer's side of each weight transport (--update-weight-transport's
values and the hf engines' load_state_dict), each driving the trainer's ranks and reaching the
engine only through the RolloutEngine protocols. Ranks, actor and engine are fakes that record
what a mode did with them: these tests read what each rank holds and sends."""

import json

import pytest
import torch

from hyrl.config import parse_args, resolve
from hyrl.config.rollout_layout import rollout_layout
from hyrl.models.weight_buckets import iter_buckets
from hyrl.rollout.base import DiskCheckpoint
from hyrl.weight_sync import weight_sync_for
from hyrl.weight_sync.base import ThroughRank0
from hyrl.weight_sync.disk import DiskMode
from hyrl.weight_sync.tensor import TensorMode, send_by_cuda_ipc

# three tensors of 16 bytes each: buckets of 32 bytes hold two, then one
WEIGHTS = [(f"w{i}", torch.full((4,), float(i))) for i in range(3)]
BUFFER = 32


class FakeActor:
    """hf_weight_buckets as the real actor streams them: every rank builds every bucket (the
    gathers; `iterated` counts them), and yields those `keep` says it holds."""

    def __init__(self):
        self.iterated = 0

    def hf_weight_buckets(self, buffer_bytes, keep=True, live=None):
        for k, bucket in enumerate(iter_buckets(WEIGHTS, buffer_bytes, live=live)):
            self.iterated += 1
            if keep(k) if callable(keep) else keep:
                yield bucket


class FakeRanks:
    """This rank of `world_size`. In a gather every other rank sends `peer(value)` for this
    rank's `value`; a rank other than 0 receives `from_rank_0` from rank 0's broadcasts."""

    def __init__(self, rank=0, world_size=1, peer=lambda value: value, from_rank_0=None):
        self.rank, self.world_size = rank, world_size
        self.peer, self.from_rank_0 = peer, from_rank_0
        self.broadcast = []

    def all_gather_object(self, value):
        return [value] + [self.peer(value)] * (self.world_size - 1)

    def gather_to_rank_0(self, value):
        return self.all_gather_object(value) if self.rank == 0 else None

    def broadcast_from_rank_0(self, payload):
        self.broadcast.append(payload)
        return payload if self.rank == 0 else self.from_rank_0


class FakeEngine:
    def __init__(self, fail_at_bucket=None):
        self.events, self.fail_at_bucket = [], fail_at_bucket

    def update_weights_stream(self, buckets):
        self.events.append(("stream", [[n for n, _ in b] for b in buckets]))

    def load_weights_from_disk(self, checkpoint):
        self.events.append(("disk", checkpoint))

    def prepare_ipc_sync(self, rank_devices):
        self.events.append(("prepare", rank_devices))

    def begin_ipc_update(self, serializer):
        self.events.append(("begin",))

    def load_ipc_payloads(self, payloads, num_bytes):
        if len([e for e in self.events if e[0] == "payloads"]) == self.fail_at_bucket:
            raise RuntimeError("server refused the bucket")
        self.events.append(("payloads", list(payloads), num_bytes))

    def end_ipc_update(self, succeeded=True):
        self.events.append(("end", succeeded))

    def sync_metrics(self):
        return {"perf/weight_transfer_s": 0.5}


@pytest.mark.parametrize(
    "flags, mode, colocate",
    [
        ([], ThroughRank0, False),
        (["--rollout-engine", "sglang", "--colocate"], TensorMode, True),
        (["--rollout-engine", "sglang", "--rollout-num-gpus", "2"], ThroughRank0, False),
        (
            ["--rollout-engine", "sglang", "--colocate", "--update-weight-transport", "disk"],
            DiskMode,
            True,
        ),
    ],
)
def test_the_flags_choose_the_mode(tmp_path, flags, mode, colocate):
    argv = ["--run-dir", str(tmp_path), "--update-weight-buffer-size", "2097152", *flags]
    cfg = resolve(parse_args(argv))
    sync = weight_sync_for(cfg.rollout, rollout_layout(cfg, 1), FakeRanks(), tmp_path)
    assert type(sync) is mode and sync.colocate == colocate and sync.buffer_bytes == 2 << 20


@pytest.mark.parametrize("mode", [ThroughRank0, TensorMode])
def test_through_rank_0_the_engine_takes_the_stream_and_the_other_ranks_only_gather(mode):
    engine, actor = FakeEngine(), FakeActor()
    resumed = []
    metrics = mode(FakeRanks(), BUFFER).sync(actor, engine, lambda: resumed.append(True))
    assert resumed == [True]
    assert engine.events == [("stream", [["w0", "w1"], ["w2"]])]
    # two 16-byte tensors held at once; the engine's own account passes through
    assert metrics == {"perf/weight_sync_peak_bytes": 32, "perf/weight_transfer_s": 0.5}

    other = FakeActor()
    assert mode(FakeRanks(rank=1, world_size=2), BUFFER).sync(other, None, lambda: None) == {}
    assert other.iterated == 2  # it took part in both buckets' gathers


def test_disk_every_rank_writes_its_buckets_and_rank_0_the_index(tmp_path):
    # rank 0 of 2 owns bucket 0; rank 1's part (bucket 1, one shard of 16 bytes) is given
    rank_1 = ({"w2": "model-rank00001-00000.safetensors"}, 16, 1, 16)
    engine = FakeEngine()
    sync = DiskMode(FakeRanks(world_size=2, peer=lambda _: rank_1), BUFFER, run_dir=tmp_path)
    metrics = sync.sync(FakeActor(), engine, lambda: None)
    directory = tmp_path / "rollout_weights" / "sync-000001"
    assert [p.name for p in directory.iterdir()] == sorted(
        ["model-rank00000-00000.safetensors", "model.safetensors.index.json"]
    )
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    assert index == {
        "metadata": {"total_size": 48},
        "weight_map": {
            "w0": "model-rank00000-00000.safetensors",
            "w1": "model-rank00000-00000.safetensors",
            "w2": "model-rank00001-00000.safetensors",
        },
    }
    assert engine.events == [("disk", DiskCheckpoint(str(directory), 48, 2))]
    # rank 0's bucket of 32 bytes and its host copy
    assert metrics == {"perf/weight_sync_peak_bytes": 64, "perf/weight_transfer_s": 0.5}

    sync.sync(FakeActor(), engine, lambda: None)  # the engines load the newest; the old goes
    assert [p.name for p in (tmp_path / "rollout_weights").iterdir()] == ["sync-000002"]


def test_disk_a_rank_other_than_0_writes_only_the_buckets_it_owns(tmp_path):
    sync = DiskMode(FakeRanks(rank=1, world_size=2), BUFFER, run_dir=tmp_path)
    assert sync.sync(FakeActor(), None, lambda: None) == {}
    directory = tmp_path / "rollout_weights" / "sync-000001"
    assert [p.name for p in directory.iterdir()] == ["model-rank00001-00000.safetensors"]


def serialize(bucket):
    return ",".join(name for name, _ in bucket)


class HoldingSerializer:
    """Like SGLang's: it holds what it made (the flat copy) until release()."""

    def __init__(self):
        self.held, self.released = None, 0

    def __call__(self, bucket):
        self.held = serialize(bucket)
        return self.held

    def release(self):
        self.held, self.released = None, self.released + 1


@pytest.fixture
def on_gpu_0(monkeypatch):
    """This rank on GPU 0 of host h (no CUDA needed); rank 1, when there is one, on GPU 1."""
    import hyrl.weight_sync.tensor

    monkeypatch.setattr(hyrl.weight_sync.tensor, "this_device", lambda: ("h", 0))


def rank_1(value):
    """What rank 1 sends: its device, GPU 1 of host h, or its payload of the same bucket."""
    return ("h", 1) if isinstance(value, tuple) else f"rank1:{value}"


def test_colocated_tensor_rank_0_hands_every_ranks_payloads_to_its_engine(on_gpu_0):
    engine, ranks = FakeEngine(), FakeRanks(world_size=2, peer=rank_1)
    serializer = HoldingSerializer()
    sync = TensorMode(ranks, BUFFER, colocate=True, serializer=serializer)
    metrics = sync.sync(FakeActor(), engine, lambda: None)
    assert serializer.released == 2 and serializer.held is None  # each bucket, once it is in
    assert engine.events == [
        ("prepare", [("h", 0), ("h", 1)]),
        ("begin",),
        ("payloads", ["w0,w1", "rank1:w0,w1"], 32),  # by rank, and the bucket's bytes
        ("payloads", ["w2", "rank1:w2"], 16),
        ("end", True),
    ]
    assert metrics == {"perf/weight_sync_peak_bytes": 32, "perf/weight_transfer_s": 0.5}
    assert ranks.broadcast == ["ok", "ok", "ok"]  # the start, then each bucket


def test_a_refused_bucket_ends_the_engines_sync_and_stops_every_rank():
    engine = FakeEngine(fail_at_bucket=1)
    ranks = FakeRanks()
    buckets = iter_buckets(WEIGHTS, BUFFER)
    with pytest.raises(RuntimeError, match="server refused the bucket"):
        send_by_cuda_ipc(buckets, ranks, engine, serialize)
    assert engine.events[-1] == ("end", False)
    assert ranks.broadcast == ["ok", "RuntimeError: server refused the bucket"]

    other = FakeRanks(rank=1, world_size=2, from_rank_0="RuntimeError: server refused the bucket")
    with pytest.raises(RuntimeError, match="failed on rank 0: RuntimeError: server refused"):
        send_by_cuda_ipc(iter_buckets(WEIGHTS, BUFFER), other, None, serialize)


def test_a_placement_refused_on_rank_0_stops_every_rank_before_any_gather(on_gpu_0):
    class Misplaced(FakeEngine):
        def prepare_ipc_sync(self, rank_devices):
            raise ValueError("engine 0 runs on GPU(s) [('h', 3)] where no training rank runs")

    actor = FakeActor()
    with pytest.raises(ValueError, match="no training rank runs"):
        TensorMode(FakeRanks(), BUFFER, colocate=True, serializer=serialize).sync(
            actor, Misplaced(), lambda: None
        )
    other = FakeRanks(rank=1, world_size=2, from_rank_0="ValueError: engine 0 runs on GPU")
    with pytest.raises(RuntimeError, match="could not start on rank 0: ValueError: engine 0"):
        TensorMode(other, BUFFER, colocate=True, serializer=serialize).sync(
            actor, None, lambda: None
        )
    assert actor.iterated == 0
