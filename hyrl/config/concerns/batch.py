"""The batch sizes and their schedule: P prompts x G responses per rollout step, B responses per
actor optimizer step (resolved from P x G), the micro-batches a step passes through the model
in, and how B changes during the run (--batch-ramp; --batch-schedule auto is `autopilot`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyrl.config.concerns.algorithm import AlgorithmFlags
from hyrl.config.concerns.data import ARITH_PROMPT_TOKENS
from hyrl.config.concerns.parallel import virtual_pipeline_size
from hyrl.config.errors import _fail, divisors, not_resolved
from hyrl.config.kinds import AppliesOnlyWith, _opt, view

if TYPE_CHECKING:
    from hyrl.config.concerns.data import DataFlags
    from hyrl.config.concerns.model import ModelFlags
    from hyrl.config.concerns.parallel import ParallelFlags


@dataclass
class BatchFlags:
    rollout_batch_size: int = _opt(16, "prompts per rollout step, P (prompts)", "batch")
    n_samples_per_prompt: int = _opt(8, "responses sampled per prompt, G (responses)", "batch")
    global_batch_size: int | None = _opt(
        None,
        "responses per actor optimizer step, B (responses); none = P x G, one optimizer "
        "step per rollout (or P x G / --num-steps-per-rollout)",
        "batch",
    )
    micro_batch_size: int = _opt(
        16, "responses per forward/backward pass on one data-parallel rank (responses)", "batch"
    )
    batch_ramp: str | None = _opt(
        None,
        "change responses per optimizer step during the run: START:END:STEPS goes "
        "linearly from START to END over STEPS rollout steps (prompts per step follow, G and "
        "optimizer steps per rollout stay; with --base-lr the lr is re-derived by "
        "--lr-scaling at every change); START must equal the global batch size",
        "batch",
    )
    batch_schedule: str | None = _opt(
        None,
        "how responses per optimizer step B change during the run (name): fixed = "
        "--global-batch-size throughout, ramp = --batch-ramp, auto = B follows the measured "
        "gradient noise scale (--autopilot-*; docs/batch-size.md); none = ramp with "
        "--batch-ramp, else fixed",
        "batch",
        choices=("fixed", "ramp", "auto"),
    )

    @property
    def responses_per_rollout(self) -> int:
        """P x G: responses generated per rollout step."""
        return self.rollout_batch_size * self.n_samples_per_prompt


@dataclass
class MicroBatchFlags:
    """How a step's responses pass through the model (micro-batches, packed or padded) and the
    gradient noise scale measured over them; after `AutopilotFlags` in the flags' order."""

    use_dynamic_batch_size: bool = _opt(
        False,
        "pack micro-batches by token count (--max-tokens-per-gpu) instead of "
        "--micro-batch-size responses, for log-prob and training passes (on/off)",
        "batch",
    )
    # a resume may change it: the same rows, padded or packed
    qkv_format: str = _opt(
        "bshd",
        "micro-batch layout the model runs (name): bshd = rows padded to their longest, "
        "thd = each micro-batch's sequences packed end to end as one (megatron's "
        "PackedSeqParams: no compute or attention mask spent on padding); with "
        "--use-dynamic-batch-size, --max-tokens-per-gpu then counts packed tokens",
        "batch",
        choices=("bshd", "thd"),
        resume_may_change=True,
    )
    max_tokens_per_gpu: int | None = _opt(
        None,
        "most tokens (prompt + response) in one micro-batch with --use-dynamic-batch-size (tokens)",
        "batch",
    )
    noise_scale_beta: float | None = _opt(
        0.99,
        "EMA decay of the gradient-noise-scale estimates, logged as actor/noise_scale and "
        "critic/noise_scale (dimensionless, in [0, 1)); none = do not measure",
        "batch",
    )


@dataclass(frozen=True)
class BatchView:
    """The batch concern's settings, resolved (`ResolvedConfig.batch`). B, the responses per
    actor optimizer step (--global-batch-size), is `responses_per_step` here as in the
    records; `batch_schedule` is the schedule in force (fixed, ramp or auto)."""

    rollout_batch_size: int
    n_samples_per_prompt: int
    responses_per_step: int
    micro_batch_size: int
    batch_ramp: str | None
    batch_schedule: str
    use_dynamic_batch_size: bool
    qkv_format: str
    max_tokens_per_gpu: int | None
    noise_scale_beta: float | None

    @property
    def responses_per_rollout(self) -> int:
        """P x G: responses generated per rollout step."""
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def optimizer_steps_per_rollout(self) -> int:
        """(P x G) // B: actor optimizer steps on each rollout's responses."""
        return self.responses_per_rollout // self.responses_per_step


