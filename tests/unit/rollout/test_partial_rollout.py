"""Specification of --inflight-weight-updates (hyrl.rollout.partial and its use by the rollout
queue): generation in segments that a weight sync lands between, each token with the policy version
and the engine log-prob that sampled it, staleness from a response's oldest token, and the
rollout/partial_* metrics. A fake engine whose tokens and log-probs are functions of its weights'
version makes every number checkable by hand; the hf engine checks that segments sample as one
piece does."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

from hyrl.data.stream import Prompt
from hyrl.models.qwen3_moe.config import TINY
from hyrl.rollout import queue_state
from hyrl.rollout.async_queue import EngineLock, QueuedRollout, RolloutQueue
from hyrl.rollout.base import Generation, RolloutBatch, SamplingParams
from hyrl.rollout.hf_engine import HFRolloutEngine
from hyrl.rollout.partial import generate_in_segments, version_metrics

EOS = 1


def log_prob_of(version: int) -> float:
    """The fake engine's log-prob of any token it samples with version `version` weights."""
    return -0.1 * (version + 1)


class VersionedEngine:
    """A fake engine: the next token of a sequence is 10 + its length (prompt + response so far),
    except that a sequence reaching `eos_at` tokens samples EOS; every token's log-prob is
    log_prob_of(version). `sync_after` maps a call index to the version the weights move to
    right after that call (a weight sync between two segments)."""

    def __init__(self, eos_at: int = 1000, sync_after: dict[int, int] | None = None):
        self.version, self.eos_at = 0, eos_at
        self.sync_after = sync_after or {}
        self.calls: list[tuple[list[list[int]], int]] = []  # (prompts, max_new_tokens)

    def segment(self, prompts: list[list[int]], params: SamplingParams):
        self.calls.append(([list(p) for p in prompts], params.max_new_tokens))
        out = []
        for prompt in prompts:
            tokens: list[int] = []
            while len(tokens) < params.max_new_tokens:
                length = len(prompt) + len(tokens)
                tokens.append(EOS if length + 1 >= self.eos_at else 10 + length)
                if tokens[-1] == EOS:
                    break
            stop = tokens[-1:] == [EOS]
            out.append(
                Generation(
                    list(prompt),
                    tokens,
                    [log_prob_of(self.version)] * len(tokens),
                    "stop" if stop else "length",
                )
            )
        version = self.version
        self.version = self.sync_after.get(len(self.calls) - 1, self.version)
        return out, version


def test_segments_ask_at_most_segment_tokens_and_add_up_to_max_new_tokens():
    engine = VersionedEngine()
    [got] = generate_in_segments(engine.segment, [[2, 3]], SamplingParams(7), segment_tokens=3)
    assert [asked for _, asked in engine.calls] == [3, 3, 1]
    assert got.response_ids == [12, 13, 14, 15, 16, 17, 18] and got.finish_reason == "length"
    assert got.prompt_ids == [2, 3]


def test_each_segment_continues_the_prompt_plus_the_tokens_so_far():
    engine = VersionedEngine()
    generate_in_segments(engine.segment, [[2, 3], [4]], SamplingParams(4), segment_tokens=2)
    first, second = [prompts for prompts, _ in engine.calls]
    assert first == [[2, 3], [4]] and second == [[2, 3, 12, 13], [4, 11, 12]]


def test_a_response_that_samples_eos_leaves_the_batch_and_the_others_continue():
    engine = VersionedEngine(eos_at=5)  # a sequence of 5 tokens ends: [2, 3] + 12, 13, EOS
    long, short = generate_in_segments(
        engine.segment, [[2], [2, 3]], SamplingParams(6), segment_tokens=1
    )
    assert short.response_ids == [12, 13, EOS] and short.finish_reason == "stop"
    assert long.response_ids == [11, 12, 13, EOS] and long.finish_reason == "stop"
    # the short one stops in call 3; call 4 decodes the long one alone, and nothing after it
    assert [len(prompts) for prompts, _ in engine.calls] == [2, 2, 2, 1]


