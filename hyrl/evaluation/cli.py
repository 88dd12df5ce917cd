"""`hyrl eval`: mean@k accuracy and pass@k of a saved model on held-out prompts, measured as a
run's own evaluation measures them (hyrl.train.heldout), reported as JSON and markdown.

    hyrl eval --load CKPT | --hf-checkpoint DIR [--eval-prompt-data [NAME] FILE ...]
              [--n-samples K] [--eval-temperature T] [--eval-pass-k 1,4] [--seed S]
              [--json] [--out DIR] [hyrl train's model, layout, rollout, eval and task flags]

- The model: --load, a --save directory (its newest step) or one of its step_N, as `hyrl train
  --load` takes; or --hf-checkpoint, a Hugging Face Qwen3-MoE directory.
- The settings: every flag is `hyrl train`'s (name, type, meaning). With --load, a flag not
  given is the run's own: the resolved configuration the checkpoint records (trainer_state.json's
  `config`: what the run's config.json held at that step), so the architecture, tokenizer, task,
  reward, held-out sets, sampling settings and seed are the run's. With --hf-checkpoint there is
  no run: the model flags not given come from DIR's config.json, the rest are hyrl train's
  defaults, and the held-out set must be named (--eval-prompt-data with a reward, or --task
  arith_mod10). Giving --n-samples without --eval-pass-k takes the default k values for it.
- The held-out sets: --eval-prompt-data NAME FILE [NAME FILE ...] (a single FILE is a set named
  by its file name without the extension), else the run's own: its --eval-prompt-data, or the
  built-in task's held-out split; a run that evaluated nothing (--eval-interval 0) held no
  prompts out, so it is evaluated on all of them (the in-distribution check of
  --task-eval-fraction 0).
- Where: one process on CPU (gloo, the hf engine in it), or every rank of `torchrun ... -m hyrl
  eval` on GPUs with the run's engines (SGLang) built and synced as a run builds them. At the
  run's own world size the run's layout, else TP=PP=EP=1 unless given: the checkpoint reshards
  (megatron distributed checkpointing) to whatever layout loads it.
- The sampling RNG: with --load, the checkpoint's saved state of rank 0, so an evaluation at a
  step where the run evaluated and saved repeats the run's own evaluation (the in-process hf
  engine samples with it; engines on Ray and SGLang servers with generators of their own);
  with --seed S, or with --hf-checkpoint, torch.manual_seed(S) right before the evaluation.

Every bad input (a flag unknown or of training only, no model, no checkpoint, no held-out set,
a file that does not load, a checkpoint of another architecture) exits 2 with a message naming
the flag, the value and what is allowed, before any process group or model is built.

The report: the model (checkpoint path, rollout step, run id), the settings used and the metrics
under the keys `hyrl train` logs (eval/accuracy, eval/NAME/pass@4, ...: they compare with
metrics.jsonl), per set and their means. --json prints it as JSON on stdout, else a markdown
table; --out DIR writes both (eval.json, eval.md). Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

from hyrl.config import (
    DATA_EXTENSIONS,
    ConfigError,
    ResolvedConfig,
    RunConfig,
    build_parser,
    eval_max_response_len,
    eval_pass_ks,
    field_parser,
    offloads_train,
    parse_given,
    resolve,
    validate,
    world_size_from_env,
)
from hyrl.config.fields import RUN_OUTPUTS
from hyrl.config.names import canonical_config
from hyrl.evaluation.report import Subject, make_report, report_markdown

# `hyrl train`'s flags that `hyrl eval` takes: what builds the model and its layout, the
# engines, the held-out sets and their rewards, the evaluation's settings and the seed.
_LAYOUT_FIELDS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
)
EVAL_FIELDS = (
    "load",
    *(f.name for f in dataclasses.fields(RunConfig) if f.metadata["group"] == "model"),
    *_LAYOUT_FIELDS,
    "distributed_timeout_minutes",
    "bf16",
    "rollout_engine",
    "rollout_concurrency",
    "rollout_top_p",
    "rollout_num_engines",
    "rollout_num_gpus",
    "rollout_num_gpus_per_engine",
    "rollout_max_restarts",
    "update_weight_transport",
    "update_weight_buffer_size",
    "colocate",
    "offload_train",
    "sglang_router_url",
    "sglang_mem_fraction_static",
    "sglang_server_args",
    "sglang_request_timeout_s",
    "reward_num_workers",
    "reward_timeout_s",
    "ray_address",
    "n_samples_per_eval_prompt",
    "eval_temperature",
    "eval_pass_k",
    "eval_pass_threshold",
    "eval_max_response_len",
    "task",
    "input_key",
    "label_key",
    "apply_chat_template",
    "tokenizer_path",
    "rollout_max_prompt_len",
    "eval_prompt_data",
    "rm_type",
    "custom_rm_path",
    "task_max_operand",
    "task_eval_fraction",
    "seed",
)
ALIASES = {"n_samples_per_eval_prompt": ("--n-samples",)}  # the short name
REPORT_JSON, REPORT_MD = "eval.json", "eval.md"


def build_parser_eval() -> argparse.ArgumentParser:
    parser = field_parser(
        "hyrl eval",
        "mean@k accuracy and pass@k of a checkpoint (--load) or a Hugging Face directory "
        "(--hf-checkpoint) on held-out prompts, as hyrl train's evaluation measures them. "
        "The flags are hyrl train's; one not given is the run's own (the configuration the "
        "checkpoint records) with --load, and with --hf-checkpoint DIR's config.json for the "
        "model flags and hyrl train's default for the others.",
        EVAL_FIELDS,
        "the run's",
        ALIASES,
    )
    output = parser.add_argument_group("report")
    output.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the report as JSON on stdout (default: a markdown table); progress on stderr",
    )
    output.add_argument(
        "--out",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"also write {REPORT_JSON} and {REPORT_MD} into DIR (created); the engines' files "
        "(SGLang's logs, a disk-mode weight sync) go under DIR/engine, else into a temporary "
        "directory. Needed with WORLD_SIZE > 1 (the ranks share DIR/engine)",
    )
    return parser


def parse_eval_flags(argv: list[str]) -> dict:
    """The flags given, {field or json/out: value}; ConfigError for a flag of training only,
    an unknown flag or a bad value."""
    parser = build_parser_eval()
    ours = {s for a in parser._actions for s in a.option_strings}
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and option not in ours:
                for token in argv:
                    if token.split("=", 1)[0] == option:
                        raise ConfigError(
                            option,
                            None,
                            "a flag of hyrl train that does not change an evaluation",
                            "hyrl eval's flags (hyrl eval --help lists them)",
                        )
    given = parse_given(parser, argv)
    if "eval_prompt_data" in given:
        given["eval_prompt_data"] = _named_sets(given["eval_prompt_data"])
    return given


def _named_sets(values: list[str]) -> list[str]:
    """--eval-prompt-data as NAME FILE pairs: one value is a FILE, the set named by its file
    name without the extension (math_sample.jsonl -> math_sample); more are train's pairs."""
    if len(values) != 1:
        return values
    path = values[0]
    if not path.endswith(DATA_EXTENSIONS):
        raise ConfigError(
            "--eval-prompt-data",
            path,
            "a single value is a FILE, and this is not a data file",
            "a " + " or ".join(DATA_EXTENSIONS) + " FILE, or NAME FILE pairs",
        )
    name = Path(path).name
    return [name[: -len(next(e for e in DATA_EXTENSIONS if name.endswith(e)))], path]