POSITIVE_COUNTS = (
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "micro_batch_size",
)
# Flags that exclude each other (see hyrl.config.parser.EXCLUSIVE_FLAGS): B, or the optimizer
# steps per rollout it is derived from.
EXCLUSIVE_FLAGS = ((("global_batch_size",), ("num_steps_per_rollout",)),)

# Flags that apply only under a condition (see hyrl.config.conditional_flags): --batch-ramp, only
# under grpo.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    AppliesOnlyWith[AlgorithmFlags](
        ("batch_ramp",),
        "--advantage-estimator grpo",
        lambda c: c.advantage_estimator == "grpo",
        "is not supported with PPO yet (the critic's batch would have to follow)",
        "remove it, or use --advantage-estimator grpo",
    ),
)
# --max-tokens-per-gpu, only with --use-dynamic-batch-size: a tuple of its own, as
# hyrl.config.conditional_flags checks it later than the row above.
MICRO_BATCH_APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[MicroBatchFlags], ...] = (
    AppliesOnlyWith(
        ("max_tokens_per_gpu",),
        "--use-dynamic-batch-size",
        lambda c: c.use_dynamic_batch_size,
        "applies only with --use-dynamic-batch-size",
        "add --use-dynamic-batch-size",
    ),
)


def check_given(c: MicroBatchFlags) -> None:
    """The noise scale's EMA decay."""
    if c.noise_scale_beta is not None and not 0 <= c.noise_scale_beta < 1:
        _fail(
            "noise_scale_beta",
            c.noise_scale_beta,
            "an EMA decay must lie in [0, 1)",
            "0 <= beta < 1, or none to switch the measurement off",
        )


def resolve(cfg: BatchFlags, *, algorithm: AlgorithmFlags) -> dict[str, int]:
    """The batch's flags not given: --global-batch-size (`resolve_global_batch_size`)."""
    return {"global_batch_size": resolve_global_batch_size(cfg, algorithm=algorithm)}


def resolve_global_batch_size(cfg: BatchFlags, *, algorithm: AlgorithmFlags) -> int:
    """B, --global-batch-size: as given, else P x G / --num-steps-per-rollout when that is
    given, else P x G.

    Raises ConfigError when --num-steps-per-rollout does not divide P x G or disagrees with
    --global-batch-size.
    """
    p, g = cfg.rollout_batch_size, cfg.n_samples_per_prompt
    n = p * g
    b, k = cfg.global_batch_size, algorithm.num_steps_per_rollout
    if k is not None:
        if k < 1:
            _fail("num_steps_per_rollout", k, "must be a positive count", "an integer >= 1")
        if n >= 1 and n % k != 0:
            _fail(
                "num_steps_per_rollout",
                k,
                f"P x G = {p} x {g} = {n} responses per rollout do not split into {k} equal "
                "optimizer steps",
                f"a divisor of {n}: {divisors(n)}",
            )
        if b is not None and b != n // k:
            _fail(
                "num_steps_per_rollout",
                k,
                f"disagrees with --global-batch-size={b}: P x G = {n} responses in {k} "
                f"optimizer steps is B = {n // k} per step",
                f"--global-batch-size={n // k}, or only one of --global-batch-size and "
                "--num-steps-per-rollout",
            )
        return n // k
    return n if b is None else b


def batch_view(c: BatchFlags, *, micro_batch: MicroBatchFlags) -> BatchView:
    """The batch's settings of a resolved config (B as `responses_per_step`); `micro_batch`:
    its micro-batches' flags."""
    if c.global_batch_size is None:
        raise not_resolved(["global_batch_size"])
    return view(
        BatchView,
        c,
        responses_per_step=c.global_batch_size,
        batch_schedule=batch_schedule(c),
        use_dynamic_batch_size=micro_batch.use_dynamic_batch_size,
        qkv_format=micro_batch.qkv_format,
        max_tokens_per_gpu=micro_batch.max_tokens_per_gpu,
        noise_scale_beta=micro_batch.noise_scale_beta,
    )


def optimizer_steps_per_rollout(c: BatchFlags) -> int:
    """(P x G) // B: actor optimizer steps on each rollout's responses (B resolved or given;
    raises ValueError otherwise)."""
    if c.global_batch_size is None:
        raise not_resolved(["global_batch_size"])
    return c.responses_per_rollout // c.global_batch_size


