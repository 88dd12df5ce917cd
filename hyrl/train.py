"""The RL loop. Every rank runs `Trainer.run`; rank 0 also owns the rollout engine and the task.

One rollout step:  prompts -> responses (engine) -> rewards -> advantages -> old log-probs
                   -> optimizer steps (global batch B each, split over DP ranks and micro-batches)
                   -> weight sync to the engine.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from hyrl import schedules
from hyrl.algorithms.batch import TokenBatch, pack
from hyrl.algorithms.grpo import group_advantages
from hyrl.algorithms.losses import kl_penalty
from hyrl.algorithms.ppo import explained_variance, gae, masked_whiten, token_rewards
from hyrl.config import ConfigError, RunConfig, engine_returns_routing, offloads_train
from hyrl.metrics.run_dir import RunDirectory, start_wandb
from hyrl.metrics.target import RunTotals, TargetTracker, summary, write_summary
from hyrl.metrics.timers import StageTimers
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import SamplingParams


def _dist():
    return torch.distributed


class TrainingStopped(RuntimeError):
    """Every rank stops the run (after the metrics of the last step are written): exit 1."""


PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Trainer:
    def __init__(self, cfg: RunConfig, world_size: int):
        from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
        from hyrl.backends.megatron.model import ParallelLayout, init_distributed

        self.cfg, self.world_size = cfg, world_size
        setup_start = time.perf_counter()
        layout = ParallelLayout.from_flags(cfg)
        init_distributed(layout, seed=cfg.seed, timeout_minutes=cfg.distributed_timeout_minutes)
        from megatron.core import parallel_state

        self.rank = _dist().get_rank()
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.dp_size = parallel_state.get_data_parallel_world_size()
        self.dp_rank_of = [self.dp_rank]  # every rank's DP rank, by global rank
        if world_size > 1 and engine_returns_routing(cfg):  # rank 0 sends each its rows' ids
            self.dp_rank_of = [None] * world_size
            _dist().all_gather_object(self.dp_rank_of, self.dp_rank)
        self.pad_multiple = cfg.tensor_model_parallel_size  # sequence parallel splits the sequence

        torch.manual_seed(cfg.seed)  # identical full weights on every rank before sharding
        self.arch = Qwen3MoeArch.from_flags(cfg)
        self.actor = MegatronActor(self.arch, layout, ActorSettings.from_flags(cfg))
        if cfg.hf_checkpoint:  # before the critic and the reference copy the actor's weights
            self.actor.load_hf_state_dict(_read_hf_weights(cfg.hf_checkpoint))
        self.critic = self._build_critic(layout) if cfg.advantage_estimator == "gae" else None
        self.batch_ramp = None
        if cfg.batch_ramp:
            from hyrl.config import batch_ramp_unit

            start_b, end_b, ramp_steps = schedules.parse_batch_ramp(cfg.batch_ramp)
            self.batch_ramp = dict(start=start_b, end=end_b, steps=ramp_steps,
                                   unit=batch_ramp_unit(cfg, world_size))
        self.resume_state, resumed_rng = None, None
        if cfg.load:  # weights, optimizer states and counters; the loop state is read in run()
            from hyrl.checkpoint.trainer_state import check_resumable, load_checkpoint

            step_dir, self.resume_state = check_resumable(cfg, world_size)
            resumed_rng = load_checkpoint(step_dir, self.arch, self._checkpoint_models(),
                                          self._trainables())
            if self.rank == 0:
                print(f"hyrl: resuming from {step_dir} (after rollout step "
                      f"{self.resume_state['rollout_step']})", flush=True)

        self.run_dir = Path(cfg.run_dir)
        self.logger = None
        self.engines_released = False  # --colocate: engine memory freed while the actor trains
        self.sync_metrics: dict = {}  # the engine's own account of the latest weight sync
        self.offloading = offloads_train(cfg)  # --offload-train: see _sync_to_engines
        self.trainer_offloaded = False
        if self.rank == 0:
            self._print_layout()
            self._setup_rollout_side()
            config = cfg.to_dict(world_size)
            wandb_run = start_wandb(cfg.wandb_project, self.run_dir, config) if cfg.log_wandb else None
            self.logger = RunDirectory(self.run_dir, wandb_run)  # appends to metrics.jsonl
            self.logger.write_config(config)
            if self.resume_state is not None:
                self.task.load_state_dict(self.resume_state["task"])
        if world_size > 1:  # rank 0 started the engines (minutes at 30B): wait outside NCCL
            from hyrl.backends.megatron.collectives import wait_for_rank_0

            wait_for_rank_0()
        self._sync_to_engines(StageTimers())  # with --offload-train: offloaded for generation
        if resumed_rng is not None:  # last: nothing draws from the generators before the loop
            from hyrl.checkpoint.trainer_state import set_rng_state

            set_rng_state(resumed_rng)
        self.stop_signal = None  # the preemption signal received, if any (every rank has a handler)
        self._previous_handlers = {sig: signal.signal(sig, self._on_preemption_signal)
                                   for sig in PREEMPTION_SIGNALS}
        self.setup_s = time.perf_counter() - setup_start

    def _on_preemption_signal(self, signum, frame) -> None:
        self.stop_signal = signal.Signals(signum).name  # acted on at the next rollout-step boundary

    def _checkpoint_models(self) -> dict:
        models = {"actor": self.actor.model}
        if self.actor.ref_model is not None:
            models["reference"] = self.actor.ref_model
        if self.critic is not None:
            models["critic"] = self.critic.model
        return models

    def _trainables(self) -> dict:
        return {"actor": self.actor, **({"critic": self.critic} if self.critic is not None else {})}

    def _build_critic(self, layout):
        from hyrl.backends.megatron.critic import CriticSettings, MegatronCritic

        critic = MegatronCritic(self.arch, layout, CriticSettings.from_flags(self.cfg))
        if self.cfg.critic_load:
            critic.load_trunk_from_hf(_read_hf_weights(self.cfg.critic_load))
        else:  # the actor's initial weights, a fresh value head
            critic.load_trunk(self.actor.export_full_state_dict())
        return critic

    def _print_layout(self) -> None:
        from hyrl.backends.megatron import cpu_compat
        from hyrl.backends.megatron.model import use_transformer_engine

        cfg = self.cfg
        spec = "transformer_engine" if use_transformer_engine(cfg.transformer_impl) else "local"
        dispatcher = cfg.moe_token_dispatcher_type
        if dispatcher == "auto":
            dispatcher = cpu_compat.default_token_dispatcher()
        print(f"hyrl: {self.world_size} rank(s) on {cpu_compat.device().type} "
              f"({cpu_compat.distributed_backend()}): TP={cfg.tensor_model_parallel_size} "
              f"EP={cfg.expert_model_parallel_size} DP={self.dp_size} "
              f"SP={'on' if cfg.sequence_parallel else 'off'}; layer spec {spec}, "
              f"MoE dispatcher {dispatcher}; run directory {self.run_dir}", flush=True)

    def _setup_rollout_side(self) -> None:
        from hyrl.backends.megatron import cpu_compat
        from hyrl.config import rollout_layout
        from hyrl.rewards.pool import RewardPool
        from hyrl.rewards.registry import reward_factory
        from hyrl.rollout.build import build_engine, start_ray

        cfg = self.cfg
        if cfg.task == "prompt_data":
            from hyrl.data.prompt_data import (load_eval_prompt_sets, load_prompt_dataset,
                                               load_tokenizer)

            self.tokenizer = load_tokenizer(cfg.tokenizer_path or cfg.hf_checkpoint)
            data_options = dict(input_key=cfg.input_key, label_key=cfg.label_key,
                                apply_chat_template=cfg.apply_chat_template,
                                max_prompt_len=_max_prompt_len(cfg))
            self.task = load_prompt_dataset(cfg.prompt_data, self.tokenizer, seed=cfg.seed,
                                            **data_options)
            self.eval_sets = ({name: data.prompts() for name, data in load_eval_prompt_sets(
                cfg.eval_prompt_data, self.tokenizer, **data_options).items()}
                if cfg.eval_prompt_data else {})
            if self.task.dropped_too_long:
                print(f"hyrl: {self.task.dropped_too_long} prompts of {cfg.prompt_data} are "
                      f"longer than {_max_prompt_len(cfg)} tokens and were dropped", flush=True)
        else:
            from hyrl.data.arith import ArithTask
            from hyrl.data.tokenizer import build_tokenizer

            self.tokenizer = build_tokenizer()
            self.task = ArithTask(self.tokenizer, max_operand=cfg.task_max_operand, seed=cfg.seed,
                                  eval_fraction=cfg.task_eval_fraction if cfg.eval_interval > 0
                                  else 0.0)
            self.eval_sets = {"": self.task.eval_prompts()} if cfg.eval_interval > 0 else {}
        eos_id = self.tokenizer.eos_token_id
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos_id
        layout = rollout_layout(cfg, self.world_size)
        self.owns_ray = start_ray(cfg, layout)
        self.reward_pool = RewardPool(reward_factory(cfg.rm_type, cfg.custom_rm_path),
                                      num_workers=cfg.reward_num_workers,
                                      timeout_s=cfg.reward_timeout_s, ray_address=cfg.ray_address)
        self.engine = build_engine(cfg, layout, self.arch, pad_id=pad_id, eos_id=eos_id,
                                   device=cpu_compat.device(), run_dir=self.run_dir)
        self.sampling = SamplingParams(max_new_tokens=cfg.rollout_max_response_len,
                                       temperature=cfg.rollout_temperature, top_p=cfg.rollout_top_p)

    # -- stages -----------------------------------------------------------------------------
    def _sync_weights(self) -> None:
        """Stream the actor's weights to the engines in buckets of --update-weight-buffer-size:
        every rank drives the TP/EP gathers, one parameter at a time; rank 0, which owns the
        engines, keeps each bucket until the engine has taken it. perf/weight_sync_peak_bytes:
        the most bytes rank 0's stream held at once (the buckets being filled or sent and the
        gather buffers of the parameter in flight; see weight_buckets.LiveBytes)."""
        from hyrl.models.weight_buckets import LiveBytes

        if self._weight_sync_mode() == "disk":
            return self._sync_weights_through_disk()
        if self._weight_sync_mode() == "tensor" and self.cfg.colocate:
            return self._sync_weights_by_cuda_ipc()
        live = LiveBytes()
        buckets = self.actor.hf_weight_buckets(self.cfg.update_weight_buffer_size,
                                               keep=self.rank == 0, live=live)
        if self.rank != 0:
            for _ in buckets:  # nothing is kept here: this only takes part in the gathers
                pass
            return
        self._engines_resume()
        self.engine.update_weights_stream(buckets)
        self.sync_metrics["perf/weight_sync_peak_bytes"] = live.peak
        self._record_engine_sync_stats()

    def _record_engine_sync_stats(self) -> None:
        fleet = getattr(self.engine, "fleet", self.engine)  # SGLangFleet wraps a RolloutFleet
        if hasattr(fleet, "stats"):  # engines on Ray: deaths and resubmissions so far
            fleet_stats = fleet.stats()
            self.sync_metrics["rollout/engine_restarts"] = sum(fleet_stats["restarts"])
            self.sync_metrics["rollout/resubmitted_prompts"] = fleet_stats["resubmitted_prompts"]
        stats = getattr(self.engine, "last_sync_stats", None)  # SGLang engines report these
        if stats is not None:
            self.sync_metrics.update({"perf/weight_transfer_s": stats.transfer_s,
                                      "perf/weight_sync_bytes": stats.tensor_bytes,
                                      "perf/weight_sync_buckets": stats.buckets,
                                      # copies the engine side made (device moves, disk clones)
                                      "perf/weight_sync_engine_peak_bytes": stats.peak_bytes})

    def _sync_weights_by_cuda_ipc(self) -> None:
        """--colocate, tensor mode: every rank keeps each bucket (the gathers leave it whole on
        every GPU) and hands the engine on its GPU CUDA IPC handles of its own copy, through
        rank 0 (hyrl.rollout.sglang.colocated). Peak bytes: the most on rank 0."""
        from hyrl.models.weight_buckets import LiveBytes
        from hyrl.rollout.sglang.colocated import stream_by_ipc, this_device
        from hyrl.rollout.sglang.weight_sync import sglang_serializer

        devices = [None] * self.world_size
        torch.distributed.all_gather_object(devices, this_device())
        status = ["ok"]
        if self.rank == 0:  # a bad placement stops every rank here, not in a gather later
            try:
                self._engines_resume()
                self.engine.prepare_ipc_sync(devices)
            except Exception as err:  # noqa: BLE001 - re-raised below, on every rank
                status, setup_error = [f"{type(err).__name__}: {err}"], err
        torch.distributed.broadcast_object_list(status, src=0)
        if status[0] != "ok":
            if self.rank == 0:
                raise setup_error
            raise RuntimeError(f"weight sync by CUDA IPC could not start on rank 0: {status[0]}")
        live = LiveBytes()
        buckets = self.actor.hf_weight_buckets(self.cfg.update_weight_buffer_size, live=live)
        if self.rank != 0:
            stream_by_ipc(buckets, None, sglang_serializer())
            return
        self.engine.update_weights_by_ipc(buckets, sglang_serializer())
        self.sync_metrics["perf/weight_sync_peak_bytes"] = live.peak
        self._record_engine_sync_stats()

    def _weight_sync_mode(self) -> str:
        from hyrl.config import rollout_layout

        return rollout_layout(self.cfg, self.world_size).update_weight_mode

    def _sync_weights_through_disk(self) -> None:
        """--update-weight-mode disk: every rank writes the buckets it owns (bucket k on rank
        k mod world size) as safetensors shards into RUN_DIR/rollout_weights/sync-N (a file
        system the ranks and servers share), rank 0 the index after gathering the shard names;
        the engines load it, and the previous sync's directory is removed. Peak bytes: a bucket
        and its host copy on the rank that writes it."""
        from hyrl.models.weight_buckets import LiveBytes, tensor_bytes
        from hyrl.rollout.base import DiskCheckpoint
        from hyrl.rollout.sglang.weight_sync import write_index, write_shard

        self.disk_syncs = getattr(self, "disk_syncs", 0) + 1
        root = self.run_dir / "rollout_weights"
        directory = root / f"sync-{self.disk_syncs:06d}"
        directory.mkdir(parents=True, exist_ok=True)
        live, weight_map, written, shards = LiveBytes(), {}, 0, 0
        owned = self.actor.hf_weight_buckets(self.cfg.update_weight_buffer_size, live=live,
                                             keep=lambda k: k % self.world_size == self.rank)
        for bucket in owned:
            size = sum(tensor_bytes(t) for _, t in bucket)
            live.add(size)  # the host copies safetensors writes from
            weight_map.update(write_shard(
                bucket, directory / f"model-rank{self.rank:05d}-{shards:05d}.safetensors"))
            live.release(size)
            written, shards = written + size, shards + 1
            del bucket
        parts = [None] * self.world_size if self.rank == 0 else None
        torch.distributed.gather_object((weight_map, written, shards, live.peak), parts, dst=0)
        if self.rank != 0:
            return
        merged = {name: file for part in parts for name, file in part[0].items()}
        total_bytes, total_shards = sum(p[1] for p in parts), sum(p[2] for p in parts)
        write_index(directory, merged, total_bytes)
        self._engines_resume()
        self.engine.load_weights_from_disk(DiskCheckpoint(str(directory), total_bytes,
                                                          total_shards))
        for old in root.glob("sync-*"):  # every engine, replacements too, loads the newest
            if old != directory:
                shutil.rmtree(old, ignore_errors=True)
        self.sync_metrics["perf/weight_sync_peak_bytes"] = max(p[3] for p in parts)
        self._record_engine_sync_stats()

    # -- --offload-train: the trainer's GPU memory around generation (colocated engines) -----
    # A rollout step: [trainer offloaded] generate -> engines release (rank 0) -> restore
    # trainer (every rank) -> log-probs, values, training -> park training state (grads freed,
    # optimizer states, reference, critic), empty_cache, barrier -> engines resume and take the
    # weights (the sync reads them on every rank) -> park the actor's weights, empty_cache.
    def _sync_to_engines(self, timers: StageTimers) -> None:
        """The weight sync; with --offload-train the engines resume only once every rank has
        parked its training state, and the actor's weights are parked after it.
        perf/offload_freed_bytes: what rank 0 released (torch.cuda.memory_allocated before -
        after on GPU, the storage bytes on CPU); perf/offload_s: offload and restore."""
        freed = 0
        if self.offloading:
            with timers("offload"):
                freed += self.actor.offload_training_state()
                if self.critic is not None:  # not synced: all of it goes now
                    freed += self.critic.offload_training_state() + self.critic.offload_weights()
                self._free_cached_blocks(barrier=True)
        with timers("weight_sync"):
            self._sync_weights()
        if self.offloading:
            with timers("offload"):
                freed += self.actor.offload_weights()
                self._free_cached_blocks(barrier=False)
            self.trainer_offloaded = True
            self.sync_metrics["perf/offload_freed_bytes"] = freed

    def _free_cached_blocks(self, barrier: bool) -> None:
        """Hand this rank's freed blocks back to the driver; with barrier, wait for every rank
        (rank 0 resumes the engines after it, into all GPUs' freed memory)."""
        from hyrl.backends.megatron.collectives import wait_for_rank_0

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if barrier and self.world_size > 1:
            wait_for_rank_0()

    def _restore_trainer(self, timers: StageTimers) -> None:
        """Every rank takes its offloaded memory back; rank 0 released the engines before it
        broadcast the rollout, so no rank gets here before the engines' memory is free."""
        if not self.trainer_offloaded:
            return
        with timers("offload"):
            for part in self._trainables().values():
                part.restore_offloaded()
        self.trainer_offloaded = False

    def _reclaim_gpus_from_engines(self) -> None:
        """Outside a rollout step (a checkpoint): rank 0 releases the engines, then every rank
        restores the trainer."""
        from hyrl.backends.megatron.collectives import wait_for_rank_0

        if self.rank == 0:
            self._engines_release()
        if self.world_size > 1:
            wait_for_rank_0()
        self._restore_trainer(StageTimers())

    def _engines_release(self) -> None:
        """--colocate: free the engines' GPU memory (weights, KV cache) for training."""
        if self.cfg.colocate and not self.engines_released:
            self.engine.release_memory()
            self.engines_released = True

    def _engines_resume(self) -> None:
        """Retake the memory; the weights are gone with it, so only _sync_weights calls this."""
        if self.engines_released:
            if torch.cuda.is_available():  # hand the training step's cached blocks back first
                torch.cuda.empty_cache()
            self.engine.resume_memory()
            self.engines_released = False

    def _check_engines_hold_weights(self) -> None:
        if self.engines_released:
            raise RuntimeError("hyrl bug: generating on engines whose memory was released and "
                               "not refilled by a weight sync")

    def _batch_sizes(self, rollout_step: int) -> tuple[int, int]:
        """(P prompts, B responses per optimizer step) for this rollout step (--batch-ramp)."""
        cfg = self.cfg
        if self.batch_ramp is None:
            return cfg.rollout_batch_size, cfg.global_batch_size
        responses = schedules.batch_at(rollout_step, **self.batch_ramp)
        return responses * cfg.optimizer_steps_per_rollout // cfg.n_samples_per_prompt, responses

    def _rollout(self, timers: StageTimers, prompts_per_step: int, responses_per_step: int) -> dict:
        """Rank 0 generates and scores; the result is broadcast to every rank (routing ids,
        --use-routing-replay, --measure-routing-mismatch, go to each rank for its own rows).
        The other ranks wait in the gloo wait group, where no NCCL timeout fires."""
        from hyrl.backends.megatron.collectives import wait_group

        payload, routed = [None], None
        if self.rank == 0:
            cfg = self.cfg
            with timers("rollout"):
                prompts = self.task.next_batch(prompts_per_step)
                repeated = [p for p in prompts for _ in range(cfg.n_samples_per_prompt)]
                self._check_engines_hold_weights()
                generations = self._generate([p.prompt_ids for p in repeated], self.sampling)
                self._engines_release()
            with timers("reward"):
                texts = [self.tokenizer.decode(g.response_ids, skip_special_tokens=True)
                         for g in generations]
                scored = self.reward_pool.score(
                    texts, [p.label for p in repeated], [g.finish_reason for g in generations])
                for error in scored.errors:  # a failed reward scores 0; the run goes on
                    print(f"hyrl: reward failure: {error}", file=sys.stderr, flush=True)
            payload = [{
                "prompts": [g.prompt_ids for g in generations],
                "responses": [g.response_ids for g in generations],
                "rollout_log_probs": [g.response_log_probs for g in generations],
                "finish_reasons": [g.finish_reason for g in generations],
                "rewards": scored.rewards,
                "reward_failures": scored.failures,
                "reward_timeouts": scored.timeouts,
            }]
            routed = self._routed_experts(generations)
        if self.world_size > 1:
            _dist().broadcast_object_list(payload, src=0, group=wait_group())
        rollout = payload[0]
        rollout["routed_experts"] = (self._scatter_routing(routed, len(rollout["prompts"]),
                                                           responses_per_step)
                                     if engine_returns_routing(self.cfg) else None)
        return rollout

    def _routed_experts(self, generations) -> list | None:
        """--use-routing-replay / --measure-routing-mismatch: each generation's expert ids as
        int16 (the engine must return them, each in [0, --num-experts))."""
        if not engine_returns_routing(self.cfg):
            return None
        missing = [i for i, g in enumerate(generations) if g.routed_experts is None]
        if missing:
            raise RuntimeError(f"routing replay/measurement: the {self.cfg.rollout_engine} "
                               f"engine returned no routed experts for {len(missing)} of "
                               f"{len(generations)} responses (first: {missing[:5]})")
        for i, g in enumerate(generations):
            ids = g.routed_experts
            if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < self.cfg.num_experts):
                raise RuntimeError(f"routing replay/measurement: response {i} was routed to "
                                   f"experts {int(ids.min())}..{int(ids.max())}, outside the model's "
                                   f"0..{self.cfg.num_experts - 1} (--num-experts): does the "
                                   "engine serve the same model?")
        return [g.routed_experts.to(torch.int16) for g in generations]

    def _generate(self, prompt_ids: list[list[int]], sampling: SamplingParams) -> list:
        """Rank 0's engine call (rollout and evaluation). HYRL_TEST_GENERATION_DELAY_S, a test
        hook, first sleeps that long: a generation slower than --distributed-timeout-minutes."""
        delay_s = float(os.environ.get("HYRL_TEST_GENERATION_DELAY_S", "0"))
        if delay_s > 0:
            time.sleep(delay_s)
        return self.engine.generate(prompt_ids, sampling)

    def _scatter_routing(self, routed: list | None, num_rows: int, responses_per_step: int
                         ) -> list:
        """Each rank gets the routing of the rows its log-prob pass and its optimizer steps
        use, None for the others: the ids are the rollout's largest part (layers x top-k per
        token), so no rank but 0 holds them all. They go as int16 tensors (one flat tensor and
        the row lengths per rank) over the gloo wait group: host memory, no GPU staging
        (collective)."""
        from hyrl.backends.megatron.collectives import recv_rows, send_rows

        if self.world_size == 1:  # the one rank works on every row
            return routed
        if self.rank == 0:
            rows_of_dp_rank = {}  # one dict per DP rank: TP/EP peers share it (packed once)
            for dp_rank in sorted(set(self.dp_rank_of)):
                rows_of_dp_rank[dp_rank] = {i: routed[i] for i in self._rows_needed(
                    dp_rank, num_rows, responses_per_step)}
            held = send_rows({rank: rows_of_dp_rank[dp_rank]
                              for rank, dp_rank in enumerate(self.dp_rank_of)})
        else:
            held = recv_rows()
        return [held.get(i) for i in range(num_rows)]

    def _rows_needed(self, dp_rank: int, num_rows: int, responses_per_step: int) -> set[int]:
        """Rollout rows data-parallel rank dp_rank works on: its log-prob share and its rows
        of every optimizer step."""
        rows = set(range(num_rows)[self._share_rows(num_rows, dp_rank)])
        for k in range(self.cfg.optimizer_steps_per_rollout):
            rows.update(range(num_rows)[self._rank_rows(k, responses_per_step, dp_rank)])
        return rows

    def _share_rows(self, num_rows: int, dp_rank: int | None = None) -> slice:
        """A DP rank's contiguous share of the rollout in the no-grad passes (_all_rows)."""
        dp_rank = self.dp_rank if dp_rank is None else dp_rank
        share = num_rows // self.dp_size
        return slice(dp_rank * share, (dp_rank + 1) * share)

    def _rank_rows(self, step_in_rollout: int, global_batch: int,
                   dp_rank: int | None = None) -> slice:
        """A DP rank's rows (this one's by default) of optimizer step k (of `global_batch`
        responses) in the rollout."""
        dp_rank = self.dp_rank if dp_rank is None else dp_rank
        per_rank = global_batch // self.dp_size
        start = step_in_rollout * global_batch + dp_rank * per_rank
        return slice(start, start + per_rank)

    def _all_rows(self, fn, batch: TokenBatch):
        """Run a no-grad pass on this DP rank's share of the rollout, gather every row on every rank.

        fn(local_batch) returns one [n, L] tensor or a tuple of them.
        """
        outputs = fn(batch.select(self._share_rows(len(batch))))
        single = isinstance(outputs, torch.Tensor)
        outputs = (outputs,) if single else outputs
        if self.dp_size > 1:  # on the DP group's device (NCCL: the GPU), back in host memory
            from megatron.core import parallel_state

            from hyrl.backends.megatron.collectives import all_gather_rows

            outputs = all_gather_rows(outputs, parallel_state.get_data_parallel_group())
        return outputs[0] if single else outputs

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        timers = StageTimers()
        from hyrl.config import parse_target

        tracker = TargetTracker(*parse_target(cfg.target)) if cfg.target else None
        totals = RunTotals()
        samples, first_step, elapsed_s = 0, 1, 0.0
        if self.resume_state is not None:  # the loop where the checkpoint left it
            resumed = self.resume_state
            samples, elapsed_s = resumed["samples"], resumed["elapsed_s"]
            first_step = resumed["rollout_step"] + 1
            totals.load_state_dict(resumed["totals"])
            if tracker is not None and resumed["tracker"] is not None:
                tracker.load_state_dict(resumed["tracker"])
        start = time.perf_counter() - elapsed_s  # elapsed_s continues across a resume
        last_record_time = time.perf_counter()
        progress = self._progress() if self.rank == 0 and cfg.progress else nullcontext()

        def log(record: dict) -> None:
            if self.logger is None:
                return
            self.logger.log(record)
            totals.update(record)
            if tracker is not None and tracker.update(record):
                write_summary(self.run_dir, summary(tracker, totals))

        eval_due = self._eval_schedule()
        try:
            with progress as bar:
                task_id = (bar.add_task("training", total=cfg.num_steps, completed=first_step - 1)
                           if bar else None)
                if 0 in eval_due and first_step == 1:  # the starting point of every curve
                    eval_metrics, eval_s = self._evaluate()
                    start += eval_s
                    last_record_time += eval_s
                    log({"step": 0, "rollout_step": 0, "samples": 0, "elapsed_s": 0.0,
                         **eval_metrics, "perf/eval_s": eval_s})
                for rollout_step in range(first_step, cfg.num_steps + 1):
                    prompts_per_step, responses_per_step = self._batch_sizes(rollout_step)
                    rollout = self._rollout(timers, prompts_per_step, responses_per_step)
                    self._restore_trainer(timers)  # the engines released their memory in _rollout
                    batch, rollout_metrics = self._prepare(rollout, timers)
                    rollout_metrics["batch/prompts_per_step"] = prompts_per_step
                    rollout_metrics["batch/responses_per_step"] = responses_per_step
                    if self.critic is not None:
                        with timers("critic_train"):
                            rollout_metrics.update(self._critic_updates(batch))
                    # One record per actor optimizer step (a skipped one included); a critic-only
                    # warm-up rollout gets one too.
                    records = []
                    if rollout_step > cfg.num_critic_only_steps:
                        for k in range(cfg.optimizer_steps_per_rollout):
                            with timers("actor_train"):
                                metrics = self._actor_update(batch, k, responses_per_step)
                            if not metrics["actor/skipped"]:  # samples: responses updates consumed
                                samples += responses_per_step
                            metrics["train/loss"] = metrics["actor/loss"]
                            records.append({"step": self.actor.optimizer_steps, "samples": samples,
                                            "time": time.perf_counter(), **metrics,
                                            "train/skipped_steps": self._skipped_steps()})
                        self._sync_to_engines(timers)
                    else:
                        records.append({"step": self.actor.optimizer_steps, "samples": samples,
                                        "train/skipped_steps": self._skipped_steps()})
                        if cfg.colocate:  # released engines get their (unchanged) weights back
                            self._sync_to_engines(timers)
                    records[-1]["time"] = time.perf_counter()  # the last one carries the weight sync
                    records[0].update(rollout_metrics)
                    stage_times = timers.pop()  # stage timers of the whole rollout step
                    records[-1].update(stage_times)
                    # perf/overhead_s: the rollout step's wall time not spent in a timed stage
                    # (generation, reward, log-probs/values, training, weight sync)
                    records[-1]["perf/overhead_s"] = (records[-1]["time"] - last_record_time
                                                      - sum(stage_times.values()))
                    records[-1].update(self.sync_metrics)
                    if rollout_step == first_step:
                        records[0]["perf/setup_s"] = self.setup_s
                    eval_s = 0.0
                    if rollout_step in eval_due:  # evaluation stays off the elapsed_s clock
                        eval_metrics, eval_s = self._evaluate()
                        records[-1].update(eval_metrics)
                        records[-1]["perf/eval_s"] = eval_s
                    for record in records:  # their times were taken before the evaluation
                        now = record.pop("time")
                        record.update(rollout_step=rollout_step, elapsed_s=now - start)
                        record["perf/step_s"] = now - last_record_time
                        last_record_time = now
                        log(record)
                    start += eval_s  # the clock resumes after the evaluation
                    last_record_time += eval_s
                    if bar:
                        description = f"reward {rollout_metrics['train/reward_mean']:.2f}"
                        if "eval/accuracy" in records[-1]:
                            description += f" eval {records[-1]['eval/accuracy']:.2f}"
                        bar.update(task_id, advance=1, description=description)
                    self._check_skipped_steps(rollout_step)
                    preempted = self._preemption_requested()
                    if cfg.save and (preempted or rollout_step == cfg.num_steps or (
                            cfg.save_interval and rollout_step % cfg.save_interval == 0)):
                        save_s = self._save(rollout_step, samples, time.perf_counter() - start,
                                            tracker, totals)
                        start += save_s  # checkpoints stay off the elapsed_s clock, as evaluation
                        last_record_time += save_s
                    if preempted:
                        if self.rank == 0:
                            saved = (f"checkpoint {cfg.save}/step_{rollout_step} written; resume "
                                     f"with --load {cfg.save}" if cfg.save else
                                     "no checkpoint written (no --save)")
                            print(f"hyrl: {self.stop_signal or 'a preemption signal'} received: "
                                  f"stopping after rollout step {rollout_step}; {saved}",
                                  flush=True)
                        break
        finally:
            if self.logger is not None:
                write_summary(self.run_dir, summary(tracker, totals))
                self.logger.close()

    def _skipped_steps(self) -> int:
        """Optimizer steps skipped for a non-finite loss or gradient norm, actor and critic."""
        return sum(part.skipped_steps for part in self._trainables().values())

    def _check_skipped_steps(self, rollout_step: int) -> None:
        """Stop (every rank alike: the skip decision is all-reduced) after --max-skipped-steps
        skipped optimizer steps in a row of the actor or the critic."""
        for part in self._trainables().values():
            if part.consecutive_skips >= self.cfg.max_skipped_steps:
                raise TrainingStopped(
                    f"the {part.metric_prefix} skipped {part.consecutive_skips} optimizer steps in a "
                    f"row (up to rollout step {rollout_step}) for a non-finite loss or gradient norm "
                    f"(--max-skipped-steps={self.cfg.max_skipped_steps}); metrics.jsonl holds their "
                    "records (actor/skipped, critic/skipped, train/skipped_steps)")

    def _preemption_requested(self) -> bool:
        """Whether any rank got SIGTERM/SIGUSR1 (collective: every rank learns it at once).
        Over the gloo wait group: the other ranks wait here while rank 0 evaluates."""
        from hyrl.backends.megatron.collectives import wait_group

        flag = torch.tensor([0.0 if self.stop_signal is None else 1.0])
        if self.world_size > 1:
            _dist().all_reduce(flag, group=wait_group())
        return bool(flag.item() > 0)

    def _save(self, rollout_step: int, samples: int, elapsed_s: float, tracker, totals) -> float:
        """A checkpoint of the state after this rollout step (collective); its seconds."""
        from hyrl.checkpoint.trainer_state import save_checkpoint

        began = time.perf_counter()
        reclaimed = self.trainer_offloaded  # the checkpoint reads weights and optimizer states
        if reclaimed:
            self._reclaim_gpus_from_engines()
        loop_state = {}
        if self.rank == 0:
            loop_state = {"samples": samples, "elapsed_s": elapsed_s,
                          "task": self.task.state_dict(),
                          "tracker": None if tracker is None else tracker.state_dict(),
                          "totals": totals.state_dict()}
        path = save_checkpoint(self.cfg.save, rollout_step, self.cfg, self.arch,
                               self._checkpoint_models(), self._trainables(), loop_state)
        if self.rank == 0:
            print(f"hyrl: checkpoint {path} written", flush=True)
        if reclaimed:  # the engines get the (unchanged) weights back
            self._sync_to_engines(StageTimers())
        return time.perf_counter() - began

    def close(self) -> None:
        """Stop the engines and reward workers (and Ray, if this trainer started it)."""
        from hyrl.rollout.build import stop_ray

        for part in (getattr(self, "engine", None), getattr(self, "reward_pool", None)):
            if part is not None and hasattr(part, "close"):
                part.close()
        stop_ray(getattr(self, "owns_ray", False))
        for sig, handler in getattr(self, "_previous_handlers", {}).items():
            signal.signal(sig, handler)

    def _eval_schedule(self) -> set[int]:
        """Rollout steps after which rank 0 evaluates: 0 (before training), every
        --eval-interval, and the last."""
        cfg = self.cfg
        if cfg.eval_interval <= 0 or self.rank != 0:
            return set()
        return {0, cfg.num_steps, *range(cfg.eval_interval, cfg.num_steps + 1, cfg.eval_interval)}

    def _evaluate(self) -> tuple[dict, float]:
        """mean@k accuracy on each held-out set (one engine call for all of them); the training
        RNG stream is left untouched. Named sets (--eval-prompt-data) log eval/NAME/accuracy
        and eval/accuracy is the mean of the sets' accuracies (each set weighs the same)."""
        cfg = self.cfg
        began = time.perf_counter()
        k = cfg.n_samples_per_eval_prompt
        sets = [(name, [p for p in prompts for _ in range(k)]) for name, prompts in self.eval_sets.items()]
        prompts = [p for _, set_prompts in sets for p in set_prompts]
        temperature = cfg.rollout_temperature if cfg.eval_temperature is None else cfg.eval_temperature
        params = SamplingParams(max_new_tokens=cfg.rollout_max_response_len,
                                temperature=temperature, top_p=cfg.rollout_top_p)
        engine_device = getattr(self.engine, "device", None)  # None: the engines are Ray actors
        devices = [] if engine_device is None or engine_device.type == "cpu" else [engine_device]
        self._check_engines_hold_weights()
        with torch.random.fork_rng(devices=devices):
            generations = self._generate([p.prompt_ids for p in prompts], params)
        texts = [self.tokenizer.decode(g.response_ids, skip_special_tokens=True) for g in generations]
        scored = self.reward_pool.score(texts, [p.label for p in prompts],
                                        [g.finish_reason for g in generations])
        metrics = {"eval/reward_failures": scored.failures, "eval/num_responses": len(prompts)}
        accuracies, start = [], 0
        for name, set_prompts in sets:
            rewards = scored.rewards[start:start + len(set_prompts)]
            lengths = [len(g.response_ids) for g in generations[start:start + len(set_prompts)]]
            start += len(set_prompts)
            prefix = f"eval/{name}/" if name else "eval/"
            metrics[prefix + "accuracy"] = sum(rewards) / len(rewards)
            metrics[prefix + "response_len_mean"] = sum(lengths) / len(lengths)
            accuracies.append(metrics[prefix + "accuracy"])
        metrics["eval/accuracy"] = sum(accuracies) / len(accuracies)
        return metrics, time.perf_counter() - began

    def _prepare(self, rollout: dict, timers: StageTimers) -> tuple[TokenBatch, dict]:
        """Pack the rollout; old/reference log-probs, values, advantages for every row."""
        cfg = self.cfg
        rewards = torch.tensor(rollout["rewards"], dtype=torch.float32)
        batch = pack(rollout["prompts"], rollout["responses"], torch.zeros(len(rewards)),
                     pad_id=0, pad_to_multiple_of=self.pad_multiple,
                     rollout_log_probs=rollout["rollout_log_probs"],
                     routed_experts=rollout["routed_experts"])
        mask = batch.loss_mask
        with timers("logprob"):
            batch.old_log_probs, entropy = self._all_rows(self.actor.log_probs, batch)
            if self.actor.ref_model is not None:
                batch.ref_log_probs = self._all_rows(
                    lambda b: self.actor.log_probs(b, reference=True)[0], batch)
        metrics = self._rollout_metrics(rollout, timers)
        metrics["train/entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
        metrics.update(self._mismatch(batch))
        if cfg.advantage_estimator == "grpo":
            batch.advantages = group_advantages(rewards, cfg.n_samples_per_prompt,
                                                normalize_std=cfg.grpo_std_normalization)
            return batch, metrics
        with timers("value"):
            values = self._all_rows(self.critic.values, batch) * mask
        kl = None
        if cfg.kl_coef > 0:
            kl = kl_penalty(batch.old_log_probs, batch.ref_log_probs, "k1") * mask
            metrics["train/kl_penalty"] = float(kl.sum() / mask.sum().clamp(min=1))
        advantages, returns = gae(token_rewards(rewards, mask, kl, cfg.kl_coef), values, mask,
                                  cfg.gamma, cfg.lambd)
        if cfg.normalize_advantages:
            advantages = masked_whiten(advantages, mask)
        batch.advantages, batch.returns, batch.old_values = advantages, returns, values
        tokens = mask.sum().clamp(min=1)
        metrics.update({
            "critic/explained_variance": explained_variance(values, returns, mask),
            "critic/value_mean": float(values.sum() / tokens),
            "critic/return_mean": float(returns.sum() / tokens),
        })
        return batch, metrics

    def _mismatch(self, batch: TokenBatch) -> dict:
        """mismatch/* metrics of the trainer's old log-probs against the engine's, and the
        importance weights of --use-tis / --use-mis (set on batch.pg_weights)."""
        from hyrl.algorithms import mismatch

        cfg = self.cfg
        old, rollout, mask = batch.old_log_probs, batch.rollout_log_probs, batch.loss_mask
        metrics = mismatch.mismatch_metrics(old, rollout, mask)
        weights = None
        if cfg.use_tis:
            weights, metrics["mismatch/tis_clipped_frac"] = mismatch.tis_weights(
                old, rollout, mask, cfg.tis_clip)
        if cfg.use_mis:
            keep, metrics["mismatch/mis_masked_frac"] = mismatch.mis_keep(
                old, rollout, mask, cfg.mis_low, cfg.mis_high, cfg.mis_level)
            weights = keep if weights is None else weights * keep
        batch.pg_weights = weights
        if engine_returns_routing(cfg):  # collective
            metrics.update(self.actor.routing_metrics())
        return metrics

    def _actor_update(self, batch: TokenBatch, k: int, responses_per_step: int) -> dict:
        cfg = self.cfg
        peak_lr = cfg.lr
        if self.batch_ramp is not None and cfg.ref_lr is not None:  # re-derived as B changes
            from hyrl.config import scaled_lr

            peak_lr = scaled_lr(cfg.ref_lr, responses_per_step, cfg.ref_global_batch_size,
                                cfg.lr_scaling)
        lr = schedules.lr_at(self.actor.optimizer_steps, lr=peak_lr, min_lr=cfg.min_lr,
                             warmup_steps=cfg.lr_warmup_steps, decay_style=cfg.lr_decay_style,
                             total_steps=cfg.num_steps * cfg.optimizer_steps_per_rollout)
        global_rows = slice(k * responses_per_step, (k + 1) * responses_per_step)
        return self.actor.train_step(batch.select(self._rank_rows(k, responses_per_step)),
                                     batch.loss_mask[global_rows].sum().item(), lr)

    def _critic_updates(self, batch: TokenBatch) -> dict:
        """Every critic optimizer step of this rollout; their statistics averaged."""
        cfg = self.cfg
        size = cfg.critic_global_batch_size
        steps = cfg.responses_per_rollout // size
        history = []
        for j in range(steps):
            lr = schedules.lr_at(self.critic.optimizer_steps, lr=cfg.critic_lr,
                                 min_lr=cfg.critic_min_lr, warmup_steps=cfg.critic_lr_warmup_steps,
                                 decay_style=cfg.critic_lr_decay_style,
                                 total_steps=cfg.num_steps * steps)
            history.append(self.critic.train_step(
                batch.select(self._rank_rows(j, size)),
                batch.loss_mask[j * size:(j + 1) * size].sum().item(), lr))
        keys = dict.fromkeys(k for h in history for k in h)  # a skipped step has no noise metrics
        averaged = {k: sum(h[k] for h in history if k in h) / sum(k in h for h in history)
                    for k in keys}
        averaged["critic/skipped"] = sum(h["critic/skipped"] for h in history)  # a count
        averaged["critic/optimizer_steps"] = history[-1]["critic/optimizer_steps"]
        averaged["critic/lr"] = history[-1]["critic/lr"]
        return averaged

    def _rollout_metrics(self, rollout: dict, timers: StageTimers) -> dict:
        rewards = torch.tensor(rollout["rewards"], dtype=torch.float64)
        lengths = torch.tensor([len(r) for r in rollout["responses"]], dtype=torch.float64)
        rollout_s = timers.seconds.get("rollout", 0.0)
        return {
            "train/reward_mean": float(rewards.mean()),
            "train/response_len_mean": float(lengths.mean()),
            "train/stop_frac": sum(f == "stop" for f in rollout["finish_reasons"]) / len(rewards),
            # cut at --rollout-max-response-len (the rewards score them as not finished)
            "train/truncated_frac": sum(f == "length" for f in rollout["finish_reasons"]) / len(rewards),
            "train/reward_failures": rollout["reward_failures"],
            "train/reward_timeouts": rollout["reward_timeouts"],
            "perf/rollout_tokens_per_s": float(lengths.sum()) / rollout_s if rollout_s > 0 else 0.0,
        }

    @staticmethod
    def _progress():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn())