def test_each_token_carries_the_version_and_the_log_prob_of_the_segment_that_sampled_it():
    engine = VersionedEngine(sync_after={0: 1, 1: 2})  # syncs land after segments 1 and 2
    first, second = generate_in_segments(
        engine.segment, [[2], [3, 4]], SamplingParams(5), segment_tokens=2
    )
    for got in (first, second):
        assert got.response_versions == [0, 0, 1, 1, 2]
        assert got.response_log_probs == pytest.approx([-0.1, -0.1, -0.2, -0.2, -0.3])


def test_the_log_probs_tis_and_mis_read_are_each_tokens_own_sampling_policys():
    """Through RolloutBatch into the TokenBatch whose rollout_log_probs the trainer's mismatch
    metrics and --use-tis / --use-mis weights take: token by token, the log-prob of the weights
    that sampled it (version 0 for the first token, 3 after the sync)."""
    engine = VersionedEngine(sync_after={0: 3})  # versions 0 then 3
    generations = generate_in_segments(
        engine.segment, [[2], [3, 4, 5]], SamplingParams(4), segment_tokens=1
    )
    scored = SimpleNamespace(rewards=[1.0, 0.0], failures=0, timeouts=0)
    batch = RolloutBatch.of(generations, scored)
    assert batch.response_versions == [[0, 3, 3, 3], [0, 3, 3, 3]]
    tokens = batch.to_token_batch(pad_to_multiple_of=1)
    mask = tokens.loss_mask.bool()
    expected = [log_prob_of(v) for row in batch.response_versions for v in row]
    assert tokens.rollout_log_probs is not None
    assert tokens.rollout_log_probs[mask].tolist() == pytest.approx(expected)
    assert expected == pytest.approx([-0.1, -0.4, -0.4, -0.4] * 2)


def test_an_engine_that_cuts_a_response_short_without_eos_is_refused():
    def short(prompts, params):
        return [Generation(p, [10], [-1.0], "length") for p in prompts], 0

    with pytest.raises(RuntimeError, match="stopped a response at 1 of 3 tokens"):
        generate_in_segments(short, [[2]], SamplingParams(6), segment_tokens=3)
    with pytest.raises(ValueError, match="segment_tokens"):
        generate_in_segments(short, [[2]], SamplingParams(6), segment_tokens=0)


# --- the hf engine: segments sample what one piece samples ------------------------------------

# Prompts of lengths 1..6: the batch's left padding changes as responses leave it.
PROMPTS = [[2, 3, 13, 4, 14], [2, 5], [9], [2, 7, 13, 8, 14, 11], [2, 6, 13], [4, 4, 4, 4]]


def hf_engine() -> HFRolloutEngine:
    torch.manual_seed(0)
    return HFRolloutEngine(TINY, concurrency=4, pad_id=0, eos_id=EOS)


def in_process(engine: HFRolloutEngine):
    return lambda prompts, params: (engine.generate(prompts, params), 0)


def test_greedy_segments_of_the_hf_engine_decode_what_one_piece_decodes():
    engine = hf_engine()
    greedy = SamplingParams(max_new_tokens=7, temperature=0)
    whole = engine.generate(PROMPTS, greedy)
    pieces = generate_in_segments(in_process(engine), PROMPTS, greedy, segment_tokens=2)
    assert [(g.response_ids, g.finish_reason) for g in pieces] == [
        (g.response_ids, g.finish_reason) for g in whole
    ]
    for got, one in zip(pieces, whole):
        assert got.response_log_probs == pytest.approx(one.response_log_probs, abs=1e-5)
    assert {g.finish_reason for g in whole} == {"stop", "length"}  # both paths exercised