def batch_schedule(c: BatchFlags) -> str:
    """How B changes during the run: --batch-schedule, or when not given ramp with
    --batch-ramp and fixed without."""
    if c.batch_schedule is not None:
        return c.batch_schedule
    return "ramp" if c.batch_ramp is not None else "fixed"


def check_batch(
    c: BatchFlags,
    given: BatchFlags,
    world_size: int,
    *,
    algorithm: AlgorithmFlags,
    parallel: ParallelFlags,
) -> None:
    """B divides P x G and splits over the data-parallel ranks in whole micro-batches (`given`:
    the config as parsed, to say where B came from; `algorithm`: its --num-steps-per-rollout,
    which resolution keeps as given)."""
    p, g, b = c.rollout_batch_size, c.n_samples_per_prompt, c.global_batch_size
    if b is None:
        raise not_resolved(["global_batch_size"])
    n = p * g
    if n % b != 0:
        _fail(
            "global_batch_size",
            b,
            f"P x G = {p} x {g} = {n} responses per rollout must be a multiple of B={b}",
            f"a divisor of {n}: {divisors(n)}",
        )
    dp = parallel.data_parallel_size(world_size)
    if b % dp != 0:
        if given.global_batch_size is not None:
            origin = ""
        elif algorithm.num_steps_per_rollout is not None:
            origin = f" (B = P x G / --num-steps-per-rollout={algorithm.num_steps_per_rollout})"
        else:
            origin = " (B = P x G, the default)"
        _fail(
            "global_batch_size",
            b,
            f"B={b} responses{origin} do not split evenly over data-parallel size {dp}",
            f"a multiple of {dp} that divides {n}",
        )
    mbs = c.micro_batch_size
    if b % (mbs * dp) != 0:
        _fail(
            "micro_batch_size",
            mbs,
            f"micro batch {mbs} x data-parallel size {dp} = {mbs * dp} does not divide "
            f"the global batch B={b}",
            f"a divisor of B / DP = {b // dp}: {divisors(b // dp)}",
        )


