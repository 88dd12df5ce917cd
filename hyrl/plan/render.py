"""The plan as text: the table `hyrl plan` and `hyrl train --dry-run` print."""

from __future__ import annotations

import os

from hyrl.plan.disk import format_checkpoints
from hyrl.plan.host import format_host_memory
from hyrl.plan.make import check_fit, format_params
from hyrl.plan.preemption import format_preemption, template_lead
from hyrl.plan.step_time import format_step_time
from hyrl.plan.sync import format_weight_sync


def format_plan(plan: dict) -> str:
    """The plan as a readable table (layout, groups, GPUs, parameters, memory, SGLang, the
    weight sync's predicted time, checkpoints, the step and save estimates, the preemption lead
    time against launch/sbatch.template's when plan["template_lead"] holds it, host memory)."""
    lay, gpus, p = plan["layout"], plan["gpus"], plan["params"]
    out = [
        f"hyrl plan: world size {plan['world_size']}",
        f"  layout  TP={lay['tp']} PP={lay['pp']}"
        + (f" (x{lay['vp']} virtual stages)" if lay.get("vp") else "")
        + f" EP={lay['ep']} ETP={lay['etp']} CP=1 "
        f"DP={lay['dp']} expert-DP={lay['expert_dp']} "
        f"SP={'on' if lay['sequence_parallel'] else 'off'}"
        f"  (rank order {lay['order']}, megatron-core default)",
    ]
    groups = plan["groups"]
    for name in ("tp", "dp", "ep", "expert_dp", "pp"):
        g = groups[name]
        text = (
            " ".join(str(grp).replace(" ", "") for grp in g)
            if plan["groups_listed"]
            else f"{g['count']} groups of {g['size']}: first {g['first']}, last {g['last']}"
        )
        out.append(f"  {name + ' groups':<17}{text}")
    gpn = gpus["gpus_per_node"]
    nodes = (
        (
            f", {gpus['nodes']} nodes of {gpn} ({gpus['training_nodes']} training + "
            f"{gpus['rollout_nodes']} rollout)"
        )
        if gpn
        else " (--gpus-per-node not given)"
    )
    out.append(
        f"  GPUs    {gpus['total']} = {gpus['training']} training + {gpus['rollout']} "
        f"rollout{' (engines colocated on the training GPUs)' if gpus['colocated'] else ''}"
        f"{nodes}"
    )
    out.append(
        f"  params  total {format_params(p['total'])}, active per token "
        f"{format_params(p['active'])} (dense {format_params(p['dense'])}, experts "
        f"{format_params(p['experts'])}); actor per GPU {format_params(p['actor_per_gpu'])}"
    )
    seq = plan["sequence"]
    out.append(
        f"  sequence {seq['prompt_tokens']} prompt + {seq['response_tokens']} response = "
        f"{seq['tokens']} tokens; {seq['tokens_per_micro_batch']} tokens per micro-batch"
    )
    out.append("  memory per GPU (GiB)")
    mem = plan["memory"]
    for line in mem["lines"]:
        out.append(f"    {line['name']:<26}{line['gib']:>9.2f}   # {line['formula']}")
    out.append(
        f"    {'= training peak':<26}{mem['training_peak_gib']:>9.2f}   # resident "
        f"{mem['resident_gib']:.2f} + activations {mem['activations_gib']:.2f}"
    )
    for line in mem.get("other_activation_lines", []):
        out.append(f"    ({line['name']:<24}{line['gib']:>9.2f})  # not at the same time")
    if plan.get("gpu_memory_gib") is not None:
        out.append(
            f"    {'usable':<26}{plan['usable_gib']:>9.2f}   # --gpu-memory-gib "
            f"{plan['gpu_memory_gib']:g} x (1 - {plan['safety_margin']:.0%} margin)"
        )
    sg = plan.get("sglang")
    if sg:
        out.append(
            f"  SGLang  {sg['num_engines']} engines x {sg['gpus_per_engine']} GPUs, "
            f"mem fraction {sg['mem_fraction_text']}, weights {sg['weights_gib']:.2f} "
            f"GiB per GPU, KV {sg['kv_bytes_per_token'] / 1024:.0f} KiB per token per GPU"
        )
        if "kv_gib" in sg:
            minus = (
                f" - actor resident {sg['resident_before_load_gib']:.2f}" if sg["colocated"] else ""
            )
            out.append(
                f"    KV cache {sg['kv_gib']:.2f} GiB = {sg['mem_fraction_static']:g} x free "
                f"{sg['free_before_load_gib']:.2f} - weights {sg['weights_gib']:.2f} -> "
                f"{sg['kv_tokens']} tokens = {sg['sequences']} sequences of "
                f"{sg['sequence_tokens']} per engine (--rollout-concurrency "
                f"{sg['concurrency_per_engine']})"
            )
            out.append(
                "      SGLang 0.5.23 sizes it as free after loading its weights - free before x "
                f"(1 - fraction); free before = --gpu-memory-gib {plan['gpu_memory_gib']:g}"
                f"{minus}, assumed (SGLang measures it at start-up; the CUDA context makes it "
                "less)"
            )
        else:
            out.append("    KV cache: give --gpu-memory-gib to size it")
    out += format_weight_sync(plan.get("weight_sync"))
    out += format_checkpoints(plan.get("checkpoints"))
    out += format_step_time(plan.get("step_time"))
    out += format_preemption(plan.get("step_time"), plan.get("template_lead"))
    out += format_host_memory(plan.get("host_memory"))
    for warning in plan["warnings"]:
        out.append(f"  warning: {warning}")
    problems = check_fit(plan)
    for problem in problems:
        out.append(f"  error: {problem}")
    if plan.get("gpu_memory_gib") is None:
        out.append("  fit: not checked (give --gpu-memory-gib)")
    elif not problems:
        out.append(
            f"  fit: yes, {mem['training_peak_gib']:.1f} of {plan['usable_gib']:.1f} usable GiB"
        )
    out.append("  not modelled: " + "; ".join(plan["not_modelled"]))
    return "\n".join(out)


def describe_for_dry_run(plan: dict) -> str:
    """The table of `plan` (make_plan's) for `hyrl train --dry-run` (printed on stderr), with
    launch/sbatch.template's preemption lead."""
    return format_plan(with_template_lead(plan))


def with_template_lead(plan: dict) -> dict:
    """The plan with the preemption lead launch/sbatch.template would give this run (its
    #SBATCH --signal line, or SBATCH_SIGNAL from this environment)."""
    return {**plan, "template_lead": template_lead(os.environ)}
