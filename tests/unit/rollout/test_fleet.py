"""RolloutFleet: rollout engines as Ray actors (hyrl/rollout/fleet.py), on real Ray and real hf
engines (the tiny Qwen3-MoE on CPU).

Every comparison is against a local HFRolloutEngine holding the same weights, decoding greedily:
the fleet must return exactly what one local engine returns, whichever engine served a prompt,
whether or not an engine died on the way.
"""

import os
import sys
import time

import pytest
import torch

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # before ray.init: no token set-up, no warning

ray = pytest.importorskip("ray")

from hyrl.data.tokenizer import build_tokenizer  # noqa: E402
from hyrl.models.qwen3_moe.config import TINY  # noqa: E402
from hyrl.rollout.base import SamplingParams  # noqa: E402
from hyrl.rollout.fleet import RolloutFleet, RolloutFleetError, chunk_bounds  # noqa: E402
from hyrl.rollout.hf_engine import HFRolloutEngine  # noqa: E402

# The engine classes below live in this module, which the Ray workers cannot import: cloudpickle
# must ship them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

TOKENIZER = build_tokenizer()
PAD_ID, EOS_ID = TOKENIZER.pad_token_id, TOKENIZER.eos_token_id
CONCURRENCY = 4
GREEDY = SamplingParams(max_new_tokens=2, temperature=0)
# 40 distinct prompts "a+b=", 4 or 5 tokens: 10 chunks of 4 on two engines.
PROMPTS = [TOKENIZER.encode(f"{i}+{i % 7}=") for i in range(10, 50)]
SLOW_PROMPT = TOKENIZER.encode("9+9=9")  # a chunk holding it takes SLOW_S longer
POISON_PROMPT = TOKENIZER.encode("0=0=0")  # a chunk holding it raises in generate
SLOW_S = 1.5


class ScriptedEngine(HFRolloutEngine):
    """The hf engine, with two scripted behaviours keyed on a prompt: SLOW_PROMPT sleeps SLOW_S
    before decoding (its engine is sure to be busy when the other engine finishes a ~20 ms chunk),
    POISON_PROMPT raises ValueError (an engine bug: not a death)."""

    def generate(self, prompts, params):
        if POISON_PROMPT in prompts:
            raise ValueError("poisoned prompt")
        if SLOW_PROMPT in prompts:
            time.sleep(SLOW_S)
        return super().generate(prompts, params)

    def whoami(self, suffix: str) -> str:
        return f"engine {self.engine_index}{suffix}"


def make_engine(engine_index: int) -> ScriptedEngine:
    engine = ScriptedEngine(TINY, concurrency=CONCURRENCY, pad_id=PAD_ID, eos_id=EOS_ID)
    engine.engine_index = engine_index
    return engine


MAKE_ENGINE = make_engine


def weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return HFRolloutEngine(
        TINY, concurrency=CONCURRENCY, pad_id=PAD_ID, eos_id=EOS_ID
    ).model.state_dict()


WEIGHTS_A, WEIGHTS_B = weights(0), weights(1)


def local_generations(hf_state_dict, prompts):
    return local_engine_generations(hf_state_dict, prompts, GREEDY)


def local_engine_generations(hf_state_dict, prompts, params):
    engine = HFRolloutEngine(TINY, concurrency=CONCURRENCY, pad_id=PAD_ID, eos_id=EOS_ID)
    engine.update_weights(hf_state_dict)
    return engine.generate(prompts, params)


def assert_same_generations(got, expected):
    """Same prompts in the same order (each once), same tokens and finish reasons, same log-probs
    (to float rounding: a prompt may share its batch with other prompts in the fleet)."""
    assert [(g.prompt_ids, g.response_ids, g.finish_reason) for g in got] == [
        (e.prompt_ids, e.response_ids, e.finish_reason) for e in expected
    ]
    for g, e in zip(got, expected):
        assert g.response_log_probs == pytest.approx(e.response_log_probs, abs=1e-5)


def delta(after, before):
    return [a - b for a, b in zip(after, before)]


@pytest.fixture(scope="module")
def ray_cluster():
    """Ray started by the test, so every fleet here finds it running and must leave it running.
    4 logical CPUs on a 2-core machine: the engines idle between the short chunks."""
    assert not ray.is_initialized()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fleet(ray_cluster):
    with RolloutFleet(
        MAKE_ENGINE,
        num_engines=2,
        concurrency_per_engine=CONCURRENCY,
        num_cpus_per_engine=0.5,
        max_restarts=3,
    ) as f:
        yield f
    assert ray.is_initialized(), "a fleet that found Ray running must leave it running"


