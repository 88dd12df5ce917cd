"""Rank 0's half of the loop: the task and its tokenizer, the reward pool, the engines (and
whether their memory is released), and one rollout step's generation and scoring.

Every engine call holds `engine_lock` (hyrl.rollout.async_queue.EngineLock), which the
trainer's weight sync holds too: under --async-rollout the generation runs on a worker thread
and no weight update lands in the middle of an engine call. With --inflight-weight-updates a
rollout's generation is several calls of --inflight-segment-tokens each (hyrl.rollout.partial),
and a sync lands between them. `weights_version` is the policy version the engines hold
(weight syncs of trained weights), set by the trainer under the lock; a versioned rollout
stamps it on every token each call samples.

Under --async-rollout the manager also keeps the queue of rollouts generated ahead
(hyrl.rollout.async_queue) and decides when one is launched and which one the trainer gets:
`step_rollout` takes the oldest within --max-staleness and tops the queue up to the rollouts
kept in flight (`rollouts_in_flight`); without it, `step_rollout` generates now."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from hyrl.config.rollout_layout import RolloutLayout
from hyrl.data.stream import PromptStream
from hyrl.metrics.timers import StageTimers
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout import queue_state
from hyrl.rollout.async_queue import (
    EngineLock,
    QueuedRollout,
    RolloutQueue,
    Taken,
    rollouts_in_flight,
)
from hyrl.rollout.base import (
    GENERATION_PROGRESS,
    Generation,
    RolloutBatch,
    RolloutEngine,
    SamplingParams,
)
from hyrl.rollout.partial import generate_in_segments

if TYPE_CHECKING:
    from hyrl.algorithms.dynamic_sampling import GroupFilter
    from hyrl.config.concerns.algorithm import AlgorithmView
    from hyrl.config.concerns.batch import BatchView
    from hyrl.config.concerns.data import DataView
    from hyrl.config.concerns.evaluation import EvalView
    from hyrl.config.concerns.mismatch import MismatchView
    from hyrl.config.concerns.model import ModelView
    from hyrl.config.concerns.rollout import RolloutView
    from hyrl.config.concerns.run import CheckpointView, RunView
    from hyrl.rewards.pool import RewardPool


def max_prompt_len(data: DataView, model: ModelView, rollout: RolloutView) -> int:
    """--rollout-max-prompt-len, or what the positions leave after the longest response."""
    if data.rollout_max_prompt_len is not None:
        return data.rollout_max_prompt_len
    return model.max_position_embeddings - rollout.rollout_max_response_len


@dataclass
class StepRollout:
    """One rollout step's rollout as rank 0 hands it to the trainer."""

    batch: RolloutBatch
    routed: list | None  # the engine's routing, kept apart (RolloutManager.rollout)
    # --async-rollout's: rollout/staleness_*, perf/engine_idle_s, ... (Taken.metrics); {} without
    metrics: dict = field(default_factory=dict)
    dropped_responses: int = 0  # decoded into batches dropped as too stale: never trained on