def eval_config(given: dict, world_size: int, engine_dir: str) -> tuple[ResolvedConfig, Subject]:
    """The validated, resolved RunConfig the evaluation runs with (module doc: what comes from
    the run, the flags, hyrl train's defaults) and what it evaluates. ConfigError otherwise."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    load, hf_dir = given.get("load"), given.get("hf_checkpoint")
    if load is not None and hf_dir is not None:
        raise ConfigError(
            "--hf-checkpoint",
            hf_dir,
            "given with --load, whose checkpoint is the model evaluated",
            "one of --load CKPT and --hf-checkpoint DIR",
        )
    if load is not None:
        values, subject = _from_checkpoint(load, world_size, names)
    elif hf_dir is not None:
        values, subject = _from_hf(hf_dir), Subject(path=hf_dir, kind="hf")
    else:
        raise ConfigError(
            "--load",
            None,
            "no model to evaluate",
            "--load CKPT (a --save directory or one of its step_N) or --hf-checkpoint DIR",
        )
    values.update({k: v for k, v in given.items() if k in names})
    if "n_samples_per_eval_prompt" in given and "eval_pass_k" not in given:
        values["eval_pass_k"] = None  # the run's k values were for its own n
    _choose_held_out_sets(values, given, subject)
    for name in RUN_OUTPUTS:  # an evaluation writes none of the run's outputs: the defaults
        values[name] = RunConfig.__dataclass_fields__[name].default
    values.update(run_dir=engine_dir, progress=False)
    values["eval_interval"] = max(1, values.get("eval_interval", 0))  # evaluation is on
    cfg = RunConfig(**values)
    validate(cfg, world_size)
    return resolve(cfg), subject


def _from_checkpoint(load: str, world_size: int, names: set[str]) -> tuple[dict, Subject]:
    """The flags a checkpoint's run was saved under (its layout only at its own world size)."""
    from hyrl.checkpoint.manifest import check_loadable
    from hyrl.checkpoint.trainer_state import STATE_FILE, read_loop_state, resolve_load_dir

    step_dir = resolve_load_dir(load)
    check_loadable(step_dir)  # whole (its trainer_state.json too), or the older step to load
    state = read_loop_state(step_dir)
    saved = state.get("config")
    if not isinstance(saved, dict):
        raise ConfigError(
            "--load",
            str(step_dir),
            f"its {STATE_FILE} records no run configuration (saved before checkpoints did)",
            "a checkpoint that records one, or its weights as --hf-checkpoint (hyrl convert "
            "mcore-to-hf) with the model, task and reward flags",
        )
    values = {k: v for k, v in canonical_config(saved).items() if k in names}  # old keys renamed
    if saved.get("world_size") != world_size:  # a whole model per rank; it reshards at load
        for name in _LAYOUT_FIELDS:
            values[name] = RunConfig.__dataclass_fields__[name].default
    values["load"] = str(step_dir)
    subject = Subject(
        path=str(step_dir),
        kind="checkpoint",
        rollout_step=state.get("rollout_step"),
        samples=state.get("samples"),
        run_id=state.get("run_id"),
        run_dir=state.get("run_dir"),
        held_out_none=values.get("eval_interval", 0) == 0,
    )
    return values, subject