# --- dispatch rule ----------------------------------------------------------------------------


def test_chunks_are_contiguous_capped_at_concurrency_and_give_every_engine_work():
    assert chunk_bounds(40, num_engines=2, concurrency=4) == [(i, i + 4) for i in range(0, 40, 4)]
    # 17 prompts, at most 8 at once: 3 chunks (6, 6, 5), not (8, 8, 1)
    assert chunk_bounds(17, num_engines=2, concurrency=8) == [(0, 6), (6, 12), (12, 17)]
    # fewer prompts than 4 engines x 8: one chunk per engine, sizes 3, 3, 2, 2
    assert chunk_bounds(10, num_engines=4, concurrency=8) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(3, num_engines=4, concurrency=8) == [(0, 1), (1, 2), (2, 3)]
    assert chunk_bounds(0, num_engines=4, concurrency=8) == []


# --- generation -------------------------------------------------------------------------------


def test_two_engines_return_the_local_engines_generations_in_order(fleet):
    fleet.update_weights(WEIGHTS_A)
    before = fleet.stats()
    got = fleet.generate(PROMPTS, GREEDY)
    after = fleet.stats()

    assert_same_generations(got, local_generations(WEIGHTS_A, PROMPTS))
    served = delta(after["chunks_served"], before["chunks_served"])
    assert sum(served) == 10 and min(served) > 0  # 40 prompts in chunks of 4, both engines worked
    assert all(0 < peak <= CONCURRENCY for peak in after["peak_in_flight"])
    assert after["restarts"] == before["restarts"]
    assert fleet.engine_gpu_ids == [[], []]  # CPU engines: Ray gave them no GPU
    # make_engine got each engine's index; call_all reaches every engine, in engine order
    assert fleet.call_all("whoami", "!") == ["engine 0!", "engine 1!"]

    # 3 prompts < 2 engines x 4: both engines get a chunk (of 2 and 1)
    before = fleet.stats()
    assert_same_generations(
        fleet.generate(PROMPTS[:3], GREEDY), local_generations(WEIGHTS_A, PROMPTS[:3])
    )
    assert delta(fleet.stats()["chunks_served"], before["chunks_served"]) == [1, 1]
    assert fleet.generate([], GREEDY) == []


def test_a_partial_rollout_through_the_fleet_continues_each_response_with_the_new_weights(fleet):
    """--inflight-weight-updates on engines on Ray: segments of one token, the weights moved from A
    to B between the two; each response is A's first token then B's continuation of prompt + it."""
    from hyrl.rollout.partial import generate_in_segments

    fleet.update_weights(WEIGHTS_A)
    synced = []

    def segment(prompts, params):
        version = len(synced)
        generations = fleet.generate(prompts, params)
        if not synced:  # the weight sync that lands between the segments
            fleet.update_weights(WEIGHTS_B)
            synced.append(1)
        return generations, version

    got = generate_in_segments(segment, PROMPTS, GREEDY, segment_tokens=1)

    one_token = SamplingParams(max_new_tokens=1, temperature=0)
    firsts = local_engine_generations(WEIGHTS_A, PROMPTS, one_token)
    going_on = [i for i, g in enumerate(firsts) if g.finish_reason == "length"]
    seconds = local_engine_generations(
        WEIGHTS_B, [PROMPTS[i] + firsts[i].response_ids for i in going_on], one_token
    )
    assert going_on, "some response must outlive its first token"
    expected = {i: (firsts[i].response_ids, firsts[i].response_log_probs, [0]) for i in range(40)}
    for i, second in zip(going_on, seconds):
        expected[i] = (
            firsts[i].response_ids + second.response_ids,
            firsts[i].response_log_probs + second.response_log_probs,
            [0, 1],
        )
    for i, g in enumerate(got):
        tokens, log_probs, versions = expected[i]
        assert (g.prompt_ids, g.response_ids, g.response_versions) == (PROMPTS[i], tokens, versions)
        assert g.response_log_probs == pytest.approx(log_probs, abs=1e-5)
    fleet.update_weights(WEIGHTS_A)


