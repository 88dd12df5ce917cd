"""Held-out evaluation on rank 0: when it runs and what it measures (mean@k accuracy and
pass@k per set)."""

from __future__ import annotations

import math
import time

import torch

from hyrl.config import RunConfig, eval_max_response_len, eval_pass_ks
from hyrl.rollout.base import SamplingParams
from hyrl.rollout.side import RolloutSide


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


def evaluate(cfg: RunConfig, rollout: RolloutSide, device: torch.device) -> tuple[dict, float]:
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
