"""The rollout interface: what an engine is asked for and what it returns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from hyrl.algorithms.batch import TokenBatch, pack
from hyrl.algorithms.dynamic_sampling import DynamicSampling
from hyrl.models.weight_buckets import NamedTensors


class GenerationProgress:
    """Responses generated of the engine call in progress in this process, for the heartbeat of
    a job's log. The rollout manager opens a count around each engine call (`counting`), and
    whoever in this process sees responses finish adds them: the SGLang client per answer, the
    hf engine per chunk, the Ray fleet per chunk an engine returns (an engine actor's own
    count stays in its process). Thread-safe; `snapshot` is (done, total) or None between
    calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._total: int | None = None

    def counting(self, total: int):
        progress = self

        class _Open:
            def __enter__(self) -> None:
                with progress._lock:
                    progress._done, progress._total = 0, total

            def __exit__(self, *exc) -> None:
                with progress._lock:
                    progress._total = None

        return _Open()

    def add(self, responses: int) -> None:
        with self._lock:
            if self._total is not None:
                self._done = min(self._done + responses, self._total)

    def snapshot(self) -> tuple[int, int] | None:
        with self._lock:
            return None if self._total is None else (self._done, self._total)


# the one count of this process (rollout and evaluation calls do not overlap: the engine lock)
GENERATION_PROGRESS = GenerationProgress()


class EngineDied(RuntimeError):
    """An engine whose backing process is gone (its SGLang server exited, or stopped answering
    its health check) although the engine's own process lives on: the fleet replaces it as it
    replaces an engine whose actor died (hyrl.rollout.fleet)."""


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 decodes greedily
    top_p: float = 1.0
    # this call's stop tokens besides the engine's end-of-sequence ids (a turn that ends at a
    # tool call's closing token); kept as the response's last token, like an end-of-sequence
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Generation:
    """One response. Log-probs are the engine's, under softmax(logits / temperature)."""

    prompt_ids: list[int]
    response_ids: list[int]  # includes the stop token when finish_reason == "stop"
    response_log_probs: list[float]
    # "stop" (an end-of-sequence token or one of the call's stop_token_ids, the response's last
    # token) or "length" (hit max_new_tokens)
    finish_reason: str
    # --use-rollout-routing-replay: the top-k expert ids (global) the engine routed each token to,
    # int32 [tokens, MoE layers, top-k]. Row i is the token at sequence position i of
    # prompt + response; an engine returns every token that went through the model, i.e.
    # len(prompt) + len(response) - 1 rows (the last sampled token is never fed back). Fewer
    # rows are the LAST positions of that range (the earlier ones are routed by the trainer).
    routed_experts: torch.Tensor | None = None
    # --async-rollout: the policy version (weight syncs) that sampled each response token, set
    # by the rollout manager; tokens of one response differ only under --inflight-weight-updates
    response_versions: list[int] | None = None
    # per response token: 1 where the model sampled it, 0 where an environment wrote it (a tool's
    # output in a multi-turn trajectory: not trained on; its log-prob entry is a placeholder);
    # None: the model sampled every token (a single turn)
    response_sampled: list[int] | None = None


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One response per prompt, in order; at most the engine's concurrency at once."""
        ...

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        """Load the actor's newest weights (HF names) before the next rollout."""
        ...

    def update_weights_stream(self, buckets: Iterable[NamedTensors]) -> None:
        """Load the actor's newest weights as they arrive: buckets of (HF checkpoint-layout name,
        tensor) that together hold every weight once. A bucket is the caller's until the engine
        asks for the next one, so an engine must be done with it (sent, copied) by then and
        keep no reference; the weights take effect when the last bucket is in."""
        ...

    def release_memory(self) -> None:
        """--colocate: free the GPU memory (weights, KV cache) for training; a no-op for an
        engine that holds none to give."""
        ...

    def resume_memory(self) -> None:
        """Retake the memory release_memory freed (the weights come with the next sync)."""
        ...

    def close(self) -> None:
        """Stop the engine (servers, Ray actors); a no-op for an in-process one."""
        ...

    def sync_metrics(self) -> dict[str, float]:
        """The engine's own account after a weight sync, as metrics.jsonl keys: deaths and
        resubmitted prompts so far (engines on Ray), transfer time, bytes and buckets of the
        latest sync (SGLang); {} for an engine with nothing of its own to report."""
        ...


