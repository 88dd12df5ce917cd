"""`hyrl eval`'s report (hyrl.evaluation.cli): the model evaluated, the settings used and
`evaluate`'s metrics, per held-out set and their means, as JSON and as markdown."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyrl.config.concerns.data import DataView
    from hyrl.config.concerns.evaluation import EvalView
    from hyrl.config.concerns.rollout import RolloutView


@dataclasses.dataclass
class Subject:
    """What is evaluated: a checkpoint step (and its run) or a Hugging Face directory."""

    path: str
    kind: str  # "checkpoint" (--load) or "hf" (--hf-checkpoint)
    rollout_step: int | None = None
    samples: int | None = None
    run_id: str | None = None
    run_dir: str | None = None
    held_out_none: bool = False  # the run evaluated nothing: the task's prompts are all "held out"

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("held_out_none")
        return out


def _set_source(data: DataView, name: str, subject: Subject) -> str:
    if data.task == "prompt_data":
        assert data.eval_prompt_data is not None, "eval_config requires held-out sets"
        pairs = dict(zip(data.eval_prompt_data[0::2], data.eval_prompt_data[1::2], strict=True))
        return pairs[name]
    if data.task_eval_fraction == 0:
        why = " (the run held none out)" if subject.held_out_none else ""
        return f"arith_mod10: every prompt{why}, trained on"
    return f"arith_mod10: the held-out split (--task-eval-fraction {data.task_eval_fraction})"


def make_report(
    evaluation: EvalView,
    rollout: RolloutView,
    data: DataView,
    subject: Subject,
    seed: int | None,
    result: tuple[dict, float, dict[str, int]],
    world_size: int,
    *,
    max_response_len: int,
    pass_ks: list[int],
) -> dict:
    """The JSON report: the model, the settings (the evaluation's, the rollout's sampling and
    engine, the task's; max_response_len and pass_ks as `evaluate` took them), evaluate()'s
    metrics under their own keys, and per set its source, size and metrics."""
    metrics, eval_s, prompts_per_set = result
    n = evaluation.n_samples_per_eval_prompt
    sets = []
    for name, prompts in prompts_per_set.items():
        prefix = f"eval/{name}/" if name else "eval/"
        sets.append(
            {
                "name": name,
                "metrics_prefix": prefix,
                "source": _set_source(data, name, subject),
                "prompts": prompts,
                "num_responses": prompts * n,
                "accuracy": metrics[prefix + "accuracy"],
                **{f"pass@{k}": metrics[f"{prefix}pass@{k}"] for k in pass_ks},
                "response_len_mean": metrics[prefix + "response_len_mean"],
            }
        )
    return {
        "model": subject.as_dict(),
        "settings": {
            "n_samples_per_eval_prompt": n,
            "eval_temperature": evaluation.eval_temperature,
            "rollout_top_p": rollout.rollout_top_p,
            "eval_max_response_len": max_response_len,
            "eval_pass_k": pass_ks,
            "eval_pass_threshold": evaluation.eval_pass_threshold,
            "task": data.task,
            "reward": data.rm_type or data.custom_rm_path,
            "rollout_engine": rollout.rollout_engine,
            "sampling_rng": "checkpoint" if seed is None else f"seed {seed}",
            "world_size": world_size,
        },
        "sets": sets,
        "metrics": metrics,
        "eval_s": eval_s,
    }


def report_markdown(report: dict) -> str:
    """The report as markdown: what was evaluated and how, then a table with a row per set
    (and their mean, with several)."""
    model, settings, sets = report["model"], report["settings"], report["sets"]
    if model["kind"] == "checkpoint":
        what = (
            f"--load {model['path']} (rollout step {model['rollout_step']}, run "
            f"{model['run_id']}, run directory {model['run_dir']})"
        )
    else:
        what = f"--hf-checkpoint {model['path']}"
    ks = settings["eval_pass_k"]
    n = settings["n_samples_per_eval_prompt"]
    rng = settings["sampling_rng"]
    lines = [
        "# hyrl eval",
        "",
        f"- model: {what}",
        f"- {n} samples per prompt at temperature {settings['eval_temperature']} (top-p "
        f"{settings['rollout_top_p']}), at most {settings['eval_max_response_len']} response "
        f"tokens, on the {settings['rollout_engine']} engine; sampling from "
        + ("the checkpoint's saved RNG state" if rng == "checkpoint" else rng),
        f"- correct for pass@k: reward >= {settings['eval_pass_threshold']} "
        f"({settings['reward']}); evaluated in {report['eval_s']:.3g} s",
        "",
        "| set | prompts | responses | mean@"
        + str(n)
        + " accuracy | "
        + " | ".join(f"pass@{k}" for k in ks)
        + " | response length |",
        "|---" * (5 + len(ks)) + "|",
    ]

    def row(label: str, prompts, responses, values: dict) -> str:
        cells = [f"{values['accuracy']:.4f}", *(f"{values[f'pass@{k}']:.4f}" for k in ks)]
        return (
            f"| {label} | {prompts} | {responses} | "
            + " | ".join(cells)
            + f" | {values['response_len_mean']:.2f} |"
        )

    for s in sets:
        label = f"{s['name']}: {s['source']}" if s["name"] else s["source"]
        lines.append(row(label, s["prompts"], s["num_responses"], s))
    if len(sets) > 1:
        metrics = report["metrics"]
        means = {k.removeprefix("eval/"): v for k, v in metrics.items()}
        means["response_len_mean"] = sum(s["response_len_mean"] for s in sets) / len(sets)
        lines.append(row("mean over the sets", "", metrics["eval/num_responses"], means))
    return "\n".join(lines) + "\n"