def test_engine_killed_mid_rollout_loses_and_duplicates_nothing_and_the_new_one_gets_new_weights(
    fleet,
):
    fleet.update_weights(WEIGHTS_A)
    prompts = PROMPTS[:5] + [SLOW_PROMPT] + PROMPTS[6:]  # chunk 1 (prompts 4..7) is slow
    kills = []

    def kill_the_other_engine_after_the_first_chunk(engine_index, chunk_index):
        if not kills:
            other = 1 - engine_index
            kills.append(other)
            fleet.kill_engine(other)

    before = fleet.stats()
    fleet.on_chunk_done = kill_the_other_engine_after_the_first_chunk
    try:
        got = fleet.generate(prompts, GREEDY)
    finally:
        fleet.on_chunk_done = None
    after = fleet.stats()

    assert_same_generations(got, local_generations(WEIGHTS_A, prompts))
    killed = kills[0]
    restarts = [0, 0]
    restarts[killed] = 1
    assert delta(after["restarts"], before["restarts"]) == restarts
    # the killed engine was sleeping on the slow chunk: its 4 prompts were sent again, once
    assert after["resubmitted_prompts"] - before["resubmitted_prompts"] == CONCURRENCY
    assert sum(delta(after["chunks_served"], before["chunks_served"])) == 10

    # the replacement loads the newest weights and serves the next rollout with them
    expected_b = local_generations(WEIGHTS_B, PROMPTS)
    assert [g.response_ids for g in expected_b] != [
        g.response_ids for g in local_generations(WEIGHTS_A, PROMPTS)
    ]
    fleet.update_weights(WEIGHTS_B)
    before = fleet.stats()
    assert_same_generations(fleet.generate(PROMPTS, GREEDY), expected_b)
    assert delta(fleet.stats()["chunks_served"], before["chunks_served"])[killed] > 0
    assert fleet.stats()["restarts"] == after["restarts"]


def test_an_engine_killed_while_the_async_worker_generates_ahead_loses_and_duplicates_nothing(
    fleet,
):
    """--async-rollout: the rollout queue's worker thread drives the fleet; an engine dies in
    the middle of that rollout; what the trainer takes is exactly one local engine's output."""
    import threading

    from hyrl.rollout.async_queue import QueuedRollout, RolloutQueue

    fleet.update_weights(WEIGHTS_A)
    prompts = PROMPTS[:5] + [SLOW_PROMPT] + PROMPTS[6:]  # chunk 1 (prompts 4..7) is slow
    kills, threads = [], []

    def kill_the_other_engine_after_the_first_chunk(engine_index, chunk_index):
        if not kills:
            kills.append(1 - engine_index)
            fleet.kill_engine(1 - engine_index)

    def produce():
        threads.append(threading.current_thread().name)
        generations = fleet.generate(prompts, GREEDY)
        return QueuedRollout(batch=generations, routed=None, prompts=prompts, versions=[0])

    before = fleet.stats()
    fleet.on_chunk_done = kill_the_other_engine_after_the_first_chunk
    queue = RolloutQueue(produce, max_staleness=1)
    try:
        queue.top_up(1)  # generated ahead, on the worker thread
        taken = queue.take(trainer_version=1)
    finally:
        fleet.on_chunk_done = None
        queue.close()
    after = fleet.stats()

    assert threads and threads[0].startswith("hyrl-rollout")
    assert taken.staleness == [1] and taken.stale_dropped == 0
    assert_same_generations(taken.rollout.batch, local_generations(WEIGHTS_A, prompts))
    assert sum(delta(after["restarts"], before["restarts"])) == 1
    assert after["resubmitted_prompts"] - before["resubmitted_prompts"] == CONCURRENCY
    assert sum(delta(after["chunks_served"], before["chunks_served"])) == 10


