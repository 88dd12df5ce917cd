"""hyrl.checkpoint.retention: which checkpoints --keep-last-checkpoints and
--keep-checkpoint-every keep, on step directories made here (no torch, no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyrl.checkpoint.manifest import write_manifest
from hyrl.checkpoint.retention import (
    FORKS_FILE,
    PRUNED_PREFIX,
    clear_pruned,
    complete_steps,
    mark_fork,
    prune,
    to_prune,
)


def make_steps(save: Path, steps) -> None:
    for s in steps:
        d = save / f"step_{s}"
        d.mkdir(parents=True)
        # a loop state that names its files (one rank, no models: one rank file)
        state = {"rollout_step": s, "layout": {"world_size": 1}, "models": [], "trainables": []}
        (d / "trainer_state.json").write_text(json.dumps(state))
        (d / "rank_00000-of-00001.pt").write_bytes(b"x" * s)
        write_manifest(d)
    (save / "latest").write_text(f"step_{max(steps)}\n")


def names(save: Path) -> list[str]:
    return sorted(p.name for p in save.iterdir())


@pytest.mark.parametrize(
    "steps, keep_last, every, protected, pruned",
    [
        ([1, 2, 3, 4, 5], 3, None, (), [1, 2]),
        ([1, 2, 3, 4, 5], 1, None, (), [1, 2, 3, 4]),
        ([1, 2, 3, 4, 5], 0, None, (), []),  # 0 keeps all
        ([1, 2, 3], 3, None, (), []),
        ([1, 2, 3, 4, 5, 6], 2, 2, (), [1, 3]),  # milestones 2 and 4 (6 is among the last)
        ([1, 2, 3, 4, 5, 6], 1, None, (2, 3), [1, 4, 5]),  # --load's and a fork's steps stay
        ([10, 20, 30, 40], 2, 25, (), [10, 20]),  # no multiple of 25 among them
    ],
)
def test_to_prune_by_hand(steps, keep_last, every, protected, pruned):
    assert to_prune(steps, keep_last, every, protected) == pruned


def test_prune_deletes_the_old_steps_and_keeps_load_forks_and_everything_else(tmp_path):
    save = tmp_path / "ck"
    make_steps(save, [1, 2, 3, 4, 5, 6])
    (save / ".tmp-step_7").mkdir()  # a save in progress elsewhere: not ours to touch
    (save / "run.json").write_text("{}")
    assert mark_fork(save / "step_2", "child", "runs/child") is None
    assert json.loads((save / "step_2" / FORKS_FILE).read_text()) == [
        {"run_id": "child", "run_dir": "runs/child"}
    ]
    deleted, notes = prune(save, save / "step_6", 2, None, load_dir=save / "step_3")
    assert [p.name for p in deleted] == ["step_1", "step_4"] and notes == []
    assert names(save) == [".tmp-step_7", "latest", "run.json", "step_2", "step_3", "step_5",
                           "step_6"]  # fmt: skip
    assert sorted(complete_steps(save)) == [2, 3, 5, 6]


def test_a_new_step_that_does_not_check_prunes_nothing(tmp_path):
    save = tmp_path / "ck"
    make_steps(save, [1, 2, 3, 4])
    (save / "step_4" / "rank_00000-of-00001.pt").write_bytes(b"")  # truncated after the save
    deleted, notes = prune(save, save / "step_4", 1, None)
    assert deleted == [] and "step_4 does not check" in notes[0]
    assert "rank_00000-of-00001.pt: 0 bytes, the save wrote 4" in notes[0]
    assert sorted(complete_steps(save)) == [1, 2, 3, 4]


def test_keep_all_and_a_crash_during_a_deletion(tmp_path):
    save = tmp_path / "ck"
    make_steps(save, [1, 2, 3, 4])
    assert prune(save, save / "step_4", 0, None) == ([], [])
    assert sorted(complete_steps(save)) == [1, 2, 3, 4]
    # a crash between the rename and the removal leaves .pruned-step_N: never a step, cleared
    (save / "step_1").rename(save / f"{PRUNED_PREFIX}step_1")
    assert sorted(complete_steps(save)) == [2, 3, 4]
    clear_pruned(save)
    assert not (save / f"{PRUNED_PREFIX}step_1").exists()


def test_a_fork_that_cannot_mark_a_read_only_checkpoint_says_so(tmp_path):
    step = tmp_path / "step_3"  # does not exist: as unwritable as a read-only one
    why = mark_fork(step, "child", "runs/child")
    assert why is not None and "could not mark" in why and "copy it" in why
