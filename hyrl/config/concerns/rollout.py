"""Rollout: generation (the engine, its sampling, where engines run and how new weights reach
them), the reward workers, and generating ahead of training (--async-rollout, in-flight weight
updates). Where the engines run is resolved and checked by `hyrl.config.rollout_layout`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hyrl.config.concerns.algorithm import AlgorithmFlags
from hyrl.config.concerns.batch import BatchFlags
from hyrl.config.concerns.mismatch import MismatchFlags, engine_returns_routing
from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _changed, _on, _opt
from hyrl.config.weight_transport import NAMES as TRANSPORT_NAMES


@dataclass
class RolloutFlags:
    rollout_engine: str = _opt(
        "hf", "generation engine (name)", "rollout", choices=("hf", "sglang")
    )
    rollout_concurrency: int = _opt(64, "most sequences decoded at once (sequences)", "rollout")
    rollout_max_response_len: int = _opt(2, "longest generated response (tokens)", "rollout")
    rollout_temperature: float = _opt(1.0, "sampling temperature (dimensionless, > 0)", "rollout")
    rollout_top_p: float = _opt(1.0, "nucleus sampling mass (probability, in (0, 1])", "rollout")
    rollout_num_engines: int | None = _opt(
        None,
        "rollout engines (count), each a Ray actor in its own placement-group bundle; "
        "none = hf: one engine inside the trainer process (no Ray), sglang: --rollout-num-gpus "
        "/ --rollout-num-gpus-per-engine",
        "rollout",
    )
    rollout_num_gpus: int | None = _opt(
        None,
        "GPUs given to rollout engines in all (GPUs); none = with --colocate the training "
        "world size, else --rollout-num-engines x --rollout-num-gpus-per-engine",
        "rollout",
    )
    rollout_num_gpus_per_engine: int | None = _opt(
        None,
        "GPUs per rollout engine, SGLang's tensor-parallel size (GPUs); none = 1 for "
        "sglang, 0 for hf",
        "rollout",
    )
    rollout_max_restarts: int = _opt(
        3,
        "restarts allowed per rollout engine over the run before it fails (count); an engine "
        "that dies is replaced and its in-flight prompts resubmitted",
        "rollout",
    )
    update_weight_transport: str | None = _opt(
        None,
        "how new weights reach SGLang (name): tensor = bucketed update_weights_from_tensor "
        "(same node), distributed = NCCL broadcast group, disk = safetensors + "
        "update_weights_from_disk (nccl is accepted for distributed, as slime names it); "
        "none = tensor with --colocate, else distributed",
        "rollout",
        choices=TRANSPORT_NAMES,
    )
    update_weight_buffer_size: int = _opt(
        512 * 1024**2, "most bytes of weights sent per update bucket (bytes)", "rollout"
    )
    colocate: bool = _opt(
        False,
        "rollout engines share the training GPUs: SGLang releases its memory while the "
        "actor trains and resumes it for generation (on/off)",
        "rollout",
    )
    # a resume may change it: where memory sits between steps, the state restored is the same
    offload_train: bool | None = _opt(
        None,
        "with --colocate, the trainer's GPU memory goes to host memory while the engines "
        "generate (slime's --offload-train): gradient buffers freed, optimizer states, the KL "
        "reference and the critic parked before the engines resume, the actor's weights after "
        "the weight sync; all back before the log-prob pass (on/off); none = on with --colocate",
        "rollout",
        resume_may_change=True,
    )
    sglang_router_url: str | None = _opt(
        None,
        "attach to running SGLang servers behind this sglang-router instead of starting "
        "engines (http://HOST:PORT); none = start engines",
        "rollout",
    )
    sglang_mem_fraction_static: float | None = _opt(
        None,
        "fraction of GPU memory SGLang takes for weights and KV cache (fraction in (0, 1)); "
        "none = SGLang's default",
        "rollout",
    )
    sglang_server_args: str | None = _opt(
        None,
        "further sglang.launch_server flags, passed through verbatim (a quoted string); any "
        "other --sglang-NAME [VALUE...] on the command line is appended here as --NAME "
        "[VALUE...] (several values where SGLang's --NAME takes a list)",
        "rollout",
    )
    sglang_request_timeout_s: float | None = _opt(
        None,
        "seconds one request to an SGLang server (a /generate of one response, a weight call) "
        "may take before the rollout or sync fails naming it (seconds > 0); raise it for long "
        "responses at high --rollout-concurrency; none = 600",
        "rollout",
    )
    reward_num_workers: int = _opt(
        0,
        "Ray worker processes that score rewards off the trainer (count); 0 = score in the "
        "trainer process (no timeout)",
        "rollout",
    )
    reward_timeout_s: float = _opt(
        30.0,
        "seconds one reward call may take on a worker before it scores 0 and counts in "
        "train/reward_failures (seconds)",
        "rollout",
    )
    ray_address: str | None = _opt(
        None,
        "Ray cluster to join for engines and reward workers (address or 'auto'); none = "
        "start a local Ray when one is needed",
        "rollout",
        resume_may_change=True,
    )
    # --async-rollout (docs/rollout.md "Asynchronous rollouts")
    async_rollout: bool = _opt(
        False,
        "generate the next rollouts while the actor trains on the current one: rank 0 keeps "
        "up to --max-staleness rollouts generated ahead by one background worker; the old "
        "log-probs come from a separate pass (on/off)",
        "rollout",
    )
    max_staleness: int = _opt(
        1,
        "most policy versions (weight syncs) the trainer may be ahead of the weights that "
        "generated a batch it trains on, and the rollouts generated ahead (versions, >= 0); "
        "0 = generate, wait, train: the synchronous order",
        "rollout",
    )
    stale_policy: str = _opt(
        "drop",
        "a batch staler than --max-staleness (after a resume with a smaller one): drop = "
        "count it (rollout/stale_dropped) and take the next, regenerate = generate its prompts "
        "again with the current weights (name)",
        "rollout",
        choices=("drop", "regenerate"),
    )
    inflight_weight_updates: bool = _opt(
        False,
        "let a weight sync land in the middle of a generation: the worker generates "
        "--inflight-segment-tokens at a time, and a response continues with the new "
        "weights; each token keeps the version and the engine log-prob that sampled it (on/off)",
        "rollout",
    )
    inflight_segment_tokens: int = _opt(
        64,
        "new tokens per engine call under --inflight-weight-updates: a weight sync waits for "
        "at most one segment, and each segment feeds prompt + tokens so far back in (tokens)",
        "rollout",
    )


@dataclass(frozen=True)
class RolloutView:
    """The rollout concern's settings, resolved (`ResolvedConfig.rollout`): the engines, the
    sampling, the weight updates, the reward workers and the asynchronous rollout."""

    rollout_engine: str
    rollout_concurrency: int
    rollout_max_response_len: int
    rollout_temperature: float
    rollout_top_p: float
    rollout_num_engines: int | None
    rollout_num_gpus: int | None
    rollout_num_gpus_per_engine: int | None
    rollout_max_restarts: int
    update_weight_transport: str | None
    update_weight_buffer_size: int
    colocate: bool
    offload_train: bool | None
    sglang_router_url: str | None
    sglang_mem_fraction_static: float | None
    sglang_server_args: str | None
    sglang_request_timeout_s: float | None
    reward_num_workers: int
    reward_timeout_s: float
    ray_address: str | None
    async_rollout: bool
    max_staleness: int
    stale_policy: str
    inflight_weight_updates: bool
    inflight_segment_tokens: int


POSITIVE_COUNTS = ("rollout_concurrency", "rollout_max_response_len", "inflight_segment_tokens")

# Flags of SGLang engines: refused with --rollout-engine hf.
SGLANG_ONLY = (
    "sglang_router_url",
    "sglang_mem_fraction_static",
    "sglang_server_args",
    "sglang_request_timeout_s",
    "update_weight_transport",
    "colocate",
    "rollout_num_gpus",
)
# Started by hyrl; attached servers behind --sglang-router-url were started elsewhere.
_ENGINE_FLAGS = (
    "rollout_num_engines",
    "rollout_num_gpus",
    "rollout_num_gpus_per_engine",
    "sglang_mem_fraction_static",
    "sglang_server_args",
)
# Flags that apply only under a condition (see hyrl.config.conditional_flags): the engines'
# settings, each only with the engines it applies to; --async-rollout's and its in-flight
# updates', only with them on, and --async-rollout only where generation can overlap training.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[Any], ...] = (
    AppliesOnlyWith[RolloutFlags](
        SGLANG_ONLY,
        "--rollout-engine sglang",
        lambda c: c.rollout_engine == "sglang",
        "applies to --rollout-engine sglang only",
        "leave it unset with --rollout-engine hf",
        _on,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("rollout_num_gpus_per_engine",),
        "--rollout-num-engines N (with --rollout-engine hf)",
        lambda c: c.rollout_engine != "hf" or c.rollout_num_engines is not None,
        "the hf engine runs inside the trainer unless --rollout-num-engines is given",
        "leave it unset, or give --rollout-num-engines N for Ray engine actors",
    ),
    AppliesOnlyWith[RolloutFlags](
        _ENGINE_FLAGS,
        "no --sglang-router-url",
        lambda c: c.sglang_router_url is None,
        "hyrl starts no engine with --sglang-router-url (the servers behind the router were "
        "started elsewhere)",
        "leave it unset, or drop --sglang-router-url",
    ),
    AppliesOnlyWith[RolloutFlags](
        ("colocate",),
        "no --sglang-router-url",
        lambda c: c.sglang_router_url is None,
        "attached servers cannot release the training GPUs' memory",
        "--no-colocate with --sglang-router-url",
        _on,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("offload_train",),
        "--colocate",
        lambda c: c.colocate,
        "offloading frees the training GPUs for colocated engines only, and --colocate is off",
        "--colocate --offload-train, or --no-offload-train",
        _on,
    ),
    # --async-rollout (docs/rollout.md "Asynchronous rollouts")
    AppliesOnlyWith[RolloutFlags](
        ("max_staleness", "stale_policy"),
        "--async-rollout",
        lambda c: c.async_rollout,
        "only used with --async-rollout, which is off",
        "add --async-rollout, or remove it",
        _changed,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("inflight_weight_updates",),
        "--async-rollout",
        lambda c: c.async_rollout,
        "pauses the generations of --async-rollout's worker at a weight sync, and "
        "--async-rollout is off (a synchronous run syncs between rollouts)",
        "--async-rollout --inflight-weight-updates, or remove --inflight-weight-updates",
        _on,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("inflight_weight_updates",),
        "--max-staleness >= 1",
        lambda c: c.max_staleness >= 1,
        "with --max-staleness 0 the trainer waits for each generation, so no weight sync "
        "lands inside one",
        "--max-staleness 1 or more with it, or remove --inflight-weight-updates",
        _on,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("inflight_segment_tokens",),
        "--inflight-weight-updates",
        lambda c: c.inflight_weight_updates,
        "only used with --inflight-weight-updates, which is off",
        "add --inflight-weight-updates, or remove it",
        _changed,
    ),
    AppliesOnlyWith[MismatchFlags](
        ("inflight_weight_updates",),
        "no --use-rollout-routing-replay, --measure-routing-mismatch",
        lambda c: not engine_returns_routing(c),
        "a response continued after a weight sync is routed again by the new weights, so the "
        "routing that sampled its earlier tokens is not kept",
        "remove --inflight-weight-updates, or --use-rollout-routing-replay and "
        "--measure-routing-mismatch",
        _on,
    ),
    # before --colocate's row: --offload-train needs --colocate
    AppliesOnlyWith[RolloutFlags](
        ("async_rollout",),
        "no --offload-train",
        lambda c: not c.offload_train,
        "--offload-train hands the trainer's GPU memory to the engines while they generate, "
        "so generation cannot overlap training",
        "--no-async-rollout with --offload-train, or --no-offload-train",
        _on,
    ),
    AppliesOnlyWith[RolloutFlags](
        ("async_rollout",),
        "no --colocate",
        lambda c: not c.colocate,
        "colocated engines share the training GPUs (their memory is released while the actor "
        "trains), so generation cannot overlap training",
        "--no-async-rollout with --colocate, or engines on GPUs of their own",
        _on,
    ),
    AppliesOnlyWith[BatchFlags](
        ("async_rollout",),
        "no --batch-ramp",
        lambda c: c.batch_ramp is None,
        "rollouts are generated ahead at their own step's size, and a dropped stale batch "
        "would shift the ramp's sizes by a step",
        "remove --batch-ramp, or --no-async-rollout",
        _on,
    ),
    AppliesOnlyWith[BatchFlags](
        ("async_rollout",),
        "no --batch-schedule auto",
        lambda c: c.batch_schedule != "auto",
        "rollouts are generated ahead at the batch size of the step that queued them, "
        "before the autopilot sets the next step's from the noise scale",
        "--batch-schedule fixed, or --no-async-rollout",
        _on,
    ),
    AppliesOnlyWith[AlgorithmFlags](
        ("stale_policy",),
        "no --dynamic-sampling",
        lambda c: not c.dynamic_sampling,
        "regenerating a batch regenerates its prompts, and --dynamic-sampling's rounds draw "
        "prompts of their own",
        "--stale-policy drop with --dynamic-sampling",
        _changed,
    ),
)


def check_given(c: RolloutFlags) -> None:
    """Sampling, engine counts, the weight buckets, SGLang's memory and timeouts, rewards."""
    if not c.rollout_temperature > 0:
        _fail("rollout_temperature", c.rollout_temperature, "must be positive", "a number > 0")
    if not 0 < c.rollout_top_p <= 1:
        _fail(
            "rollout_top_p",
            c.rollout_top_p,
            "must be a probability mass in (0, 1]",
            "0 < top_p <= 1",
        )
    for name in ("rollout_num_engines", "rollout_num_gpus"):
        if getattr(c, name) is not None and getattr(c, name) < 1:
            _fail(name, getattr(c, name), "must be a positive count", "an integer >= 1, or none")
    for name in ("rollout_num_gpus_per_engine", "rollout_max_restarts", "reward_num_workers"):
        if getattr(c, name) is not None and getattr(c, name) < 0:
            _fail(name, getattr(c, name), "must not be negative", "an integer >= 0")
    if c.update_weight_buffer_size < 1024**2:
        _fail(
            "update_weight_buffer_size",
            c.update_weight_buffer_size,
            "buckets this small make one HTTP request per tensor slice",
            "bytes >= 1048576 (1 MiB)",
        )
    if c.sglang_mem_fraction_static is not None and not 0 < c.sglang_mem_fraction_static < 1:
        _fail(
            "sglang_mem_fraction_static",
            c.sglang_mem_fraction_static,
            "must be a fraction of GPU memory",
            "0 < fraction < 1, or none",
        )
    if c.sglang_request_timeout_s is not None and not c.sglang_request_timeout_s > 0:
        _fail(
            "sglang_request_timeout_s",
            c.sglang_request_timeout_s,
            "must be positive",
            "seconds > 0",
        )
    if not c.reward_timeout_s > 0:
        _fail("reward_timeout_s", c.reward_timeout_s, "must be positive", "seconds > 0")


def check_staleness(c: RolloutFlags) -> None:
    """--max-staleness counts policy versions."""
    if c.max_staleness < 0:
        _fail(
            "max_staleness",
            c.max_staleness,
            "must not be negative",
            "an integer >= 0 (0: generate, wait, train)",
        )


def offloads_train(c: RolloutFlags) -> bool:
    """Whether the trainer offloads its GPU memory while colocated engines generate."""
    return c.colocate if c.offload_train is None else c.offload_train