def preflight(cfg: RunConfig) -> None:
    """Flag checks that depend on this machine (CUDA, Transformer Engine), before any process group."""
    from hyrl.backends.megatron import cpu_compat
    from hyrl.backends.megatron.model import transformer_engine_importable

    if cpu_compat.on_cpu() and cfg.moe_token_dispatcher_type == "alltoall":
        raise ConfigError("--moe-token-dispatcher-type", "alltoall",
                          "needs CUDA (megatron's alltoall dispatcher builds CUDA streams)",
                          "allgather or auto on a machine without CUDA")
    for flag, hf_dir in (("--hf-checkpoint", cfg.hf_checkpoint), ("--critic-load", cfg.critic_load)):
        if hf_dir:
            _check_hf_architecture(flag, hf_dir, cfg)
    _preflight_data(cfg)
    if cfg.load:  # truncated, another layout or architecture: refused before any process group
        from hyrl.checkpoint.trainer_state import check_resumable
        from hyrl.config import world_size_from_env

        check_resumable(cfg, world_size_from_env())
    if cfg.rollout_engine == "sglang":
        _preflight_sglang(cfg)
    if cfg.transformer_impl == "transformer_engine" and not transformer_engine_importable():
        raise ConfigError("--transformer-impl", "transformer_engine",
                          "transformer_engine does not import on this machine", "local or auto")


