"""Flag checks that depend on this machine and on files (CUDA, Transformer Engine, SGLang, the
tokenizer, the data, a checkpoint to resume), run on every rank before any process group so a
refused flag exits 2 with a message that names it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING

from hyrl.config import ConfigError, ResolvedConfig
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

if TYPE_CHECKING:
    from hyrl.config.concerns.data import DataView
    from hyrl.config.concerns.model import ModelView


def preflight(cfg: ResolvedConfig, evaluation: bool = False) -> None:
    """Flag checks that depend on this machine (the backend's: CUDA, Transformer Engine) and on
    files, before any process group: the Hugging Face checkpoints against the model flags, the
    tokenizer, data and rewards, the checkpoint of --load, SGLang, the autopilot's profile and
    the TensorBoard mirror. With evaluation, `hyrl eval`'s: the checkpoint of --load whole and
    of this architecture (another layout reshards), and no ownership check, profile or mirror:
    an evaluation writes nothing into the run or its checkpoints."""
    from hyrl.backends.factory import check_machine

    check_machine(cfg.model)
    for flag, hf_dir in (
        ("--hf-checkpoint", cfg.hf_checkpoint),
        ("--critic-load", cfg.critic_load),
    ):
        if hf_dir:
            check_hf_architecture(flag, hf_dir, cfg.model)
    preflight_data(cfg.data, cfg.model, cfg.dynamic_sampling_filter_path)
    from hyrl.checkpoint.ownership import check_load_owner, check_save_dir

    if not evaluation:
        check_save_dir(cfg.checkpoint, cfg.run_dir)  # another run's checkpoints stay
    if cfg.load:  # truncated, another layout or architecture: refused before any process group
        from hyrl.checkpoint.trainer_state import check_resumable
        from hyrl.config import resume_differences, world_size_from_env

        step_dir, state = check_resumable(
            cfg.load, Qwen3MoeArch.of(cfg.model), cfg.parallel, cfg.algorithm, cfg.async_rollout
        )
        if not evaluation:  # one run, same flags
            world_size = world_size_from_env()
            check_load_owner(
                cfg.run_dir,
                state,
                step_dir,
                lambda saved: resume_differences(saved, cfg, world_size, "in the checkpoint"),
            )
    from hyrl.config.rollout_layout import update_weight_transport
    from hyrl.rollout.build import preflight_engine

    # SGLang's: installed, its flags through its own parser
    preflight_engine(cfg.rollout, update_weight_transport(cfg))
    if evaluation:
        return
    if cfg.batch_schedule == "auto" and cfg.autopilot_profile is not None:
        from hyrl.batchsize.goodput import ProfileError, load_profile

        try:
            load_profile(cfg.autopilot_profile)
        except ProfileError as err:
            raise ConfigError(
                "--autopilot-profile",
                cfg.autopilot_profile,
                str(err),
                "a `hyrl tune` --out directory (report.json) or a `hyrl profile-rollout` --out "
                "directory (profile.json)",
            ) from None
    if cfg.tensorboard_dir is not None and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "--tensorboard-dir",
            cfg.tensorboard_dir,
            "the TensorBoard mirror needs the tensorboard package, which is not installed",
            "pip install tensorboard==2.21.0 (requirements*.txt pin it), or no --tensorboard-dir",
        )


def preflight_data(
    data: DataView, model: ModelView, dynamic_sampling_filter_path: str | None
) -> None:
    """The tokenizer, the data files, a custom reward and a dynamic-sampling filter load,
    before any process group; the tokenizer is --tokenizer-path or the model's
    --hf-checkpoint, and fits its --vocab-size."""
    from hyrl.data.prompt_data import PromptDataError, load_records, load_tokenizer
    from hyrl.rewards.registry import reward_factory

    try:
        reward_factory(data.rm_type, data.custom_rm_path)  # imports a custom reward once
    except (ValueError, ImportError) as err:
        raise ConfigError(
            "--custom-rm-path", data.custom_rm_path, str(err), "an importable module:function"
        ) from None
    if dynamic_sampling_filter_path is not None:
        from hyrl.algorithms.dynamic_sampling import load_group_filter

        try:
            load_group_filter(dynamic_sampling_filter_path)
        except (ValueError, ImportError) as err:
            raise ConfigError(
                "--dynamic-sampling-filter-path",
                dynamic_sampling_filter_path,
                str(err),
                "an importable module:function",
            ) from None
    if data.task != "prompt_data":
        return
    flag = "--tokenizer-path" if data.tokenizer_path else "--hf-checkpoint"
    tokenizer_dir = data.tokenizer_path or model.hf_checkpoint
    assert tokenizer_dir is not None, "validate requires one of them with --prompt-data"
    try:
        tokenizer = load_tokenizer(tokenizer_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(
            flag,
            tokenizer_dir,
            str(err),
            "a local Hugging Face tokenizer directory",
        ) from None
    if len(tokenizer) > model.vocab_size:
        raise ConfigError(
            "--vocab-size",
            model.vocab_size,
            f"smaller than the tokenizer's {len(tokenizer)} tokens ({flag})",
            f"at least {len(tokenizer)}",
        )
    if tokenizer.eos_token_id is None:
        raise ConfigError(
            flag,
            tokenizer_dir,
            "the tokenizer has no end-of-sequence token",
            "a tokenizer with eos",
        )
    assert data.prompt_data is not None, "validate requires it with --task prompt_data"
    files = [("--prompt-data", data.prompt_data)]
    files += [("--eval-prompt-data", path) for path in (data.eval_prompt_data or [])[1::2]]
    for data_flag, path in files:
        try:
            load_records(path, data.input_key, data.label_key)
        except PromptDataError as err:
            raise ConfigError(
                data_flag,
                path,
                str(err),
                f"records with --input-key {data.input_key!r} and --label-key {data.label_key!r}",
            ) from None


def check_hf_architecture(flag: str, hf_dir: str, model: ModelView) -> None:
    """A Hugging Face checkpoint (--hf-checkpoint, --critic-load) of the architecture the model
    flags describe."""
    hf_config = json.loads((Path(hf_dir) / "config.json").read_text())
    arch = Qwen3MoeArch.of(model)
    problems = arch.mismatches(hf_config)
    if problems:
        raise ConfigError(
            flag,
            hf_dir,
            "the checkpoint's architecture differs from the model "
            "flags (" + "; ".join(problems) + ")",
            "a checkpoint of the same architecture",
        )
    # the weights themselves, from the files' metadata (nothing is read): names, shapes, dtype
    from hyrl.checkpoint.checks import check_hf_weights
    from hyrl.checkpoint.hf_io import ConversionError, HFWeights

    try:
        with HFWeights(hf_dir) as reader:
            check_hf_weights(reader, arch, flag)
    except ConversionError as err:
        raise ConfigError(
            flag,
            hf_dir,
            str(err),
            "safetensors (or pytorch_model.bin) weights config.json describes",
        ) from None
