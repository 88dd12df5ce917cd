"""Held-out evaluation on rank 0: when it runs and what it measures (mean@k accuracy and
pass@k per set), during a run (`evaluate`) or of a saved model (`evaluate_model`, `hyrl eval`)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import torch

from hyrl.metrics.timers import StageTimers
from hyrl.rollout.base import SamplingParams
from hyrl.rollout.manager import RolloutManager

if TYPE_CHECKING:
    from hyrl.backends.base import TrainBackend
    from hyrl.config.concerns.evaluation import EvalView
    from hyrl.config.concerns.rollout import RolloutView
    from hyrl.config.concerns.run import RunView
    from hyrl.train.sync_and_offload import SyncAndOffload


def eval_schedule(evaluation: EvalView, run: RunView) -> set[int]:
    """Rollout steps after which rank 0 evaluates: 0 (before training), every
    --eval-interval, and the last (--num-steps)."""
    interval, num_steps = evaluation.eval_interval, run.num_steps
    if interval <= 0:
        return set()
    return {0, num_steps, *range(interval, num_steps + 1, interval)}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c are correct (Chen et al.
    2021): 1 - C(n-c, k) / C(n, k), as the product 1 - prod_{i=n-c+1}^{n} (1 - k/i), which
    stays finite where the binomials overflow a float."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0  # every k-subset holds a correct sample
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def evaluate(
    evaluation: EvalView,
    rollout: RolloutView,
    manager: RolloutManager,
    device: torch.device,
    *,
    max_response_len: int,
    pass_ks: list[int],
) -> tuple[dict, float]:
    """mean@k accuracy and pass@k on each of the manager's held-out sets (one engine call for
    all of them) and its seconds; the training RNG stream is left untouched (device: where an
    in-process engine draws). The responses are sampled at --eval-temperature (resolved) with
    the rollout's --rollout-top-p, at most max_response_len tokens each
    (`hyrl.config.eval_max_response_len`). Named sets (--eval-prompt-data) log
    eval/NAME/accuracy and eval/NAME/pass@K for each K of pass_ks (`hyrl.config.eval_pass_ks`),
    and eval/accuracy and eval/pass@K are the means over the sets (each set weighs the same).
    pass@K is the mean over a set's prompts of pass_at_k(n, c, K), c counting the responses
    whose reward is at least --eval-pass-threshold."""
    began = time.perf_counter()
    n_samples = evaluation.n_samples_per_eval_prompt
    sets = [
        (name, [p for p in prompts for _ in range(n_samples)])
        for name, prompts in manager.eval_sets.items()
    ]
    prompts = [p for _, set_prompts in sets for p in set_prompts]
    params = SamplingParams(
        max_new_tokens=max_response_len,
        temperature=evaluation.eval_temperature,
        top_p=rollout.rollout_top_p,
    )
    devices = [] if device.type == "cpu" else [device]
    with torch.random.fork_rng(devices=devices):
        generations = manager.generate([p.prompt_ids for p in prompts], params)
    scored = manager.score(generations, [p.label for p in prompts])
    metrics = {"eval/reward_failures": scored.failures, "eval/num_responses": len(prompts)}
    per_set: dict[str, list[float]] = {"accuracy": [], **{f"pass@{k}": [] for k in pass_ks}}
    start = 0
    for name, set_prompts in sets:
        rewards = scored.rewards[start : start + len(set_prompts)]
        lengths = [len(g.response_ids) for g in generations[start : start + len(set_prompts)]]
        start += len(set_prompts)
        prefix = f"eval/{name}/" if name else "eval/"
        metrics[prefix + "accuracy"] = sum(rewards) / len(rewards)
        metrics[prefix + "response_len_mean"] = sum(lengths) / len(lengths)
        # a prompt's k responses are consecutive (see `sets`)
        correct = [
            sum(r >= evaluation.eval_pass_threshold for r in rewards[i : i + n_samples])
            for i in range(0, len(rewards), n_samples)
        ]
        for k in pass_ks:
            pass_k = [pass_at_k(n_samples, c, k) for c in correct]
            metrics[f"{prefix}pass@{k}"] = sum(pass_k) / len(pass_k)
        for key, values in per_set.items():
            values.append(metrics[prefix + key])
    for key, values in per_set.items():
        metrics["eval/" + key] = sum(values) / len(values)
    return metrics, time.perf_counter() - began


def evaluate_model(
    backend: TrainBackend,
    manager: RolloutManager | None,
    sync_and_offload: SyncAndOffload,
    rng: Any,
    seed: int | None,
    evaluation: EvalView,
    rollout: RolloutView,
    *,
    max_response_len: int,
    pass_ks: list[int],
) -> tuple[dict, float, dict[str, int]] | None:
    """`evaluate` of a saved model (every rank), its parts built as a run builds them
    (`hyrl eval`'s main: hyrl.evaluation.cli): the backend at this layout holding the actor's
    weights of the checkpoint (--load, resharded) or of --hf-checkpoint, rank 0's rollout
    manager (None on the others) and the sync to its engines (hyrl.train.sync_and_offload),
    which syncs the weights first. Rank 0 gets (metrics, seconds, prompts per set), the others
    None.

    The engine samples from rng, the RNG state the checkpoint's rank 0 saved
    (`TrainBackend.load_weights`; None without a checkpoint), unless seed is given, then from
    torch.manual_seed(seed): a run that evaluated and saved at the same step evaluated from that
    very state, on the in-process hf engine (engines on Ray and SGLang servers sample with
    generators of their own)."""
    backend.wait_for_rank_0()  # rank 0 started the engines
    sync_and_offload.sync(backend.actor, backend.critic, StageTimers())
    result = None
    if manager is not None:
        if seed is not None:
            torch.manual_seed(seed)
        elif rng is not None:  # last: nothing draws before the evaluation
            backend.set_rng_state(rng)
        metrics, eval_s = evaluate(
            evaluation,
            rollout,
            manager,
            backend.device(),
            max_response_len=max_response_len,
            pass_ks=pass_ks,
        )
        result = metrics, eval_s, {name: len(p) for name, p in manager.eval_sets.items()}
    backend.wait_for_rank_0()  # the others wait for rank 0's evaluation, then all end
    return result