def _from_hf(hf_dir: str) -> dict:
    """The model flags a Hugging Face directory's config.json describes."""
    from hyrl.checkpoint.hf_io import ConversionError, arch_from_hf_config

    allowed = "a local Hugging Face Qwen3-MoE directory (config.json and weights)"
    config_path = Path(hf_dir) / "config.json"
    if not Path(hf_dir).is_dir():
        raise ConfigError("--hf-checkpoint", hf_dir, "no such directory", allowed)
    if not config_path.is_file():
        raise ConfigError("--hf-checkpoint", hf_dir, "has no config.json", allowed)
    try:
        arch = arch_from_hf_config(json.loads(config_path.read_text()))
    except (ValueError, KeyError, ConversionError) as err:
        raise ConfigError("--hf-checkpoint", hf_dir, f"config.json: {err}", allowed) from None
    return {**arch.as_dict(), "hf_checkpoint": hf_dir}


def _choose_held_out_sets(values: dict, given: dict, subject: Subject) -> None:
    """The held-out sets (module doc), in values: --eval-prompt-data, or the run's, or the
    built-in task's split; ConfigError when there is none."""
    sets = values.get("eval_prompt_data")
    task = values.get("task") or ("prompt_data" if sets else "arith_mod10")
    if subject.kind == "hf" and not sets and "task" not in given:
        raise ConfigError(
            "--eval-prompt-data",
            None,
            f"--hf-checkpoint {subject.path} has no run whose held-out sets to take",
            "--eval-prompt-data [NAME] FILE ... with --rm-type (or --custom-rm-path), or "
            "--task arith_mod10",
        )
    if task == "prompt_data":
        if not sets:
            whose = (
                f"the run of {subject.path} evaluated no held-out set (its --eval-prompt-data "
                "is none)"
                if subject.kind == "checkpoint"
                else "--task prompt_data evaluates held-out files"
            )
            raise ConfigError(
                "--eval-prompt-data", None, whose, "--eval-prompt-data [NAME] FILE ..."
            )
        if values.get("rm_type") is None and values.get("custom_rm_path") is None:
            raise ConfigError(
                "--rm-type",
                None,
                "the held-out sets need a reward function to score the responses",
                "exact_match, math, mcq, logic, or --custom-rm-path module:function",
            )
        # The rollout manager loads a training stream, which an evaluation never draws from: the
        # first held-out file stands in for the run's training data (which may be gone).
        values["prompt_data"] = sets[1] if len(sets) > 1 else None
    elif subject.held_out_none and "task_eval_fraction" not in given:
        values["task_eval_fraction"] = 0.0  # its prompts, all trained on (module doc)


@contextmanager
def _stdout_to_stderr():
    """Everything written to stdout (this process's libraries, and the processes it starts)
    goes to stderr meanwhile: stdout carries the report alone."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _engine_dir(stack: ExitStack, out: str | None, world_size: int) -> str:
    """Where the engines' files go: OUT/engine, else a temporary directory (one rank)."""
    if out is None:
        if world_size > 1:
            raise ConfigError(
                "--out",
                None,
                f"WORLD_SIZE={world_size}: the ranks share the engines' directory OUT/engine",
                "--out DIR (on a file system every rank sees)",
            )
        return stack.enter_context(tempfile.TemporaryDirectory(prefix="hyrl-eval-"))
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError("--out", out, "exists and is not a directory", "a directory path")
    return str(Path(out) / "engine")


