"""The collectives of a TrainBackend that hyrl.weight_sync's modes use, on torch's default
process group: what a test that runs a mode's collective under torchrun (or on one gloo rank)
gives it in place of the megatron backend."""

import torch.distributed as dist


class DefaultGroupRanks:
    def __init__(self):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def all_gather_object(self, value) -> list:
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def gather_to_rank_0(self, value) -> list | None:
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(value, gathered, dst=0)
        return gathered

    def broadcast_from_rank_0(self, payload):
        box = [payload]
        dist.broadcast_object_list(box, src=0)
        return box[0]