@dataclass
class RolloutBatch:
    """One rollout step's responses as every trainer rank receives them from rank 0 (engine
    output and rewards), row i the i-th response; what the algorithm packs into a TokenBatch."""

    prompts: list[list[int]]
    responses: list[list[int]]
    rollout_log_probs: list[list[float]]  # the engine's, per response token
    finish_reasons: list[str]
    rewards: list[float]
    reward_failures: int  # rewards that raised (scored 0)
    reward_timeouts: int
    # --use-rollout-routing-replay / --measure-routing-mismatch: each row's expert ids where this
    # rank works on the row, None elsewhere (set on every rank after the broadcast); None without.
    routed_experts: list | None = None
    # --dynamic-sampling: the groups kept and what the rounds generated; None without
    dynamic_sampling: DynamicSampling | None = None
    # --async-rollout: the policy version that sampled each response token (Generation's);
    # None in a synchronous run and in checkpoints written before partial rollouts
    response_versions: list[list[int]] | None = None
    # per response token, 1 where the model sampled it and 0 where an environment wrote it
    # (Generation.response_sampled); None when the model sampled every token of every row
    sampled: list[list[int]] | None = None

    @classmethod
    def of(cls, generations: list[Generation], scored) -> RolloutBatch:
        """The batch of the engine's generations and the reward pool's scores of them."""
        stamped = [g.response_versions for g in generations if g.response_versions is not None]
        written = any(g.response_sampled is not None for g in generations)
        return cls(
            prompts=[g.prompt_ids for g in generations],
            responses=[g.response_ids for g in generations],
            rollout_log_probs=[g.response_log_probs for g in generations],
            finish_reasons=[g.finish_reason for g in generations],
            rewards=scored.rewards,
            reward_failures=scored.failures,
            reward_timeouts=scored.timeouts,
            response_versions=stamped if len(stamped) == len(generations) else None,
            sampled=[
                [1] * len(g.response_ids) if g.response_sampled is None else g.response_sampled
                for g in generations
            ]
            if written
            else None,
        )

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def responses_generated(self) -> int:
        """Every response decoded for this step (filtered ones too, --dynamic-sampling)."""
        return (
            len(self)
            if self.dynamic_sampling is None
            else self.dynamic_sampling.responses_generated
        )

    def rewards_tensor(self) -> torch.Tensor:
        """The rewards as the algorithms take them: [N] float32."""
        return torch.tensor(self.rewards, dtype=torch.float32)

    def to_token_batch(self, pad_to_multiple_of: int) -> TokenBatch:
        """The rows right-padded into a TokenBatch; its advantages are filled in later."""
        return pack(
            self.prompts,
            self.responses,
            torch.zeros(len(self)),
            pad_id=0,
            pad_to_multiple_of=pad_to_multiple_of,
            rollout_log_probs=self.rollout_log_probs,
            routed_experts=self.routed_experts,
            sampled=self.sampled,
        )

    @property
    def model_lengths(self) -> list[int]:
        """Per row, the response tokens the model sampled, an environment's not counted: what
        over-long shaping, the response lengths and the rollout's tokens per second count."""
        if self.sampled is None:
            return [len(response) for response in self.responses]
        return [sum(marks) for marks in self.sampled]

    def metrics(self, rollout_s: float) -> dict:
        """train/* statistics of the responses (their lengths count the model's tokens only);
        rollout_s: the generation's seconds."""
        rewards = torch.tensor(self.rewards, dtype=torch.float64)
        lengths = torch.tensor(self.model_lengths, dtype=torch.float64)
        return {
            "train/reward_mean": float(rewards.mean()),
            "train/response_len_mean": float(lengths.mean()),
            "train/stop_frac": sum(f == "stop" for f in self.finish_reasons) / len(rewards),
            # cut at --rollout-max-response-len (the rewards score them as not finished)
            "train/truncated_frac": sum(f == "length" for f in self.finish_reasons) / len(rewards),
            "train/reward_failures": self.reward_failures,
            "train/reward_timeouts": self.reward_timeouts,
            "perf/rollout_tokens_per_s": float(lengths.sum()) / rollout_s if rollout_s > 0 else 0.0,
            **({} if self.dynamic_sampling is None else self.dynamic_sampling.metrics()),
        }


