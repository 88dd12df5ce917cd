"""--async-rollout's queued rollouts in a checkpoint (hyrl.rollout.queue_state and
hyrl.checkpoint.trainer_state.read_rollout_queue): saved as plain data that loads with no hyrl
class, read back field by field; a queue pickled by an older hyrl still loads."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from hyrl.algorithms.dynamic_sampling import DynamicSampling
from hyrl.checkpoint.step_files import ROLLOUT_QUEUE_FILE
from hyrl.checkpoint.trainer_state import read_rollout_queue
from hyrl.data.stream import Prompt
from hyrl.rollout import queue_state
from hyrl.rollout.async_queue import QueuedRollout
from hyrl.rollout.base import Generation, RolloutBatch

PROMPTS = [Prompt([2, 3], "5", "2+3", 0), Prompt([4], "4", "4", 1)]


def _queued() -> QueuedRollout:
    generations = [
        Generation([2, 3], [5, 1], [-0.5, -0.25], "stop", response_versions=[3, 4]),
        Generation([4], [6, 7, 8], [-1.0, 0.0, -2.0], "length", response_sampled=[1, 0, 1]),
    ]
    scored = SimpleNamespace(rewards=[1.0, 0.0], failures=0, timeouts=1)
    batch = RolloutBatch.of(generations, scored)
    batch.dynamic_sampling = DynamicSampling([0, 1], 2, 4, 2, 0, 8, 0.25)
    routed = [torch.arange(12, dtype=torch.int16).view(2, 3, 2), None]
    return QueuedRollout(batch, routed, PROMPTS, [3, 4])


def _same(a: QueuedRollout, b: QueuedRollout) -> None:
    assert dataclasses.asdict(a.batch) == dataclasses.asdict(b.batch)
    assert a.prompts == b.prompts and a.versions == b.versions
    assert torch.equal(a.routed[0], b.routed[0]) and b.routed[1] is None


def test_a_saved_queue_is_plain_data_that_loads_without_unpickling_a_class(tmp_path):
    queued = _queued()
    torch.save(queue_state.to_plain([queued, queued]), tmp_path / ROLLOUT_QUEUE_FILE)
    # weights_only: dicts, lists, numbers, strings and tensors only; a pickled hyrl class fails
    assert len(torch.load(tmp_path / ROLLOUT_QUEUE_FILE, weights_only=True)) == 2
    back = queue_state.from_saved(read_rollout_queue(tmp_path))
    assert len(back) == 2
    _same(queued, back[0])
    # one row without per-token versions: the batch counts staleness per generation call (3, 4)
    assert back[0].batch.response_versions is None and back[0].staleness(5) == [2, 1]


def test_a_queue_pickled_by_an_older_hyrl_still_loads(tmp_path):
    # before plain data a checkpoint torch.saved the objects themselves
    queued = _queued()
    old = [{"batch": queued.batch, "routed": queued.routed, "prompts": PROMPTS, "versions": [3]}]
    torch.save(old, tmp_path / ROLLOUT_QUEUE_FILE)
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(tmp_path / ROLLOUT_QUEUE_FILE, weights_only=True)
    [back] = queue_state.from_saved(read_rollout_queue(tmp_path))
    assert dataclasses.asdict(back.batch) == dataclasses.asdict(queued.batch)
    assert back.prompts == PROMPTS and back.versions == [3]


def test_a_checkpoint_without_a_queue_reads_as_none(tmp_path):
    assert read_rollout_queue(tmp_path) == []


def test_a_batch_field_this_hyrl_lacks_or_a_newer_format_is_refused_by_name():
    [plain] = queue_state.to_plain([_queued()])
    plain["batch"]["turn_rewards"] = [[1.0]]
    with pytest.raises(ValueError, match=r"fields this hyrl lacks: \['turn_rewards'\]"):
        queue_state.from_saved([plain])
    [plain] = queue_state.to_plain([_queued()])
    plain["version"] = 2
    with pytest.raises(ValueError, match="version 2: this hyrl reads"):
        queue_state.from_saved([plain])
