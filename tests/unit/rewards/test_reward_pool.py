"""RewardPool: Ray reward workers with per-item failure and timeout handling
(hyrl/rewards/pool.py)."""

import os
import signal
import sys
import time

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # before ray.init: no token set-up, no warning

ray = pytest.importorskip("ray")

from hyrl.rewards.exact_match import ExactMatchReward  # noqa: E402
from hyrl.rewards.pool import RewardPool, ScoredBatch  # noqa: E402
from hyrl.rewards.registry import BUILTIN_REWARDS, reward_factory  # noqa: E402

# tests/ is not a package the Ray workers can import, so cloudpickle must ship the reward class
# below by value (by default it pickles it by reference, and the actor fails to start with
# "ModuleNotFoundError: No module named 'test_reward_pool'").
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT_S = 1.0


class ScriptedReward:
    """float(text) for a "stop" response, -1.0 otherwise; the label scripts a misbehaviour:
    "boom" raises, "hang" sleeps far past the timeout, "die" kills the worker process.

    Installs a SIGALRM handler on every call, as math-verify does: that raises ValueError unless
    the call runs on its process's main thread.
    """

    def __call__(self, response_text, label, finish_reason):
        previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, previous)
        if label == "boom":
            raise ValueError("bad label boom")
        if label == "hang":
            time.sleep(60)
        if label == "die":
            os._exit(3)
        return float(response_text) if finish_reason == "stop" else -1.0


def batch(n, special=None):
    """n items that ScriptedReward scores float(i); `special` maps an index to its label."""
    special = special or {}
    return ([str(i) for i in range(n)], [special.get(i, "ok") for i in range(n)], ["stop"] * n)


def good(n):
    return ScoredBatch([float(i) for i in range(n)], 0, 0, [])


@pytest.fixture(scope="module")
def pool():
    """The module's pool. Ray is not running yet, so this pool starts it (num_cpus=2, exactly its
    two workers' reservation, so replacements must wait for the killed actor's CPU) and must shut
    it down when closed."""
    assert not ray.is_initialized()
    p = RewardPool(ScriptedReward, num_workers=2, timeout_s=TIMEOUT_S)
    assert ray.is_initialized()
    yield p
    p.close()
    assert not ray.is_initialized(), "the pool that started Ray must shut it down"


def test_order_preserved_over_50_items(pool):
    texts, labels, reasons = batch(50)
    reasons[7] = "length"
    expected = good(50)
    expected.rewards[7] = -1.0
    assert pool.score(texts, labels, reasons) == expected
    assert pool.score([], [], []) == ScoredBatch([], 0, 0, [])


def test_raising_item_scores_zero_and_is_reported(pool):
    restarts = pool.worker_restarts
    scored = pool.score(*batch(10, {3: "boom"}))
    assert scored.rewards == [0.0 if i == 3 else float(i) for i in range(10)]
    assert (scored.failures, scored.timeouts) == (1, 0)
    assert scored.errors == ["index 3: ValueError: bad label boom"]
    # the worker that raised keeps running: no restart, the next batch is scored normally
    assert pool.score(*batch(6)) == good(6)
    assert pool.worker_restarts == restarts


def test_errors_are_capped_at_five_in_index_order(pool):
    scored = pool.score(*batch(12, {i: "boom" for i in range(0, 12, 2)}))
    assert scored.failures == 6
    assert scored.errors == [f"index {i}: ValueError: bad label boom" for i in range(0, 10, 2)]


def test_in_process_path_gives_identical_results(pool):
    local = RewardPool(ScriptedReward, num_workers=0, timeout_s=TIMEOUT_S)
    for args in (batch(50), batch(9, {4: "boom"})):
        assert local.score(*args) == pool.score(*args)
    local.close()


def test_timeout_scores_zero_and_worker_is_replaced(pool):
    restarts = pool.worker_restarts
    start = time.perf_counter()
    scored = pool.score(*batch(12, {2: "hang"}))
    elapsed = time.perf_counter() - start
    assert elapsed < TIMEOUT_S + 3.0, f"a hung item held the batch for {elapsed:.1f} s"
    assert scored.rewards == [0.0 if i == 2 else float(i) for i in range(12)]
    assert (scored.failures, scored.timeouts) == (1, 1)
    assert len(scored.errors) == 1 and scored.errors[0].startswith("index 2: TimeoutError:")
    assert pool.worker_restarts == restarts + 1
    # the pool keeps working: both workers (one of them the replacement) score the next batch
    assert pool.score(*batch(20)) == good(20)
    assert pool.worker_restarts == restarts + 1