@dataclass(frozen=True)
class DiskCheckpoint:
    """A safetensors checkpoint (shards + index) the trainer ranks wrote for the engines."""

    directory: str
    tensor_bytes: int
    shards: int


class BucketEngine(RolloutEngine, Protocol):
    """A RolloutEngine that takes a weight stream one bucket per call (a ``BucketReceiver``):
    what an engine on Ray is, since the fleet drives it through these three calls."""

    def begin_weight_update(self) -> None: ...

    def load_weight_bucket(self, bucket: NamedTensors) -> None: ...

    def end_weight_update(self, succeeded: bool = True) -> None: ...


class DiskLoader(Protocol):
    """An engine that loads a checkpoint the trainer ranks wrote (``weight_sync='disk'``)."""

    def load_weights_from_disk(self, checkpoint: DiskCheckpoint) -> None: ...


class CudaIpcReceiver(Protocol):
    """Takes each bucket as the payloads every training rank made of its own copy on its GPU
    (CUDA IPC handles; --colocate, ``weight_sync='tensor'``), handed over on rank 0:
    ``begin_ipc_update`` (``serializer``: what every rank encodes with, which says what the
    payloads are), ``load_ipc_payloads`` per bucket (``payloads[rank]``; returns once the
    engines have copied the bucket), ``end_ipc_update(succeeded)`` (always called)."""

    def begin_ipc_update(self, serializer: Callable[[NamedTensors], str]) -> None: ...

    def load_ipc_payloads(self, payloads: Sequence[str], num_bytes: int) -> None: ...

    def end_ipc_update(self, succeeded: bool = True) -> None: ...


class CudaIpcEngine(RolloutEngine, CudaIpcReceiver, Protocol):
    """A RolloutEngine fed by CUDA IPC from the training ranks on its GPUs."""

    def prepare_ipc_sync(self, rank_devices: Sequence[tuple[str, int]]) -> None:
        """Before each sync: which training rank sits on each of the engines' GPUs
        (``rank_devices``: every training rank's (host, physical GPU), by rank); raises when an
        engine GPU has no training rank."""
        ...


class BucketReceiver:
    """What an engine implements to take a weight stream: ``begin_weight_update``,
    ``load_weight_bucket`` per bucket, ``end_weight_update(succeeded)`` (always called, also
    after a failure: an SGLang server must not stay paused). Engines on Ray are driven through
    these three calls one bucket at a time (``fleet.py``); in-process ones by the stream."""

    def begin_weight_update(self) -> None:
        raise NotImplementedError

    def load_weight_bucket(self, bucket: NamedTensors) -> None:
        raise NotImplementedError

    def end_weight_update(self, succeeded: bool = True) -> None:
        raise NotImplementedError

    def update_weights_stream(self, buckets: Iterable[NamedTensors]) -> None:
        self.begin_weight_update()
        succeeded = False
        try:
            for bucket in buckets:
                self.load_weight_bucket(bucket)
                del bucket  # the producer frees it when it builds the next one
            succeeded = True
        finally:
            self.end_weight_update(succeeded)
