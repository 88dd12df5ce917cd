"""One table of weight-update request sequences, run against the fake SGLang server
(``tests/unit/rollout/test_fake_sglang_sessions.py``) and against SGLang 0.5.23's own scheduler
code (``tests/contract/test_weight_update_session.py``): both must accept or refuse every call
of every row as ``EXPECTED`` says, so the fake cannot accept a protocol SGLang refuses.

The answers are read off ``sglang/srt/managers/scheduler_components/weight_updater.py``:
``begin_weight_update`` is refused while a session is open, ``end_weight_update`` without one,
``update_weights_from_tensor`` and ``update_weights_from_distributed`` outside one;
``update_weights_from_disk`` never looks at the session.

A call is one of "begin", "update" (the mode's update route) and "end".
"""

from __future__ import annotations

from collections.abc import Callable

MODES = ("tensor", "distributed", "disk")
UPDATE_ROUTES = {
    "tensor": "/update_weights_from_tensor",
    "distributed": "/update_weights_from_distributed",
    "disk": "/update_weights_from_disk",
}
CALL_ROUTES = {"begin": "/begin_weight_update", "end": "/end_weight_update"}

SEQUENCES = {
    "in order": ("begin", "update", "update", "end"),
    "without a session": ("update",),
    "end before begin": ("end", "begin", "update", "end"),
    "update after end": ("begin", "update", "end", "update"),
    "begin twice": ("begin", "begin", "update", "end", "end"),
    "two syncs": ("begin", "update", "end", "begin", "update", "end"),
}

# (mode, sequence) -> accepted? per call. Written out row by row, not computed.
EXPECTED: dict[tuple[str, str], tuple[bool, ...]] = {
    ("tensor", "in order"): (True, True, True, True),
    ("tensor", "without a session"): (False,),
    ("tensor", "end before begin"): (False, True, True, True),
    ("tensor", "update after end"): (True, True, True, False),
    ("tensor", "begin twice"): (True, False, True, True, False),
    ("tensor", "two syncs"): (True, True, True, True, True, True),
    ("distributed", "in order"): (True, True, True, True),
    ("distributed", "without a session"): (False,),
    ("distributed", "end before begin"): (False, True, True, True),
    ("distributed", "update after end"): (True, True, True, False),
    ("distributed", "begin twice"): (True, False, True, True, False),
    ("distributed", "two syncs"): (True, True, True, True, True, True),
    ("disk", "in order"): (True, True, True, True),
    ("disk", "without a session"): (True,),
    ("disk", "end before begin"): (False, True, True, True),
    ("disk", "update after end"): (True, True, True, True),
    ("disk", "begin twice"): (True, False, True, True, False),
    ("disk", "two syncs"): (True, True, True, True, True, True),
}

ROWS = [(mode, name) for mode in MODES for name in SEQUENCES]

GROUP_NAME = "hyrl_weight_update"  # the distributed rows assume this group was joined


def update_payload(mode: str, disk_dir: str, serialize: Callable[[list], str]) -> dict:
    """A minimal valid update body: nothing to load (tensor: an empty list serialized by
    `serialize`; distributed: no names) or the checkpoint in `disk_dir` (disk)."""
    if mode == "tensor":
        return {"serialized_named_tensors": [serialize([])], "flush_cache": False}
    if mode == "distributed":
        return {
            "names": [],
            "dtypes": [],
            "shapes": [],
            "group_name": GROUP_NAME,
            "flush_cache": False,
        }
    return {"model_path": disk_dir, "flush_cache": False}


def write_disk_checkpoint(directory: str) -> None:
    """One zero tensor the fake holds, as a shard and the index that names it."""
    import json
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    save_file({"lm_head.weight": torch.zeros(16, 4)}, Path(directory) / "model-00001.safetensors")
    index = {"weight_map": {"lm_head.weight": "model-00001.safetensors"}}
    (Path(directory) / "model.safetensors.index.json").write_text(json.dumps(index))


def answers(
    post: Callable[[str, dict], tuple[int, str]],
    mode: str,
    sequence: str,
    disk_dir: str,
    serialize: Callable[[list], str],
) -> tuple[bool, ...]:
    """Post the row's calls in order (`post(route, body) -> (status, body)`); per call,
    accepted (HTTP 200) or refused (HTTP 400). Any other status is an error of the harness."""
    write_disk_checkpoint(disk_dir)
    accepted = []
    for call in SEQUENCES[sequence]:
        if call == "update":
            route, payload = UPDATE_ROUTES[mode], update_payload(mode, disk_dir, serialize)
        else:
            route, payload = CALL_ROUTES[call], {}
        status, body = post(route, payload)
        if status not in (200, 400):
            raise AssertionError(f"{route} answered HTTP {status}: {body[:300]}")
        accepted.append(status == 200)
    return tuple(accepted)