def test_worker_crash_scores_zero_and_worker_is_replaced(pool):
    restarts = pool.worker_restarts
    scored = pool.score(*batch(10, {6: "die"}))
    assert scored.rewards == [0.0 if i == 6 else float(i) for i in range(10)]
    assert (scored.failures, scored.timeouts) == (1, 0)
    assert scored.errors[0].startswith("index 6: ") and "died" in scored.errors[0]
    assert pool.worker_restarts == restarts + 1
    assert pool.score(*batch(8)) == good(8)


def test_exact_match_through_pool_matches_direct_call(pool):
    texts = ["12", " 12\n", "13", "12", "", "7", "7 ", "x7"]
    labels = ["12", "12", "12", "12", "0", "7", "7", "7"]
    reasons = ["stop", "stop", "stop", "length", "stop", "stop", "stop", "stop"]
    expected = ExactMatchReward().score_batch(texts, labels, reasons)
    assert sum(expected) == 4  # the case mixes hits and misses
    # a second pool on the running Ray; its CPUs are taken by the module pool's workers, so these
    # reserve none (actor_options go to .options())
    with RewardPool(
        ExactMatchReward, num_workers=2, timeout_s=TIMEOUT_S, actor_options={"num_cpus": 0}
    ) as em_pool:
        assert em_pool.score(texts, labels, reasons) == ScoredBatch(expected, 0, 0, [])
    assert ray.is_initialized(), "a pool that found Ray running must leave it running"


# (texts, labels) per built-in reward: a right answer, a wrong one, and the right one cut by the
# length limit
BUILTIN_SAMPLES = {
    "exact_match": (["12", "13"], ["12", "12"]),
    "math": ([r"\boxed{\frac{1}{2}}", r"\boxed{3}"], ["0.5", "0.5"]),
    "mcq": (["Answer: B", "Answer: C"], ["B", "B"]),
    "logic": (['{"a": "knight"}', '{"a": "knave"}'], ['{"a": "knight"}'] * 2),
    "deepscaler": ([r"</think>\boxed{42}", r"\boxed{42}"], ["42", "42"]),
    "dapo": (["Answer: 42", r"\boxed{42}"], ["42", "42"]),
    "f1": (["The city of Paris.", "Lyon"], ["Paris", "Paris"]),
}


def test_every_builtin_has_a_sample():
    assert set(BUILTIN_SAMPLES) == set(BUILTIN_REWARDS)


@pytest.mark.parametrize("rm_type", sorted(BUILTIN_SAMPLES))
def test_builtin_reward_through_ray_workers_matches_direct_call(pool, rm_type):
    # the registry's factory is pickled to the worker, which imports hyrl and builds the reward
    right_text, wrong_text = BUILTIN_SAMPLES[rm_type][0]
    labels = BUILTIN_SAMPLES[rm_type][1] + BUILTIN_SAMPLES[rm_type][1][:1]
    texts, reasons = [right_text, wrong_text, right_text], ["stop", "stop", "length"]
    reward = BUILTIN_REWARDS[rm_type]()
    expected = [reward(t, y, f) for t, y, f in zip(texts, labels, reasons)]
    assert expected[0] > 0 and expected[1:] == [0.0, 0.0]
    with RewardPool(
        reward_factory(rm_type, None), num_workers=1, timeout_s=30.0, actor_options={"num_cpus": 0}
    ) as builtin_pool:
        assert builtin_pool.score(texts, labels, reasons) == ScoredBatch(expected, 0, 0, [])


def test_mismatched_lengths_and_closed_pool_raise():
    local = RewardPool(ScriptedReward, num_workers=0, timeout_s=TIMEOUT_S)
    with pytest.raises(ValueError, match="2 texts, 1 labels"):
        local.score(["1", "2"], ["ok"], ["stop", "stop"])
    local.close()
    with pytest.raises(RuntimeError, match="after close"):
        local.score(["1"], ["ok"], ["stop"])