def _max_prompt_len(cfg: RunConfig) -> int:
    """--rollout-max-prompt-len, or what the positions leave after the longest response."""
    if cfg.rollout_max_prompt_len is not None:
        return cfg.rollout_max_prompt_len
    return cfg.max_position_embeddings - cfg.rollout_max_response_len


def _preflight_data(cfg: RunConfig) -> None:
    """The tokenizer, the data files and a custom reward load, before any process group."""
    from hyrl.data.prompt_data import PromptDataError, load_records, load_tokenizer
    from hyrl.rewards.registry import reward_factory

    try:
        reward_factory(cfg.rm_type, cfg.custom_rm_path)  # imports a custom reward once
    except (ValueError, ImportError) as err:
        raise ConfigError("--custom-rm-path", cfg.custom_rm_path, str(err),
                          "an importable module:function") from None
    if cfg.task != "prompt_data":
        return
    flag = "--tokenizer-path" if cfg.tokenizer_path else "--hf-checkpoint"
    try:
        tokenizer = load_tokenizer(cfg.tokenizer_path or cfg.hf_checkpoint)
    except (OSError, ValueError) as err:
        raise ConfigError(flag, cfg.tokenizer_path or cfg.hf_checkpoint, str(err),
                          "a local Hugging Face tokenizer directory") from None
    if len(tokenizer) > cfg.vocab_size:
        raise ConfigError("--vocab-size", cfg.vocab_size, f"smaller than the tokenizer's "
                          f"{len(tokenizer)} tokens ({flag})", f"at least {len(tokenizer)}")
    if tokenizer.eos_token_id is None:
        raise ConfigError(flag, cfg.tokenizer_path or cfg.hf_checkpoint,
                          "the tokenizer has no end-of-sequence token", "a tokenizer with eos")
    files = [("--prompt-data", cfg.prompt_data)]
    files += [("--eval-prompt-data", path) for path in (cfg.eval_prompt_data or [])[1::2]]
    for data_flag, path in files:
        try:
            load_records(path, cfg.input_key, cfg.label_key)
        except PromptDataError as err:
            raise ConfigError(data_flag, path, str(err), "records with --input-key "
                              f"{cfg.input_key!r} and --label-key {cfg.label_key!r}") from None