def main(argv: list[str]) -> int:
    """`hyrl eval FLAGS` on every rank (module doc): exit 2 naming the flag on bad input, else
    rank 0 prints the report."""
    if any(a in ("-h", "--help") for a in argv):
        build_parser_eval().print_help()
        return 0
    rank_0 = os.environ.get("RANK", "0") == "0"
    with ExitStack() as stack:
        try:
            world_size = world_size_from_env()
            given = parse_eval_flags(argv)
            as_json, out = bool(given.pop("json", False)), given.pop("out", None)
            cfg, subject = eval_config(given, world_size, _engine_dir(stack, out, world_size))
            from hyrl.train.preflight import preflight

            preflight(cfg, evaluation=True)
        except ConfigError as err:
            if rank_0:
                print(f"hyrl eval: error: {err}", file=sys.stderr)
            return 2
        # the checkpoint's RNG, unless --seed (with --hf-checkpoint there is none: the seed)
        seed = cfg.seed if subject.kind == "hf" or "seed" in given else None
        if rank_0:
            sets = cfg.eval_prompt_data[0::2] if cfg.eval_prompt_data else [cfg.task]
            print(
                f"hyrl eval: {subject.path} on {', '.join(str(s) for s in sets)}: "
                f"{cfg.n_samples_per_eval_prompt} samples per prompt, {cfg.rollout_engine} "
                f"engine, {world_size} rank(s)",
                file=sys.stderr,
                flush=True,
            )
        from hyrl.backends.factory import build_backend, shutdown_backend
        from hyrl.config.rollout_layout import rollout_layout
        from hyrl.models.qwen3_moe.config import Qwen3MoeArch
        from hyrl.rollout.manager import RolloutManager
        from hyrl.train.heldout import evaluate_model
        from hyrl.train.sync_and_offload import sync_and_offload_for
        from hyrl.weight_sync import weight_sync_for

        max_response_len = eval_max_response_len(cfg, rollout=cfg)
        pass_ks = eval_pass_ks(cfg)
        with _stdout_to_stderr():
            # built as a run builds them (hyrl.train.trainer): the backend at this layout, the
            # actor's weights of the checkpoint (resharded) or of --hf-checkpoint, rank 0's
            # rollout manager and the sync to its engines
            step_dir = Path(subject.path) if subject.kind == "checkpoint" else None
            arch = Qwen3MoeArch.of(cfg.model)
            layout = rollout_layout(cfg, world_size)
            manager: RolloutManager | None = None
            try:
                backend = build_backend(cfg, world_size, arch)
                rng = backend.load_weights(step_dir) if step_dir is not None else None
                if backend.rank == 0:
                    manager = RolloutManager(
                        rollout=cfg.rollout,
                        data=cfg.data,
                        model=cfg.model,
                        batch=cfg.batch,
                        algorithm=cfg.algorithm,
                        evaluation=cfg.evaluation,
                        mismatch=cfg.mismatch,
                        run=cfg.run,
                        checkpoint=cfg.checkpoint,
                        layout=layout,
                        arch=arch,
                        device=backend.device(),
                    )
                weight_sync = weight_sync_for(cfg.rollout, layout, backend, Path(cfg.run_dir))
                sync_and_offload = sync_and_offload_for(
                    cfg.rollout, offloads_train(cfg), weight_sync, backend, manager
                )
                result = evaluate_model(
                    backend,
                    manager,
                    sync_and_offload,
                    rng,
                    seed,
                    cfg.evaluation,
                    cfg.rollout,
                    max_response_len=max_response_len,
                    pass_ks=pass_ks,
                )
            finally:
                if manager is not None:
                    manager.close()
                shutdown_backend()
        if result is None:  # not rank 0
            return 0
        report = make_report(
            cfg.evaluation,
            cfg.rollout,
            cfg.data,
            subject,
            seed,
            result,
            world_size,
            max_response_len=max_response_len,
            pass_ks=pass_ks,
        )
        markdown = report_markdown(report)
        if out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n")
            (Path(out) / REPORT_MD).write_text(markdown)
            print(f"hyrl eval: wrote {out}/{REPORT_JSON} and {REPORT_MD}", file=sys.stderr)
        print(json.dumps(report, indent=2) if as_json else markdown, end="\n" if as_json else "")
    return 0
