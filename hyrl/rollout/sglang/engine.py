"""`--rollout-engine sglang`: hyrl's RolloutEngine over one SGLang server or router URL.

    engine = SGLangEngine.launch(SGLangServerProcess(hf_dir, port=30000, colocated=True),
                                 concurrency=128, stop_token_ids=[eos_id], weight_sync="tensor",
                                 buffer_bytes=512 << 20,
                                 weight_sync_options={"device": "cuda:0"})
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=512, temperature=1.0))
    engine.update_weights_stream(buckets)    # engine.last_sync_stats -> perf/weight_transfer_s
    engine.update_weights(hf_state_dict)     # or a whole state dict
    engine.shutdown()

Semantics:

* ``generate`` sends one /generate request per prompt to ``base_url`` (a server this engine
  launched, an existing server, or an sglang-router in front of several), at most ``concurrency``
  in flight, and returns one ``Generation`` per prompt in order (see ``client.py`` for the
  stop/length and log-prob conventions, which match ``HFRolloutEngine``). With
  ``return_routed_experts`` (--use-rollout-routing-replay) each one also carries ``routed_experts``,
  the top-``moe_top_k`` expert ids of each of ``num_moe_layers`` layers for every token the server
  ran (its servers need ``--enable-return-routed-experts``: ``SGLangServerProcess``'s
  ``return_routed_experts``).
* ``update_weights_stream(buckets)`` receives FULL tensors under Hugging Face checkpoint names,
  bucket by bucket: the trainer gathers the TP shards and EP experts one parameter at a time and
  renames them through hyrl's HF<->Megatron mapping table (``hyrl.models.qwen3_moe.hf_mapping``).
  Each bucket is sent by the receiver of the chosen transport (``RECEIVERS``, by the names of
  hyrl.config.weight_transport: "tensor" | "distributed" | "disk"; ``receive/``;
  ``weight_sync_options`` go to its constructor) before the next one is taken. The
  engine is a ``BucketReceiver``: engines on Ray get the same stream as begin / bucket / end
  calls. ``update_weights(hf_state_dict)`` takes a whole state dict (fused experts), split into
  the per-expert checkpoint names (``receive.payload.checkpoint_named_tensors``) and cut into
  buckets of ``buffer_bytes``. Weights are
  sent to ``weight_sync_urls`` - each server directly, never through a router, which does not
  fan weight routes out - defaulting to ``[base_url]``. ``last_sync_stats`` holds the
  ``SyncStats`` (elapsed_s, transfer_s, tensor_bytes, buckets) of the latest sync.
* ``release_memory()`` / ``resume_memory()`` free and retake the server's GPU memory around the
  actor's training step when colocated (server launched with ``--enable-memory-saver``); release
  first flushes the cache, as slime does. ``tags`` ("weights", "kv_cache") resume in stages, e.g.
  weights before a sync and the KV cache after it, to lower the peak.
* ``shutdown()`` leaves a distributed weight group and kills the server if this engine launched it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from hyrl.config.weight_transport import DISK, DISTRIBUTED, TENSOR
from hyrl.models.weight_buckets import NamedTensors
from hyrl.rollout.base import BucketReceiver, Generation, SamplingParams
from hyrl.rollout.sglang.client import SGLangClient, timed_out
from hyrl.rollout.sglang.receive.disk import DiskWeightSync
from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync
from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors
from hyrl.rollout.sglang.receive.session import PausedSync, SyncStats
from hyrl.rollout.sglang.receive.tensor import TensorWeightSync
from hyrl.rollout.sglang.server import SGLangServerProcess

DEATH_GRACE_S = 5.0  # how long a failed call waits for a dying server to exit, or to answer
# transport -> the engine's receiver of it
RECEIVERS: dict[str, type[PausedSync]] = {
    TENSOR: TensorWeightSync,
    DISTRIBUTED: DistributedWeightSync,
    DISK: DiskWeightSync,
}


class SGLangEngine(BucketReceiver):
    def __init__(
        self,
        base_url: str,
        *,
        concurrency: int,
        stop_token_ids: Sequence[int],
        weight_sync: str = TENSOR,
        buffer_bytes: int = 512 * 1024**2,
        weight_sync_options: Mapping | None = None,
        weight_sync_urls: Sequence[str] | None = None,
        timeout_s: float = 600.0,
        server: SGLangServerProcess | None = None,
        return_routed_experts: bool = False,
        num_moe_layers: int | None = None,
        moe_top_k: int | None = None,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if weight_sync not in RECEIVERS:
            raise ValueError(f"weight_sync must be one of {sorted(RECEIVERS)}, got {weight_sync!r}")
        self.client = SGLangClient(
            base_url,
            timeout_s,
            return_routed_experts=return_routed_experts,
            num_moe_layers=num_moe_layers,
            moe_top_k=moe_top_k,
        )
        self.concurrency = concurrency
        self.stop_token_ids = list(stop_token_ids)
        self.server = server
        sync_clients = [SGLangClient(url, timeout_s) for url in (weight_sync_urls or [base_url])]
        self.weight_sync = RECEIVERS[weight_sync](
            sync_clients, buffer_bytes, **dict(weight_sync_options or {})
        )
        self.last_sync_stats: SyncStats | None = None

    @classmethod
    def launch(
        cls, server: SGLangServerProcess, startup_timeout_s: float = 900.0, **engine_options
    ) -> SGLangEngine:
        """Start `server`, wait until it generates, and drive it; shutdown() kills it."""
        server.start(startup_timeout_s)
        try:
            return cls(server.url, server=server, **engine_options)
        except Exception:
            server.kill()
            raise

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.client.generate_batch(prompts, params, self.stop_token_ids, self.concurrency)

    def dead(
        self, error: BaseException | None = None, grace_s: float = DEATH_GRACE_S
    ) -> str | None:
        """After a call failed with `error`: why this engine's server is gone, or None when it
        still serves (the failure was the call's own). Gone: a request that got no answer
        within the client's deadline (--sglang-request-timeout-s: a hung server), its process
        exited (within grace_s), or it no longer answers GET /health (SGLang 0.5.23's /health
        generates a token and fails when the scheduler makes no progress)."""
        if error is not None and timed_out(error):
            return (
                f"its SGLang server at {self.client.base_url} did not answer a request within "
                f"{self.client.timeout_s:g} s (--sglang-request-timeout-s): taken for hung"
            )
        if self.server is not None:
            exited = self.server.exit_status(grace_s)
            if exited is not None:
                return f"its SGLang server at {self.client.base_url} {exited}"
        if not self.client.health(timeout_s=grace_s):
            return f"its SGLang server at {self.client.base_url} does not answer /health"
        return None

    @torch.no_grad()
    def update_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        self.last_sync_stats = self.weight_sync.sync(checkpoint_named_tensors(hf_state_dict))

    def load_weights_from_disk(self, checkpoint) -> None:
        """Load a checkpoint the trainer ranks wrote (``checkpoint``: a ``DiskCheckpoint``)."""
        if not isinstance(self.weight_sync, DiskWeightSync):
            raise ValueError(
                f"load_weights_from_disk needs weight_sync='disk', this engine "
                f"syncs with {self.weight_sync.transport!r}"
            )
        self.last_sync_stats = self.weight_sync.sync_written(
            checkpoint.directory, checkpoint.tensor_bytes, checkpoint.shards
        )

    def begin_weight_update(self) -> None:
        self.weight_sync.begin()

    @torch.no_grad()
    def load_weight_bucket(self, bucket: NamedTensors) -> None:
        self.weight_sync.send(bucket)

    def end_weight_update(self, succeeded: bool = True) -> None:
        stats = self.weight_sync.end(succeeded)
        if succeeded:
            self.last_sync_stats = stats

    @property
    def last_request_latencies_s(self) -> list[float]:
        """Per prompt of the latest generate: seconds from its request to its answer."""
        return self.client.last_request_latencies_s

    def server_url(self) -> str:
        """The URL this engine generates from (its own server when it launched one)."""
        return self.client.base_url

    def sync_stats(self) -> SyncStats | None:
        return self.last_sync_stats

    def release_memory(self, tags: Sequence[str] | None = None) -> None:
        for client in self.weight_sync.clients:
            client.flush_cache()
            client.release_memory_occupation(tags)

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        for client in self.weight_sync.clients:
            client.resume_memory_occupation(tags)

    def close(self) -> None:
        self.shutdown()

    def sync_metrics(self) -> dict[str, float]:
        return self.last_sync_stats.metrics() if self.last_sync_stats is not None else {}

    def shutdown(self) -> None:
        if isinstance(self.weight_sync, DistributedWeightSync):
            self.weight_sync.close()
        if self.server is not None:
            self.server.kill()