def _read_hf_weights(hf_dir: str) -> dict[str, torch.Tensor]:
    """A local Hugging Face Qwen3-MoE directory's weights, in float32, under HF names."""
    from transformers import Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).state_dict()


def _check_hf_architecture(flag: str, hf_dir: str, cfg: RunConfig) -> None:
    import json

    hf_config = json.loads((Path(hf_dir) / "config.json").read_text())
    problems = Qwen3MoeArch.from_flags(cfg).mismatches(hf_config)
    if problems:
        raise ConfigError(flag, hf_dir, "the checkpoint's architecture differs from the model "
                          "flags (" + "; ".join(problems) + ")",
                          "a checkpoint of the same architecture")


def _preflight_sglang(cfg: RunConfig) -> None:
    """SGLang needs CUDA and the sglang package (unless attached to a router); pass-through
    --sglang-* flags must be flags of the installed sglang.launch_server."""
    import importlib.util
    import shlex

    from hyrl.rollout.sglang.server import check_not_managed

    try:
        check_not_managed(shlex.split(cfg.sglang_server_args or ""))
    except ValueError as err:
        raise ConfigError("--sglang-server-args", cfg.sglang_server_args, str(err),
                          "flags hyrl does not set itself") from None
    if cfg.sglang_router_url is not None:
        return  # the servers run elsewhere; nothing of SGLang is needed here
    if not torch.cuda.is_available():
        raise ConfigError("--rollout-engine", "sglang", "SGLang engines need CUDA GPUs and this "
                          "machine has none", "hf on a machine without CUDA, or "
                          "--sglang-router-url to attach to servers running elsewhere")
    if importlib.util.find_spec("sglang") is None:
        raise ConfigError("--rollout-engine", "sglang", "the sglang package is not installed",
                          "pip install -r requirements.txt (sglang==0.5.23), or hf")
    if cfg.sglang_server_args:
        import dataclasses

        from sglang.srt.server_args import ServerArgs

        known = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(ServerArgs)}
        for token in shlex.split(cfg.sglang_server_args):
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and flag not in known:
                raise ConfigError("--sglang-server-args", cfg.sglang_server_args,
                                  f"{flag} is not a flag of the installed sglang.launch_server",
                                  "flags listed by python -m sglang.launch_server --help")


def train(cfg: RunConfig, world_size: int) -> Path:
    from hyrl.backends.megatron.model import destroy_distributed

    trainer = None
    try:
        trainer = Trainer(cfg, world_size)
        trainer.run()
    except TrainingStopped as err:
        if _dist().is_initialized() and _dist().get_rank() == 0:
            print(f"hyrl train: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        if trainer is not None:
            trainer.close()
        destroy_distributed()
    return Path(cfg.run_dir)



if __name__ == "__main__":  # python -m hyrl.train FLAGS (what launch/*.sh run on every rank)
    import sys

    from hyrl.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
