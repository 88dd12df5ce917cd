"""The hf engines' mode (``load_state_dict``; --rollout-engine hf takes no
--update-weight-transport): buckets through rank 0 (``ThroughRank0``), each copied into the
engine's own transformers model as it arrives.

The in-process engine (hyrl.rollout.hf_engine) copies each bucket's tensors into their
parameters, an expert's into its rows of the fused expert weights, cast to the engine's dtype;
engines on Ray (hyrl.rollout.fleet) get one ``ray.put`` per bucket and do the same in their
process. Nothing is shared between the trainer's tensors and the engine's.
"""

from __future__ import annotations

from hyrl.weight_sync.base import ThroughRank0


class LoadStateDictMode(ThroughRank0):
    name = "load_state_dict"
