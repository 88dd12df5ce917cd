"""The RL loop. Every rank runs `Trainer.run`; rank 0 also owns the rollout engine and the task.

One rollout step:  prompts -> responses (engine) -> rewards -> advantages -> old log-probs
                   -> optimizer steps (global batch B each, split over DP ranks and micro-batches)
                   -> weight sync to the engine.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import torch

from hyrl import schedules
from hyrl.algorithms.batch import TokenBatch, pack
from hyrl.algorithms.grpo import group_advantages
from hyrl.config import ConfigError, RunConfig
from hyrl.metrics.run_dir import RunDirectory, start_wandb
from hyrl.metrics.timers import StageTimers
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.rollout.base import SamplingParams


def _dist():
    return torch.distributed


class Trainer:
    def __init__(self, cfg: RunConfig, world_size: int):
        from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
        from hyrl.backends.megatron.model import ParallelLayout, init_distributed

        self.cfg, self.world_size = cfg, world_size
        setup_start = time.perf_counter()
        layout = ParallelLayout.from_flags(cfg)
        init_distributed(layout, seed=cfg.seed)
        from megatron.core import parallel_state

        self.rank = _dist().get_rank()
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.dp_size = parallel_state.get_data_parallel_world_size()
        self.pad_multiple = cfg.tensor_model_parallel_size  # sequence parallel splits the sequence

        torch.manual_seed(cfg.seed)  # identical full weights on every rank before sharding
        self.arch = Qwen3MoeArch.from_flags(cfg)
        self.actor = MegatronActor(self.arch, layout, ActorSettings.from_flags(cfg))

        self.run_dir = Path(cfg.run_dir)
        self.logger = None
        if self.rank == 0:
            self._print_layout()
            self._setup_rollout_side()
            config = cfg.to_dict(world_size)
            wandb_run = start_wandb(cfg.wandb_project, self.run_dir, config) if cfg.log_wandb else None
            self.logger = RunDirectory(self.run_dir, wandb_run)
            self.logger.write_config(config)
        self._sync_weights()
        self.setup_s = time.perf_counter() - setup_start
        self.total_optimizer_steps = cfg.num_steps * cfg.optimizer_steps_per_rollout

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
        from hyrl.data.arith import ArithTask
        from hyrl.data.tokenizer import build_tokenizer
        from hyrl.rewards.exact_match import ExactMatchReward
        from hyrl.rollout.hf_engine import HFRolloutEngine

        cfg = self.cfg
        self.tokenizer = build_tokenizer()
        self.task = ArithTask(self.tokenizer, max_operand=cfg.task_max_operand, seed=cfg.seed)
        self.reward_fn = ExactMatchReward()
        self.engine = HFRolloutEngine(
            self.arch, concurrency=cfg.rollout_concurrency, pad_id=self.tokenizer.pad_token_id,
            eos_id=self.tokenizer.eos_token_id, device=cpu_compat.device())
        self.sampling = SamplingParams(max_new_tokens=cfg.rollout_max_response_len,
                                       temperature=cfg.rollout_temperature, top_p=cfg.rollout_top_p)

    # -- stages -----------------------------------------------------------------------------
    def _sync_weights(self) -> None:
        hf_state = self.actor.export_hf_state_dict()  # collective over TP and EP
        if self.rank == 0:
            self.engine.update_weights(hf_state)

    def _rollout(self, timers: StageTimers) -> dict:
        """Rank 0 generates and scores; the result is broadcast to every rank."""
        payload = [None]
        if self.rank == 0:
            cfg = self.cfg
            with timers("rollout"):
                prompts = self.task.next_batch(cfg.rollout_batch_size)
                repeated = [p for p in prompts for _ in range(cfg.n_samples_per_prompt)]
                generations = self.engine.generate([p.prompt_ids for p in repeated], self.sampling)
            with timers("reward"):
                texts = [self.tokenizer.decode(g.response_ids, skip_special_tokens=True)
                         for g in generations]
                rewards = self.reward_fn.score_batch(
                    texts, [p.label for p in repeated], [g.finish_reason for g in generations])
            payload = [{
                "prompts": [g.prompt_ids for g in generations],
                "responses": [g.response_ids for g in generations],
                "rollout_log_probs": [g.response_log_probs for g in generations],
                "finish_reasons": [g.finish_reason for g in generations],
                "rewards": rewards,
            }]
        if self.world_size > 1:
            _dist().broadcast_object_list(payload, src=0)
        return payload[0]

    def _local_rows(self, step_in_rollout: int) -> slice:
        """This DP rank's rows of optimizer step k within the rollout batch."""
        per_rank = self.cfg.global_batch_size // self.dp_size
        start = step_in_rollout * self.cfg.global_batch_size + self.dp_rank * per_rank
        return slice(start, start + per_rank)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        timers = StageTimers()
        samples = 0
        optimizer_step = 0
        start = time.perf_counter()
        last_record_time = start
        progress = self._progress() if self.rank == 0 and cfg.progress else nullcontext()
        with progress as bar:
            task_id = bar.add_task("training", total=cfg.num_steps) if bar else None
            for rollout_step in range(1, cfg.num_steps + 1):
                rollout = self._rollout(timers)
                rewards = torch.tensor(rollout["rewards"], dtype=torch.float32)
                advantages = group_advantages(rewards, cfg.n_samples_per_prompt,
                                              normalize_std=cfg.grpo_std_normalization)
                batch = pack(rollout["prompts"], rollout["responses"], advantages,
                             pad_id=0, pad_to_multiple_of=self.pad_multiple)
                with timers("logprob"):
                    local = self._with_log_probs(batch)
                rollout_metrics = self._rollout_metrics(rollout, local, timers)
                steps = cfg.optimizer_steps_per_rollout
                for k in range(steps):
                    rows = self._local_rows(k)
                    global_rows = slice(k * cfg.global_batch_size, (k + 1) * cfg.global_batch_size)
                    lr = schedules.lr_at(optimizer_step, lr=cfg.lr, min_lr=cfg.min_lr,
                                         warmup_steps=cfg.lr_warmup_steps,
                                         decay_style=cfg.lr_decay_style,
                                         total_steps=self.total_optimizer_steps)
                    with timers("actor_train"):
                        train_metrics = self.actor.train_step(
                            local["batches"].select(rows), batch.loss_mask[global_rows].sum().item(), lr)
                    optimizer_step += 1
                    samples += cfg.global_batch_size
                    if k == steps - 1:
                        with timers("weight_sync"):
                            self._sync_weights()
                    now = time.perf_counter()
                    record = {"step": optimizer_step, "rollout_step": rollout_step,
                              "samples": samples, "elapsed_s": now - start}
                    if optimizer_step == 1:
                        record["perf/setup_s"] = self.setup_s
                    if k == 0:
                        record.update(rollout_metrics)
                    record.update(train_metrics)
                    record["train/loss"] = train_metrics["actor/loss"]
                    record.update(timers.pop())
                    record["perf/step_s"] = now - last_record_time
                    last_record_time = now
                    if self.logger is not None:
                        self.logger.log(record)
                if bar:
                    bar.update(task_id, advance=1,
                               description=f"reward {rollout_metrics['train/reward_mean']:.2f}")
        if self.logger is not None:
            self.logger.close()

    def _with_log_probs(self, batch: TokenBatch) -> dict:
        """Old (and reference) log-probs for this rank's rows of every optimizer step."""
        steps = self.cfg.optimizer_steps_per_rollout
        index = torch.cat([torch.arange(len(batch))[self._local_rows(k)] for k in range(steps)])
        local = batch.select(index)
        local.old_log_probs, entropy = self.actor.log_probs(local)
        if self.actor.ref_model is not None:
            local.ref_log_probs, _ = self.actor.log_probs(local, reference=True)
        # Reassemble so that `_local_rows(k)` indexes the local tensors as it indexes the batch.
        full = batch.select(slice(None))
        full.old_log_probs = torch.zeros_like(batch.loss_mask)
        full.old_log_probs[index] = local.old_log_probs
        if local.ref_log_probs is not None:
            full.ref_log_probs = torch.zeros_like(batch.loss_mask)
            full.ref_log_probs[index] = local.ref_log_probs
        mask = local.loss_mask
        entropy_sum = torch.tensor([(entropy * mask).sum().item(), mask.sum().item()], dtype=torch.float64)
        if self.dp_size > 1:
            from megatron.core import parallel_state

            _dist().all_reduce(entropy_sum, group=parallel_state.get_data_parallel_group())
        return {"batches": full, "entropy_mean": float(entropy_sum[0] / entropy_sum[1].clamp(min=1))}

    def _rollout_metrics(self, rollout: dict, local: dict, timers: StageTimers) -> dict:
        rewards = torch.tensor(rollout["rewards"], dtype=torch.float64)
        lengths = torch.tensor([len(r) for r in rollout["responses"]], dtype=torch.float64)
        rollout_s = timers.seconds.get("rollout", 0.0)
        return {
            "train/reward_mean": float(rewards.mean()),
            "train/response_len_mean": float(lengths.mean()),
            "train/stop_frac": sum(f == "stop" for f in rollout["finish_reasons"]) / len(rewards),
            "train/entropy": local["entropy_mean"],
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
    if cfg.transformer_impl == "transformer_engine" and not transformer_engine_importable():
        raise ConfigError("--transformer-impl", "transformer_engine",
                          "transformer_engine does not import on this machine", "local or auto")


def train(cfg: RunConfig, world_size: int) -> Path:
    from hyrl.backends.megatron.model import destroy_distributed

    trainer = Trainer(cfg, world_size)
    try:
        trainer.run()
    finally:
        destroy_distributed()
    return Path(cfg.run_dir)



if __name__ == "__main__":  # python -m hyrl.train FLAGS (what launch/*.sh run on every rank)
    import sys

    from hyrl.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
