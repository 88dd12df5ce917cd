"""``--update-weight-transport distributed`` (the default for SGLang engines on GPUs of their
own, or behind --sglang-router-url; refused with --colocate): buckets through rank 0
(``ThroughRank0``), whose engine broadcasts each over one NCCL group it formed with every
server, after posting the bucket's names, dtypes and shapes to
``/update_weights_from_distributed`` (SGLang's side: hyrl.rollout.sglang.weight_sync.distributed).

The broadcast goes out of rank 0's process only: the other training ranks take part in the
gathers and hold nothing.
"""

from __future__ import annotations

from hyrl.weight_sync.base import ThroughRank0


class DistributedMode(ThroughRank0):
    name = "distributed"