def test_sampled_segments_report_log_probs_of_softmax_logits_over_temperature():
    """At T = 0.7 each token's log-prob is log softmax(logits / T) of one unpadded forward pass
    of the final sequence: the sampling distribution, whichever segment drew it."""
    engine = hf_engine()
    torch.manual_seed(1)
    params = SamplingParams(max_new_tokens=6, temperature=0.7)
    for got in generate_in_segments(in_process(engine), PROMPTS, params, segment_tokens=4):
        ids = torch.tensor([got.prompt_ids + got.response_ids])
        with torch.no_grad():
            logits = engine.model(input_ids=ids).logits[0].float()
        start = len(got.prompt_ids) - 1
        predicting = logits[start : start + len(got.response_ids)] / 0.7
        expected = torch.log_softmax(predicting, -1).gather(
            -1, torch.tensor(got.response_ids)[:, None]
        )[:, 0]
        assert got.response_log_probs == pytest.approx(expected.tolist(), abs=1e-4)


# --- versions in the queue: staleness from the oldest token, partial_frac --------------------


def test_partial_metrics_by_hand():
    # responses of one version, two versions, one version, two versions (of 2, 2, 3, 3 tokens)
    metrics = version_metrics([[0, 0], [0, 1], [1, 1, 1], [0, 1, 1]])
    assert metrics["rollout/partial_frac"] == 0.5  # 2 of 4 responses span two versions
    assert metrics["rollout/partial_tokens_frac"] == pytest.approx(3 / 10)  # 1 + 2 of 10 tokens
    assert version_metrics([]) == {"rollout/partial_frac": 0.0, "rollout/partial_tokens_frac": 0.0}


def versioned(prompt: int, response_versions: list[list[int]]) -> QueuedRollout:
    batch = SimpleNamespace(
        response_versions=response_versions, responses_generated=len(response_versions)
    )
    calls = sorted({v for row in response_versions for v in row})
    return QueuedRollout(batch, None, [prompt], calls)


def test_staleness_of_a_response_is_counted_from_its_oldest_token():
    rollout = versioned(0, [[2, 2], [2, 3], [3, 3]])
    queue = RolloutQueue(lambda: rollout, 2, saved=[rollout])
    try:
        got = queue.take(4)
    finally:
        queue.close()
    assert rollout.version == 2 and got.staleness == [2, 2, 1]
    metrics = got.metrics()
    assert metrics["rollout/staleness_max"] == 2
    assert metrics["rollout/staleness_mean"] == pytest.approx(5 / 3)
    assert metrics["rollout/partial_frac"] == pytest.approx(1 / 3)
    assert metrics["rollout/partial_tokens_frac"] == pytest.approx(1 / 6)


def test_a_partial_batch_whose_oldest_token_is_staler_than_k_is_dropped():
    """Its newest tokens are within K = 1 of the trainer's version 3; its oldest (version 1) is
    not, so the batch is dropped and the next one taken."""
    queue = RolloutQueue(
        lambda: versioned(9, [[3]]),
        1,
        saved=[versioned(100, [[1, 2, 2], [2, 2, 2]]), versioned(101, [[2, 3], [3, 3]])],
    )
    try:
        got = queue.take(3)
    finally:
        queue.close()
    assert got.stale_dropped == 1 and got.rollout.prompts == [101]
    assert got.staleness == [1, 0]


def test_per_token_versions_survive_the_checkpointed_queue_state(tmp_path):
    generations = generate_in_segments(
        VersionedEngine(sync_after={0: 1}).segment, [[2], [3]], SamplingParams(3), 2
    )
    scored = SimpleNamespace(rewards=[0.0, 1.0], failures=0, timeouts=0)
    batch = RolloutBatch.of(generations, scored)
    prompt = Prompt([2], "a", "2", 0)
    torch.save(queue_state.to_plain([QueuedRollout(batch, None, [prompt], [0, 1])]), tmp_path / "q")
    [again] = queue_state.from_saved(torch.load(tmp_path / "q", weights_only=True))
    assert again.response_versions == [[0, 0, 1], [0, 0, 1]]
    assert again.staleness(2) == [2, 2]


