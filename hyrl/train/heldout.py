"""Held-out evaluation on rank 0: when it runs and what it measures (mean@k accuracy and
pass@k per set), during a run (`evaluate`) or of a saved model (`evaluate_model`, `hyrl eval`)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from hyrl.config import RunConfig, eval_max_response_len, eval_pass_ks
from hyrl.metrics.timers import StageTimers
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import SamplingParams
from hyrl.rollout.manager import RolloutManager


def eval_schedule(cfg: RunConfig) -> set[int]:
    """Rollout steps after which rank 0 evaluates: 0 (before training), every
    --eval-interval, and the last."""
    if cfg.eval_interval <= 0:
        return set()
    return {0, cfg.num_steps, *range(cfg.eval_interval, cfg.num_steps + 1, cfg.eval_interval)}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c are correct (Chen et al.
    2021): 1 - C(n-c, k) / C(n, k), as the product 1 - prod_{i=n-c+1}^{n} (1 - k/i), which
    stays finite where the binomials overflow a float."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0  # every k-subset holds a correct sample
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def evaluate(cfg: RunConfig, rollout: RolloutManager, device: torch.device) -> tuple[dict, float]:
    """mean@k accuracy and pass@k on each held-out set (one engine call for all of them) and
    its seconds; the training RNG stream is left untouched (device: where an in-process engine
    draws). Named sets (--eval-prompt-data) log eval/NAME/accuracy and eval/NAME/pass@K, and
    eval/accuracy and eval/pass@K are the means over the sets (each set weighs the same).
    pass@K is the mean over a set's prompts of pass_at_k(n, c, K), c counting the responses
    whose reward is at least --eval-pass-threshold."""
    began = time.perf_counter()
    n_samples = cfg.n_samples_per_eval_prompt
    sets = [
        (name, [p for p in prompts for _ in range(n_samples)])
        for name, prompts in rollout.eval_sets.items()
    ]
    prompts = [p for _, set_prompts in sets for p in set_prompts]
    temperature = cfg.rollout_temperature if cfg.eval_temperature is None else cfg.eval_temperature
    params = SamplingParams(
        max_new_tokens=eval_max_response_len(cfg),
        temperature=temperature,
        top_p=cfg.rollout_top_p,
    )
    devices = [] if device.type == "cpu" else [device]
    with torch.random.fork_rng(devices=devices):
        generations = rollout.generate([p.prompt_ids for p in prompts], params)
    scored = rollout.score(generations, [p.label for p in prompts])
    metrics = {"eval/reward_failures": scored.failures, "eval/num_responses": len(prompts)}
    pass_ks = eval_pass_ks(cfg)
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
            sum(r >= cfg.eval_pass_threshold for r in rewards[i : i + n_samples])
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
    cfg: RunConfig, world_size: int, step_dir: Path | None, seed: int | None
) -> tuple[dict, float, dict[str, int]] | None:
    """`evaluate` of a saved model, built as a run builds it (every rank): the backend at this
    layout with the actor's weights of step_dir (--load, resharded) or of cfg.hf_checkpoint,
    rank 0's rollout manager, the weights synced to its engines (hyrl.train.sync_and_offload).
    Rank 0 gets (metrics, seconds, prompts per set), the others None.

    The engine samples from the checkpoint's saved RNG state (that of its rank 0) unless seed
    is given, then from torch.manual_seed(seed): a run that evaluated and saved at the same
    step evaluated from that very state, on the in-process hf engine (engines on Ray and
    SGLang servers sample with generators of their own)."""
    from hyrl.backends.factory import build_backend, shutdown_backend
    from hyrl.rollout.manager import RolloutManager
    from hyrl.train.sync_and_offload import sync_and_offload_for

    arch = Qwen3MoeArch.from_flags(cfg)
    manager: RolloutManager | None = None
    try:
        backend = build_backend(cfg, world_size, arch)
        rng = backend.load_weights(step_dir) if step_dir is not None else None
        if backend.rank == 0:
            manager = RolloutManager(cfg, world_size, arch, backend.device(), Path(cfg.run_dir))
        sync_and_offload = sync_and_offload_for(cfg, world_size, backend, manager)
        backend.wait_for_rank_0()  # rank 0 started the engines
        sync_and_offload.sync(backend.actor, backend.critic, StageTimers())
        result = None
        if manager is not None:
            if seed is not None:
                torch.manual_seed(seed)
            elif rng is not None:  # last: nothing draws before the evaluation
                backend.set_rng_state(rng)
            metrics, eval_s = evaluate(cfg, manager, backend.device())
            result = metrics, eval_s, {name: len(p) for name, p in manager.eval_sets.items()}
        backend.wait_for_rank_0()  # the others wait for rank 0's evaluation, then all end
        return result
    finally:
        if manager is not None:
            manager.close()
        shutdown_backend()