def check_micro_batch_groups(
    c: BatchFlags,
    world_size: int,
    *,
    micro_batch: MicroBatchFlags,
    model: ModelFlags,
    parallel: ParallelFlags,
    critic_global_batch_size: int | None,
    critic_micro_batch_size: int | None,
) -> None:
    """megatron-core 0.16.1's interleaved schedule runs micro-batches in groups of PP
    (microbatch_group_size_per_vp_stage, default PP) and refuses a count M that is not a
    multiple of PP (schedules.py, forward_backward_pipelining_with_interleaving). With fixed
    micro-batches the count of an optimizer step is B / (DP x micro batch): checked here.
    Token-packed micro-batches and other batch sizes of a schedule are padded with loss-free
    ones at run time (pipeline.interleavable). `critic_global_batch_size` and
    `critic_micro_batch_size`: the critic concern's, None without a critic."""
    if virtual_pipeline_size(parallel, model) is None or micro_batch.use_dynamic_batch_size:
        return
    if c.global_batch_size is None:
        raise not_resolved(["global_batch_size"])
    pp, dp = parallel.pipeline_model_parallel_size, parallel.data_parallel_size(world_size)
    batches = [("micro_batch_size", c.global_batch_size, c.micro_batch_size, "B")]
    if critic_global_batch_size is not None and critic_micro_batch_size is not None:
        batches.append(
            (
                "critic_micro_batch_size",
                critic_global_batch_size,
                critic_micro_batch_size,
                "critic B",
            )
        )
    for name, batch, micro, label in batches:
        count = batch // (dp * micro)
        if count % pp != 0:
            per_rank = batch // dp
            fits = [m for m in divisors(per_rank) if (per_rank // m) % pp == 0]
            _fail(
                name,
                micro,
                f"{label}={batch} over DP={dp} makes {count} micro-batches per step; megatron's "
                f"interleaved schedule (virtual pipeline stages) runs them in groups of PP={pp} "
                "and needs a multiple of PP",
                f"a micro batch giving a multiple of {pp} micro-batches: {fits}"
                if fits
                else f"a global batch with a multiple of {pp} x DP x micro batch responses",
            )


def check_schedule(c: BatchFlags) -> None:
    """--batch-schedule against --batch-ramp (under auto see `autopilot.check_autopilot`)."""
    schedule = batch_schedule(c)
    if schedule == "ramp" and c.batch_ramp is None:
        _fail(
            "batch_schedule",
            c.batch_schedule,
            "a ramp needs its --batch-ramp START:END:STEPS, which is not given",
            "add --batch-ramp, or --batch-schedule fixed or auto",
        )
    if schedule != "ramp" and c.batch_ramp is not None:
        _fail(
            "batch_ramp",
            c.batch_ramp,
            f"given with --batch-schedule {schedule}, which does not ramp",
            "--batch-schedule ramp (or none), or no --batch-ramp",
        )


def batch_ramp_unit(c: BatchFlags, world_size: int, *, parallel: ParallelFlags) -> int:
    """Every B of a ramp must be a multiple of this: DP x micro batch divides it, and
    B x (optimizer steps per rollout) must be a whole number of prompt groups of G."""
    k = optimizer_steps_per_rollout(c)
    dp = parallel.data_parallel_size(world_size)
    groups = c.n_samples_per_prompt // math.gcd(c.n_samples_per_prompt, k)
    return math.lcm(c.micro_batch_size * dp, groups)


def check_ramp(c: BatchFlags, world_size: int, *, parallel: ParallelFlags) -> None:
    """--batch-ramp starts at B and ends at a B the layout can split (`batch_ramp_unit`)."""
    if c.batch_ramp is None:
        return
    from hyrl.config.schedules import parse_batch_ramp

    try:
        start, end, _ = parse_batch_ramp(c.batch_ramp)
    except ValueError as err:
        _fail("batch_ramp", c.batch_ramp, str(err), "START:END:STEPS with integers >= 1")
    if start != c.global_batch_size:
        _fail(
            "batch_ramp",
            c.batch_ramp,
            f"START={start} differs from the global batch size "
            f"B={c.global_batch_size} of the first step",
            f"START = {c.global_batch_size}",
        )
    unit = batch_ramp_unit(c, world_size, parallel=parallel)
    if end % unit:
        _fail(
            "batch_ramp",
            c.batch_ramp,
            f"END={end} is not a multiple of {unit} (data-parallel "
            "size x micro batch, and whole prompt groups)",
            f"a multiple of {unit}",
        )


def check_token_budget(
    c: MicroBatchFlags,
    *,
    model: ModelFlags,
    parallel: ParallelFlags,
    data: DataFlags,
    rollout_max_response_len: int,
) -> None:
    """--max-tokens-per-gpu, which token-packed micro-batches need, fits the longest sequence
    (the prompt's and `rollout_max_response_len`, the rollout concern's
    --rollout-max-response-len)."""
    if c.use_dynamic_batch_size and c.max_tokens_per_gpu is None:
        _fail(
            "max_tokens_per_gpu",
            "none",
            "--use-dynamic-batch-size packs micro-batches by it",
            "a token count, e.g. --max-tokens-per-gpu 16384",
        )
    if c.max_tokens_per_gpu is not None:
        budget, response = c.max_tokens_per_gpu, rollout_max_response_len
        if data.rollout_max_prompt_len is not None:
            longest = data.rollout_max_prompt_len + response
            parts = f"--rollout-max-prompt-len={data.rollout_max_prompt_len} + "
        elif data.task == "prompt_data":  # the prompts kept when loading fill the positions
            longest = model.max_position_embeddings
            parts = (
                f"a prompt of up to {longest - response} tokens (--max-position-embeddings="
                f"{longest} less the response, no --rollout-max-prompt-len given) + "
            )
        else:
            longest = ARITH_PROMPT_TOKENS + response
            parts = f"the {ARITH_PROMPT_TOKENS}-token arithmetic prompt + "
        # a row is padded to a multiple of TP (sequence parallel splits it): what one row costs
        tp = parallel.tensor_model_parallel_size
        padded = -(-longest // tp) * tp
        if budget < padded:
            fits = budget // tp * tp  # the longest row the budget holds, padded
            padding = (
                f", padded to {padded} (a multiple of --tensor-model-parallel-size={tp})"
                if padded != longest
                else ""
            )
            shorter = (
                f", or --rollout-max-prompt-len at most {fits - response}"
                if data.task == "prompt_data" and fits > response
                else ""
            )
            _fail(
                "max_tokens_per_gpu",
                budget,
                f"smaller than the longest sequence, {parts}--rollout-max-response-len="
                f"{response} = {longest} tokens{padding}, which could never fit",
                f"at least {padded}{shorter}",
            )