class RolloutManager:
    def __init__(
        self,
        *,
        rollout: RolloutView,
        data: DataView,
        model: ModelView,
        batch: BatchView,
        algorithm: AlgorithmView,
        evaluation: EvalView,
        mismatch: MismatchView,
        run: RunView,
        checkpoint: CheckpointView,
        layout: RolloutLayout,
        arch: Qwen3MoeArch,
        device: torch.device,
    ):
        """The settings it reads, by concern: the engines, sampling, reward workers and
        asynchronous rollout (rollout); the task, its prompts and rewards (data); the checkpoint
        whose tokenizer it falls back to, the positions and the experts (model); G (batch);
        --dynamic-sampling (algorithm); whether prompts are held out (evaluation); whether the
        engines return their routing (mismatch); the steps, seed and run directory (run);
        whether the run saves (checkpoint). layout: the rollout layout of the training world
        size (`hyrl.config.rollout_layout`); arch: the model the engines generate with; device:
        where an in-process engine generates (the trainer's)."""
        self._rollout, self._data, self._model = rollout, data, model
        self._batch, self._algorithm, self._evaluation = batch, algorithm, evaluation
        self._mismatch, self._run, self._checkpoint = mismatch, run, checkpoint
        # both built by _start; None until then, or when it failed before them
        self.engine: RolloutEngine | None = None
        self.reward_pool: RewardPool | None = None
        self.owns_ray = False
        self.engines_released = False  # --colocate: engine memory freed while the actor trains
        self._group_filter: GroupFilter | None = None  # --dynamic-sampling's, at first use
        self.engine_lock = EngineLock()  # held by each engine call and each weight sync
        self.weights_version = 0  # the policy version the engines hold (set under the lock)
        self._calls = threading.local()  # this thread's rollout: versions and prompts used
        self.queue: RolloutQueue | None = None  # --async-rollout's (start_queue)
        try:
            self._start(layout, arch, device)
        except BaseException:  # what did start (Ray, reward workers) stops with the run
            self.close()
            raise

    def _start(self, layout: RolloutLayout, arch: Qwen3MoeArch, device: torch.device) -> None:
        from hyrl.rewards.pool import RewardPool
        from hyrl.rewards.registry import reward_factory
        from hyrl.rollout.build import build_engine, start_ray

        rollout, data = self._rollout, self._data
        self._load_task()
        eos_id = self.tokenizer.eos_token_id
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos_id
        self.owns_ray = start_ray(rollout, layout)
        self.reward_pool = RewardPool(
            reward_factory(data.rm_type, data.custom_rm_path),
            num_workers=rollout.reward_num_workers,
            timeout_s=rollout.reward_timeout_s,
            ray_address=rollout.ray_address,
        )
        self.engine = build_engine(
            rollout,
            layout,
            arch,
            pad_id=pad_id,
            eos_id=eos_id,
            device=device,
            run_dir=Path(self._run.run_dir),
            seed=self._run.seed,
            hf_checkpoint=self._model.hf_checkpoint,
            return_routed_experts=self._mismatch.engine_returns_routing,
        )
        self.sampling = SamplingParams(
            max_new_tokens=rollout.rollout_max_response_len,
            temperature=rollout.rollout_temperature,
            top_p=rollout.rollout_top_p,
        )

    def _load_task(self) -> None:
        """The training prompts, the held-out sets (eval_sets: name -> prompts) and the
        tokenizer: --prompt-data files or the built-in arithmetic task."""
        data, seed = self._data, self._run.seed
        evaluates = self._evaluation.eval_interval > 0
        if data.task == "prompt_data":
            from hyrl.data.prompt_data import (
                load_eval_prompt_sets,
                load_prompt_dataset,
                load_tokenizer,
            )

            tokenizer_path = data.tokenizer_path or self._model.hf_checkpoint
            assert tokenizer_path is not None and data.prompt_data is not None, (
                "validate refuses --prompt-data tasks without the data file or a tokenizer"
            )
            self.tokenizer = load_tokenizer(tokenizer_path)
            longest_prompt = max_prompt_len(data, self._model, self._rollout)
            data_options: dict[str, Any] = dict(
                input_key=data.input_key,
                label_key=data.label_key,
                apply_chat_template=data.apply_chat_template,
                max_prompt_len=longest_prompt,
            )
            self.task: PromptStream = load_prompt_dataset(
                data.prompt_data, self.tokenizer, seed=seed, **data_options
            )
            self.eval_sets = (
                {
                    name: held_out.prompts()
                    for name, held_out in load_eval_prompt_sets(
                        data.eval_prompt_data, self.tokenizer, **data_options
                    ).items()
                }
                if data.eval_prompt_data
                else {}
            )
            if self.task.dropped_too_long:
                print(
                    f"hyrl: {self.task.dropped_too_long} prompts of {data.prompt_data} are "
                    f"longer than {longest_prompt} tokens and were dropped",
                    flush=True,
                )
        else:
            from hyrl.data.arith import ArithTask
            from hyrl.data.tokenizer import build_tokenizer

            self.tokenizer = build_tokenizer()
            self.task = ArithTask(
                self.tokenizer,
                max_operand=data.task_max_operand,
                seed=seed,
                eval_fraction=data.task_eval_fraction if evaluates else 0.0,
            )
            self.eval_sets = {"": self.task.eval_prompts()} if evaluates else {}

    # -- one rollout step -----------------------------------------------------------------------
    def step_rollout(
        self, timers: StageTimers, prompts_per_step: int, rollout_step: int
    ) -> StepRollout:
        """The rollout the trainer trains on at this step: generated now, or under
        --async-rollout taken from the queue, which is then topped up to the rollouts kept in
        flight (fewer near the end unless a checkpoint keeps them)."""
        if self.queue is None:
            return StepRollout(*self.rollout(timers, prompts_per_step))
        left = self._run.num_steps - rollout_step
        saves = bool(self._checkpoint.save)
        taken = self._take_queued(
            timers, rollouts_in_flight(self._rollout.max_staleness, left, saves=saves)
        )
        queued = taken.rollout
        return StepRollout(queued.batch, queued.routed, taken.metrics(), taken.dropped_responses)

    def rollout(
        self, timers: StageTimers, prompts_per_step: int, prompts: list | None = None
    ) -> tuple[RolloutBatch, list | None]:
        """P prompts x G responses, generated and scored; with the engine's routing (int16,
        --use-rollout-routing-replay, --measure-routing-mismatch) kept apart: it goes to each rank
        for its own rows only. The engines release their memory after generating. prompts:
        the task's prompts to generate for instead of the task's next P (a regenerated
        batch; not with --dynamic-sampling)."""
        if self._algorithm.dynamic_sampling:
            assert prompts is None, "validate refuses --stale-policy regenerate with it"
            generations, scored, stats = self._dynamically_sampled(timers, prompts_per_step)
        else:
            generations, scored = self._round(timers, prompts_per_step, prompts)
            stats = None
        with timers("rollout"):
            self.release_engines()
        batch = RolloutBatch.of(generations, scored)
        batch.dynamic_sampling = stats
        return batch, self._routed_experts(generations)

    def rollout_versioned(
        self, prompts_per_step: int, prompts: list | None = None
    ) -> QueuedRollout:
        """`rollout` for --async-rollout's queue (any thread): with the policy version of each
        generation call and the prompts drawn."""
        self._calls.versions, self._calls.prompts = [], []
        try:
            timers = StageTimers()
            batch, routed = self.rollout(timers, prompts_per_step, prompts)
            return QueuedRollout(
                batch,
                routed,
                self._calls.prompts,
                self._calls.versions,
                stage_s={k: v for k, v in timers.seconds.items() if k in ("rollout", "reward")},
            )
        finally:
            self._calls.versions = self._calls.prompts = None

    # -- --async-rollout: the rollouts generated ahead (hyrl.rollout.async_queue) ------------
    def start_queue(self, prompts_per_step: int, saved: list[dict]) -> None:
        """The queue a worker thread generates ahead into, refilled first from a checkpoint's
        queued rollouts (saved: their state dicts) before any new prompt. P stays the first
        step's (--batch-ramp is refused with --async-rollout)."""
        self.queue = RolloutQueue(
            lambda: self.rollout_versioned(prompts_per_step),
            self._rollout.max_staleness,
            self._rollout.stale_policy,
            regenerate=lambda prompts: self.rollout_versioned(len(prompts), prompts),
            saved=queue_state.from_saved(saved),
        )

    def _take_queued(self, timers: StageTimers, in_flight: int) -> Taken:
        """The oldest queued rollout within --max-staleness (perf/trainer_idle_s: waiting for
        it), then the queue topped up to in_flight rollouts."""
        assert self.queue is not None, "start_queue started it"
        with timers("trainer_idle"):  # the engines hold the trainer's version: it synced last
            taken = self.queue.take(self.weights_version)
        self.queue.top_up(in_flight)
        return taken

    def wait_for_queue(self) -> None:
        """Until --async-rollout's worker is idle (an evaluation next: one thread uses the
        rewards); nothing to wait for without the queue."""
        if self.queue is not None:
            self.queue.wait()

    def _round(self, timers: StageTimers, prompts_per_step: int, given: list | None = None):
        """P prompts x G responses (of the given prompts, else the task's next P):
        (generations, their ScoredBatch)."""
        with timers("rollout"):
            prompts = self.task.next_batch(prompts_per_step) if given is None else given
            drawn = getattr(self._calls, "prompts", None)
            if drawn is not None:
                drawn += prompts
            repeated = [p for p in prompts for _ in range(self._batch.n_samples_per_prompt)]
            generations = self.generate([p.prompt_ids for p in repeated], self.sampling)
        with timers("reward"):
            scored = self.score(generations, [p.label for p in repeated])
            for error in scored.errors:  # a failed reward scores 0; the run goes on
                print(f"hyrl: reward failure: {error}", file=sys.stderr, flush=True)
        return generations, scored

    def _dynamically_sampled(self, timers: StageTimers, prompts_per_step: int):
        """--dynamic-sampling: rounds of P prompts until P groups pass the filter (or
        --dynamic-sampling-max-rounds run out): (the P groups' generations, their ScoredBatch,
        the DynamicSampling account)."""
        from hyrl.algorithms.dynamic_sampling import DynamicSampling, load_group_filter
        from hyrl.rewards.pool import ScoredBatch

        algorithm = self._algorithm
        if self._group_filter is None:
            self._group_filter = load_group_filter(algorithm.dynamic_sampling_filter_path)
        keeps_group = self._group_filter
        g = self._batch.n_samples_per_prompt
        generations: list[Generation] = []
        rewards: list[float] = []
        keep: list[bool] = []
        failures = timeouts = rounds = 0
        while rounds < algorithm.dynamic_sampling_max_rounds and sum(keep) < prompts_per_step:
            round_generations, scored = self._round(timers, prompts_per_step)
            rounds += 1
            generations += round_generations
            rewards += scored.rewards
            failures, timeouts = failures + scored.failures, timeouts + scored.timeouts
            round_reasons = [x.finish_reason for x in round_generations]
            keep += [
                bool(
                    keeps_group(
                        scored.rewards[i * g : (i + 1) * g], round_reasons[i * g : (i + 1) * g]
                    )
                )
                for i in range(prompts_per_step)
            ]
        stats = DynamicSampling.of(keep, prompts_per_step, rounds, rewards)
        if stats.filled_groups:
            print(
                f"hyrl: --dynamic-sampling: {sum(keep)} of {stats.generated_groups} groups in "
                f"{rounds} rounds (--dynamic-sampling-max-rounds) had a reward signal; "
                f"{stats.filled_groups} filtered groups fill the step's {prompts_per_step}",
                file=sys.stderr,
                flush=True,
            )
        rows = [i * g + j for i in stats.groups for j in range(g)]
        chosen = ScoredBatch(
            rewards=[rewards[r] for r in rows], failures=failures, timeouts=timeouts
        )
        return [generations[r] for r in rows], chosen, stats

    def generate(self, prompt_ids: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """The engine call (rollout and evaluation); a versioned rollout's (rollout_versioned)
        stamps the engines' version on each token, in segments under --inflight-weight-updates."""
        if self.engines_released:
            raise RuntimeError(
                "hyrl bug: generating on engines whose memory was released and "
                "not refilled by a weight sync"
            )
        versioned = getattr(self._calls, "versions", None) is not None
        if versioned and self._rollout.inflight_weight_updates:
            return generate_in_segments(
                self._engine_call,
                prompt_ids,
                sampling,
                self._rollout.inflight_segment_tokens,
            )
        with GENERATION_PROGRESS.counting(len(prompt_ids)):  # what the heartbeat reports
            generations, version = self._engine_call(prompt_ids, sampling)
        if versioned:
            for g in generations:
                g.response_versions = [version] * len(g.response_ids)
        return generations

    def _engine_call(
        self, prompt_ids: list[list[int]], sampling: SamplingParams
    ) -> tuple[list[Generation], int]:
        """One engine.generate under the engine lock: (its generations, the engines' version)."""
        assert self.engine is not None, "built in __init__"
        with self.engine_lock.generation():  # no weight sync in the middle of the call
            version = self.weights_version
            versions = getattr(self._calls, "versions", None)
            if versions is not None:
                versions.append(version)
            generations = self.engine.generate(prompt_ids, sampling)
        return generations, version

    def score(self, generations: list[Generation], labels: list[str]):
        """The reward pool's scores of the decoded responses."""
        texts = [
            self.tokenizer.decode(g.response_ids, skip_special_tokens=True) for g in generations
        ]
        assert self.reward_pool is not None, "built in __init__"
        return self.reward_pool.score(texts, labels, [g.finish_reason for g in generations])

    def _routed_experts(self, generations: list[Generation]) -> list | None:
        """--use-rollout-routing-replay / --measure-routing-mismatch: each generation's expert ids
        as int16 (the engine must return them, each in [0, --num-experts))."""
        if not self._mismatch.engine_returns_routing:
            return None
        num_experts = self._model.num_experts
        missing = [i for i, g in enumerate(generations) if g.routed_experts is None]
        if missing:
            raise RuntimeError(
                f"routing replay/measurement: the {self._rollout.rollout_engine} "
                f"engine returned no routed experts for {len(missing)} of "
                f"{len(generations)} responses (first: {missing[:5]})"
            )
        # no None left: checked just above
        routed = cast(list[torch.Tensor], [g.routed_experts for g in generations])
        for i, ids in enumerate(routed):
            if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < num_experts):
                raise RuntimeError(
                    f"routing replay/measurement: response {i} was routed to "
                    f"experts {int(ids.min())}..{int(ids.max())}, outside the "
                    f"model's 0..{num_experts - 1} (--num-experts): does "
                    "the engine serve the same model?"
                )
        return [ids.to(torch.int16) for ids in routed]

    # -- --colocate: the engines' GPU memory ------------------------------------------------------
    def release_engines(self) -> None:
        """--colocate: free the engines' GPU memory (weights, KV cache) for training."""
        if self._rollout.colocate and not self.engines_released:
            assert self.engine is not None, "built in __init__"
            self.engine.release_memory()
            self.engines_released = True

    def resume_engines(self) -> None:
        """Rank 0, right before the engines take the weights, before any rank gathers one:
        retake the memory (the weights are gone with it, so only the weight sync calls this),
        and let an engine that needs it prepare (SGLang's distributed sync forms a new group
        after a replacement: ``SGLangFleet.prepare_weight_sync``)."""
        if self.engines_released:
            if torch.cuda.is_available():  # hand the training step's cached blocks back first
                torch.cuda.empty_cache()
            assert self.engine is not None, "built in __init__"
            self.engine.resume_memory()
            self.engines_released = False
        prepare = getattr(self.engine, "prepare_weight_sync", None)
        if prepare is not None:
            prepare()

    def close(self) -> None:
        """Stop --async-rollout's worker, then the engines and reward workers (and Ray, if
        this side started it)."""
        from hyrl.rollout.build import stop_ray

        if self.queue is not None:  # its worker uses the engines
            self.queue.close()
        for part in (self.engine, self.reward_pool):
            if part is not None:
                part.close()
        stop_ray(self.owns_ray)