def test_a_batch_without_token_versions_is_counted_per_generation_call():
    """A checkpoint written before per-token versions: its batch has response_versions None."""
    generations = [Generation([2], [3], [-0.5], "length")]
    batch = RolloutBatch.of(generations, SimpleNamespace(rewards=[0.0], failures=0, timeouts=0))
    assert batch.response_versions is None
    old = QueuedRollout(batch, None, ["a"], [4, 5])
    assert old.version == 4 and old.staleness(5) == [1, 0]


# --- the engine lock: a weight sync lands between two segments --------------------------------


def test_a_waiting_weight_sync_goes_before_the_workers_next_segment():
    """The worker takes the lock back at once after each 50 ms segment (at most 30 of them);
    each sync asked for while a segment runs is the next to hold the lock."""
    lock, events = EngineLock(), []
    segment_started = threading.Event()

    def worker():
        for _ in range(30):
            with lock.generation():
                events.append("segment")
                segment_started.set()
                time.sleep(0.05)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for _ in range(3):
            segment_started.clear()
            assert segment_started.wait(5)
            events.append("sync asked")
            with lock.weight_sync():
                events.append("sync")
    finally:
        thread.join()
    asked = [i for i, e in enumerate(events) if e == "sync asked"]
    assert len(asked) == 3 and all(events[i + 1] == "sync" for i in asked), events


class SegmentedSide:
    """RolloutManager's use of the lock under --inflight-weight-updates: each rollout is P = 2
    prompts generated in 6 segments of one token, each segment a call under the lock at the engines'
    version, 20 ms apart; the trainer's sync moves the version under the lock."""

    def __init__(self):
        self.lock, self.version, self.next_prompt = EngineLock(), 0, 0
        self.params = SamplingParams(max_new_tokens=6)
        self.segment_done = threading.Event()

    def segment(self, prompts, params):
        time.sleep(0.02)  # outside the lock, as the delay hook: a sync may take its turn
        with self.lock.generation():
            generations = [
                Generation(p, [10] * params.max_new_tokens, [-1.0], "length") for p in prompts
            ]
            version = self.version
        self.segment_done.set()
        return generations, version

    def produce(self) -> QueuedRollout:
        prompts = [[self.next_prompt], [self.next_prompt + 1]]
        self.next_prompt += 2
        generations = generate_in_segments(self.segment, prompts, self.params, 1)
        scored = SimpleNamespace(rewards=[0.0, 0.0], failures=0, timeouts=0)
        batch = RolloutBatch.of(generations, scored)
        calls = sorted({v for g in generations for v in g.response_versions or []})
        return QueuedRollout(batch, None, prompts, calls)

    def sync(self, version: int) -> None:
        with self.lock.weight_sync():
            self.version = version


def test_with_k1_a_sync_lands_inside_the_rollout_generated_ahead_and_staleness_stays_within_k():
    """The trainer's loop (take, top up, train, sync) where training lasts until the rollout
    generated ahead has decoded a segment: the sync lands between its segments."""
    side = SegmentedSide()
    queue = RolloutQueue(side.produce, 1)
    taken = []
    try:
        for step in range(1, 5):
            got = queue.take(side.version)
            side.segment_done.clear()
            queue.top_up(min(1, 4 - step))
            if step < 4:  # training, until the worker is one segment into the next rollout
                assert side.segment_done.wait(5)
            side.sync(step)
            taken.append(got)
    finally:
        queue.close()
    assert [t.rollout.prompts[0][0] for t in taken] == [0, 2, 4, 6]  # each prompt once, in order
    assert taken[0].metrics()["rollout/partial_frac"] == 0.0  # generated while the trainer waited
    for got in taken[1:]:  # generated ahead while the step before trained and synced
        assert got.metrics()["rollout/partial_frac"] == 1.0
        assert got.staleness == [1, 1] and got.stale_dropped == 0
        versions = got.rollout.response_versions
        assert versions is not None and all(len(set(v)) == 2 for v in versions)
