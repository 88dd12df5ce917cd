"""Held-out evaluation on rank 0: when it runs and what it measures (mean@k accuracy per set)."""

from __future__ import annotations

import time

import torch

from hyrl.config import RunConfig
from hyrl.rollout.base import SamplingParams
from hyrl.rollout.side import RolloutSide


def eval_schedule(cfg: RunConfig) -> set[int]:
    """Rollout steps after which rank 0 evaluates: 0 (before training), every
    --eval-interval, and the last."""
    if cfg.eval_interval <= 0:
        return set()
    return {0, cfg.num_steps, *range(cfg.eval_interval, cfg.num_steps + 1, cfg.eval_interval)}


def evaluate(cfg: RunConfig, rollout: RolloutSide, device: torch.device) -> tuple[dict, float]:
    """mean@k accuracy on each held-out set (one engine call for all of them) and its seconds;
    the training RNG stream is left untouched (device: where an in-process engine draws).
    Named sets (--eval-prompt-data) log eval/NAME/accuracy and eval/accuracy is the mean of
    the sets' accuracies (each set weighs the same)."""
    began = time.perf_counter()
    k = cfg.n_samples_per_eval_prompt
    sets = [
        (name, [p for p in prompts for _ in range(k)])
        for name, prompts in rollout.eval_sets.items()
    ]
    prompts = [p for _, set_prompts in sets for p in set_prompts]
    temperature = cfg.rollout_temperature if cfg.eval_temperature is None else cfg.eval_temperature
    params = SamplingParams(
        max_new_tokens=cfg.rollout_max_response_len,
        temperature=temperature,
        top_p=cfg.rollout_top_p,
    )
    devices = [] if device.type == "cpu" else [device]
    with torch.random.fork_rng(devices=devices):
        generations = rollout.generate([p.prompt_ids for p in prompts], params)
    scored = rollout.score(generations, [p.label for p in prompts])
    metrics = {"eval/reward_failures": scored.failures, "eval/num_responses": len(prompts)}
    accuracies, start = [], 0
    for name, set_prompts in sets:
        rewards = scored.rewards[start : start + len(set_prompts)]
        lengths = [len(g.response_ids) for g in generations[start : start + len(set_prompts)]]
        start += len(set_prompts)
        prefix = f"eval/{name}/" if name else "eval/"
        metrics[prefix + "accuracy"] = sum(rewards) / len(rewards)
        metrics[prefix + "response_len_mean"] = sum(lengths) / len(lengths)
        accuracies.append(metrics[prefix + "accuracy"])
    metrics["eval/accuracy"] = sum(accuracies) / len(accuracies)
    return metrics, time.perf_counter() - began