def test_a_streamed_sync_stages_nothing_and_a_replacement_waits_for_the_next_sync(ray_cluster):
    """No bucket of a streamed sync is kept for replacements: a replacement starts from its
    factory's weights and serves only once the next sync has reached it; while it waits, the
    engine holding the newest weights serves everything, and with no such engine left the
    rollout raises instead of serving older weights."""
    from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
    from hyrl.models.weight_buckets import iter_buckets

    with RolloutFleet(
        MAKE_ENGINE,
        num_engines=2,
        concurrency_per_engine=CONCURRENCY,
        num_cpus_per_engine=0.5,
        max_restarts=2,
    ) as fleet:
        put = []
        real_put = ray.put
        ray.put = lambda value, **kw: put.append(value) or real_put(value, **kw)
        try:
            fleet.update_weights_stream(iter_buckets(split_fused_experts(WEIGHTS_B), 16 * 1024))
        finally:
            ray.put = real_put
        kept = [r for r in (fleet._weights_ref, *(s.weights_ref for s in fleet._slots))]
        assert not any(isinstance(r, ray.ObjectRef) for r in kept)  # nothing staged
        assert len(put) > 1  # one put per bucket, each dropped once loaded
        expected_b = local_generations(WEIGHTS_B, PROMPTS)
        assert_same_generations(fleet.generate(PROMPTS, GREEDY), expected_b)

        fleet.kill_engine(0)
        before = fleet.stats()
        assert_same_generations(fleet.generate(PROMPTS, GREEDY), expected_b)
        served = delta(fleet.stats()["chunks_served"], before["chunks_served"])
        assert served == [0, 10]  # the replacement waits; engine 1 served every chunk

        fleet.kill_engine(1)  # now no engine holds the newest weights
        with pytest.raises(RolloutFleetError, match=r"no engine holds the newest weights"):
            fleet.generate(PROMPTS, GREEDY)

        # the next sync reaches both replacements, which then serve it
        fleet.update_weights_stream(iter_buckets(split_fused_experts(WEIGHTS_A), 16 * 1024))
        before = fleet.stats()
        assert_same_generations(
            fleet.generate(PROMPTS, GREEDY), local_generations(WEIGHTS_A, PROMPTS)
        )
        assert all(n > 0 for n in delta(fleet.stats()["chunks_served"], before["chunks_served"]))
        assert fleet.stats()["restarts"] == [1, 1]


def test_engine_raising_in_generate_propagates_with_its_index_and_is_not_restarted(fleet):
    fleet.update_weights(WEIGHTS_A)
    prompts = PROMPTS[:5] + [POISON_PROMPT] + PROMPTS[6:]  # chunk 1 (prompts 4..7) raises
    before = fleet.stats()
    with pytest.raises(RolloutFleetError) as excinfo:
        fleet.generate(prompts, GREEDY)
    error = excinfo.value
    assert error.engine_index in (0, 1)
    assert f"engine {error.engine_index} raised in generate (chunk 1, prompts 4..7)" in str(error)
    assert "ValueError: poisoned prompt" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert fleet.stats()["restarts"] == before["restarts"]
    # both engines are still alive and serve the next rollout, whatever was in flight before
    assert_same_generations(fleet.generate(PROMPTS, GREEDY), local_generations(WEIGHTS_A, PROMPTS))
    assert fleet.stats()["restarts"] == before["restarts"]


# --- restart bound and resources ----------------------------------------------------------------


def test_a_death_beyond_max_restarts_raises_naming_the_engine_and_replacements_load_staged_weights(
    ray_cluster,
):
    with RolloutFleet(
        MAKE_ENGINE,
        num_engines=1,
        concurrency_per_engine=CONCURRENCY,
        num_cpus_per_engine=0.5,
        max_restarts=2,
    ) as fleet:
        fleet.update_weights(WEIGHTS_A)
        expected_a = local_generations(WEIGHTS_A, PROMPTS[:8])

        fleet.kill_engine(0)  # first death: within the bound, replaced with WEIGHTS_A
        assert_same_generations(fleet.generate(PROMPTS[:8], GREEDY), expected_a)
        assert fleet.stats()["restarts"] == [1]

        # staged weights (synced elsewhere, e.g. NCCL) are not pushed to the running engine...
        fleet.stage_weights(WEIGHTS_B)
        assert_same_generations(fleet.generate(PROMPTS[:8], GREEDY), expected_a)
        # ...but a replacement loads them before it serves
        fleet.kill_engine(0)
        assert_same_generations(
            fleet.generate(PROMPTS[:8], GREEDY), local_generations(WEIGHTS_B, PROMPTS[:8])
        )
        assert fleet.stats()["restarts"] == [2]

        fleet.kill_engine(0)  # third death: one more than max_restarts=2
        with pytest.raises(
            RolloutFleetError,
            match=r"engine 0 died after 2 restart\(s\) "
            r"\(max_restarts=2\).*last error: ActorDiedError",
        ):
            fleet.generate(PROMPTS[:8], GREEDY)
        assert fleet.stats()["retired"] == [True]
        with pytest.raises(RolloutFleetError, match="no engine left: engine 0: 2 restart"):
            fleet.generate(PROMPTS[:8], GREEDY)  # raises, does not hang


def test_unsatisfiable_placement_group_names_the_resources(ray_cluster):
    with pytest.raises(RolloutFleetError, match=r"2 engines x \{'GPU': 1.0\}.*available"):
        RolloutFleet(
            MAKE_ENGINE,
            num_engines=2,
            concurrency_per_engine=CONCURRENCY,
            num_cpus_per_engine=0,
            num_gpus_per_engine=1,
            startup_timeout_s=1,
        )
    assert ray.is_initialized()
