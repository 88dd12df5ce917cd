"""The SGLang engines hyrl starts, as one RolloutEngine: a RolloutFleet of engine actors (each
launching its server: ``launch.make_sglang_engine``) and the weight sync across them.

    fleet = SGLangFleet(RolloutFleet(factory, ...), "distributed", buffer_bytes, gpus_per_engine)
    fleet.generate(prompts, params)                 # the RolloutFleet's dispatch
    fleet.update_weights_stream(buckets)            # by the run's weight transport

By transport (hyrl.config.weight_transport; the trainer's side of each: hyrl.weight_sync):

* "tensor" without --colocate and "disk": each bucket through the fleet to every engine actor,
  which loads its own server (``receive.tensor.TensorWeightSync`` on the server's GPU,
  ``receive.disk.DiskWeightSync``); a replacement engine loads the newest weights before it
  serves. A checkpoint the trainer ranks wrote (``load_weights_from_disk``) goes to every actor.
* "distributed": this process broadcasts each bucket over one NCCL group with every server
  (``receive.distributed.DistributedWeightSync``) and tells the fleet the engines synced; a
  whole state dict (``update_weights``) is also staged for replacements. SGLang fixes a group's
  world size when it forms, so after a replacement (a new server, a new URL) the next sync
  first leaves the old group and forms a new one with the servers then up
  (``prepare_weight_sync``, which rank 0 runs before the training ranks gather anything).
* "tensor" with --colocate: the training ranks hand each server CUDA IPC handles of their own
  copies (``receive.tensor.ColocatedTensorSync``); this process posts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from hyrl.config.weight_transport import DISTRIBUTED

if TYPE_CHECKING:
    from hyrl.rollout.fleet import RolloutFleet
    from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync
    from hyrl.rollout.sglang.receive.session import SyncStats
    from hyrl.rollout.sglang.receive.tensor import ColocatedTensorSync


class SGLangFleet:
    """RolloutEngine over a RolloutFleet of SGLang engine actors.

    generate: the fleet (placement, concurrency per engine, restarts, resubmission).
    update_weights_stream (and update_weights, a whole dict): "tensor"/"disk" through the fleet,
    bucket by bucket (each actor loads its own server, and a replacement loads the newest
    weights before it serves); "distributed": this process broadcasts each bucket over one NCCL
    group with every server; a replacement waits for the next sync, before which
    ``prepare_weight_sync`` forms a new group with the servers then up.
    release_memory/resume_memory: on every engine (--colocate).
    """

    def __init__(
        self,
        fleet: RolloutFleet,
        transport: str,
        buffer_bytes: int,
        gpus_per_engine: int,
        *,
        backend: str = "nccl",
        device: torch.device | None = None,
        master_address: str | None = None,
    ):
        self.fleet = fleet
        self.transport = transport
        self.last_sync_stats: SyncStats | None = None
        self._distributed: DistributedWeightSync | None = None
        # --colocate tensor: the servers fed by the training ranks
        self._ipc_sync: ColocatedTensorSync | None = None
        self._buffer_bytes, self._gpus_per_engine = buffer_bytes, gpus_per_engine
        self._backend, self._device = backend, device
        self._master_address = master_address  # None: this node's address, as Ray sees it
        self._groups_formed = 0
        self._restarts_at_group: list[int] = []
        if transport == DISTRIBUTED:
            self._form_group(fleet.call_all("server_url"))

    def _form_group(self, urls: list[str]) -> None:
        """A new weight-update group with the servers at `urls` (SGLang's fixes its world size
        when formed: a replacement cannot join an old one). Each group gets its own name, so a
        server that could not destroy the previous one still joins."""
        from hyrl.rollout.sglang.client import SGLangClient
        from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync

        if self._device is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        if self._master_address is None:
            import ray

            # the servers may run on other nodes: they rendezvous at this node's address
            self._master_address = ray.util.get_node_ip_address()
        self._groups_formed += 1
        self._restarts_at_group = self.fleet.stats()["restarts"]  # who is in this group
        self._distributed = DistributedWeightSync(
            [SGLangClient(url) for url in urls],
            self._buffer_bytes,
            master_address=self._master_address,
            backend=self._backend,
            group_name=f"hyrl_weight_update_{self._groups_formed}",
            tp_sizes=self._gpus_per_engine,
            device=self._device,
        )
        self._distributed.connect()

    def prepare_weight_sync(self) -> None:
        """distributed, on rank 0 before any training rank gathers a weight: when the server
        set changed since the group formed (an engine was replaced: a new server, at a new URL
        or at the dead one's port again), leave the old group and form one with the servers
        now up. A no-op otherwise, and with the other transports (the fleet brings their
        replacements up to date)."""
        if self._distributed is None:
            return
        self.fleet.settle()  # replacements up: the group must include them
        urls = self.fleet.call_all("server_url")
        same_urls = [c.base_url for c in self._distributed.clients] == [u.rstrip("/") for u in urls]
        if same_urls and self.fleet.stats()["restarts"] == self._restarts_at_group:
            return
        self._distributed.close()  # the servers still up leave it; a dead one is skipped
        self._form_group(urls)

    def generate(self, prompts, params):
        return self.fleet.generate(prompts, params)

    def update_weights(self, hf_state_dict) -> None:
        if self._distributed is None:
            self.fleet.update_weights(hf_state_dict)
            self._collect_stats()
            return
        from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors

        self.prepare_weight_sync()
        self.last_sync_stats = self._distributed.sync(checkpoint_named_tensors(hf_state_dict))
        self.fleet.stage_weights(hf_state_dict)

    def update_weights_stream(self, buckets) -> None:
        """tensor/disk: each bucket through the fleet to every engine actor; distributed: each
        bucket broadcast from here. Nothing is kept for replacements (hyrl.rollout.fleet)."""
        if self._distributed is None:
            self.fleet.update_weights_stream(buckets)
            self._collect_stats()
            return
        self.prepare_weight_sync()
        self.last_sync_stats = self._distributed.sync_buckets(buckets)
        self.fleet.mark_synced()

    def load_weights_from_disk(self, checkpoint) -> None:
        """disk: every engine loads the checkpoint the trainer ranks wrote."""
        self.fleet.load_weights_from_disk(checkpoint)
        self._collect_stats()

    def prepare_ipc_sync(self, rank_devices) -> None:
        """--colocate tensor, before each sync: the servers' URLs (a replacement has a new one)
        and which training rank sits on each server's GPUs (``rank_devices``: every training
        rank's (host, GPU)); raises when an engine GPU has no training rank."""
        from hyrl.rollout.sglang.client import SGLangClient
        from hyrl.rollout.sglang.receive.tensor import ColocatedTensorSync, match_engine_ranks

        urls = self.fleet.call_all("server_url")
        # an engine keeps its bundle, so its GPUs, across replacements
        engine_ranks = match_engine_ranks(rank_devices, self.fleet.engine_devices)
        clients = [SGLangClient(url) for url in urls]
        if self._ipc_sync is None:
            self._ipc_sync = ColocatedTensorSync(clients, engine_ranks)
        self._ipc_sync.clients, self._ipc_sync.engine_ranks = clients, engine_ranks

    def begin_ipc_update(self, serializer) -> None:
        """--colocate tensor, after ``prepare_ipc_sync``: rank 0's part of the training ranks'
        CUDA IPC sync (hyrl.weight_sync.tensor.send_by_cuda_ipc): each server gets the handles
        of the training ranks on its GPUs (``ColocatedTensorSync``)."""
        assert self._ipc_sync is not None, "prepare_ipc_sync comes before each sync"
        self._ipc_sync.begin_ipc_update(serializer)

    def load_ipc_payloads(self, payloads, num_bytes: int) -> None:
        assert self._ipc_sync is not None, "prepare_ipc_sync comes before each sync"
        self._ipc_sync.load_ipc_payloads(payloads, num_bytes)

    def end_ipc_update(self, succeeded: bool = True) -> None:
        """Nothing is kept for replacements (hyrl.rollout.fleet)."""
        assert self._ipc_sync is not None, "prepare_ipc_sync comes before each sync"
        self._ipc_sync.end_ipc_update(succeeded)
        if succeeded:
            self.last_sync_stats = self._ipc_sync.last_stats
            self.fleet.mark_synced()

    def _collect_stats(self) -> None:
        stats = [s for s in self.fleet.call_all("sync_stats") if s is not None]
        self.last_sync_stats = max(stats, key=lambda s: s.elapsed_s) if stats else None

    def release_memory(self) -> None:
        self.fleet.call_all("release_memory")

    def resume_memory(self) -> None:
        self.fleet.call_all("resume_memory")

    def close(self) -> None:
        if self._distributed is not None:
            self._distributed.close()
        self.fleet.close()

    def sync_metrics(self) -> dict[str, float]:
        latest = self.last_sync_stats.metrics() if self.last_sync_stats is not None else {}
        return {**self.fleet.sync_metrics(), **latest}
