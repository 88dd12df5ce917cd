"""What the RL loop needs from the trainer, whatever trains it: `TrainBackend` (the ranks,
their collectives, the models' state) and `TrainedModel` (the actor and the critic). The
loop (hyrl.train.trainer) talks only to these; hyrl.backends.megatron implements them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import torch

from hyrl.algorithms.batch import TokenBatch
from hyrl.models.weight_buckets import LiveBytes, NamedTensors


class TrainedModel(Protocol):
    """The actor or the critic: its no-grad passes, its optimizer steps, its memory."""

    metric_prefix: str  # "actor" or "critic": the metrics' prefix and the name in messages
    optimizer_steps: int
    skipped_steps: int  # updates skipped for a non-finite loss or gradient norm, in all
    consecutive_skips: int  # ... and in a row up to the latest step

    def train_step(self, batch: TokenBatch, total_tokens: float, lr: float) -> dict[str, float]:
        """One optimizer step over this rank's rows of the global batch (collective)."""
        ...

    def offload_training_state(self) -> int:
        """Free the gradients, optimizer states and frozen copies; the bytes freed."""
        ...

    def offload_weights(self) -> int:
        """Free the weights (after they were synced to the engines); the bytes freed."""
        ...

    def restore_offloaded(self) -> None:
        """Take back whatever the two offloads freed."""
        ...


class TrainedActor(TrainedModel, Protocol):
    ref_chunks: Any  # the frozen reference (KL): its chunks on this rank; None without one

    def log_probs(
        self, batch: TokenBatch, reference: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs and entropies [n, L] of the policy (or the reference)."""
        ...

    def train_step_on_policy(
        self,
        batch: TokenBatch,
        total_tokens: float,
        lr: float,
        pg_weights_of: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor | None]
        | None = None,
    ) -> tuple[dict[str, float], tuple[torch.Tensor, torch.Tensor]]:
        """train_step on an exactly on-policy batch whose old log-probs are the step's own first
        forward pass (detached); pg_weights_of(old, rollout, mask) gives the importance weights.
        Returns (metrics, (old log-probs, entropies) [n, L] of this rank's rows) (collective)."""
        ...

    def routing_metrics(self) -> dict[str, float]:
        """routing/* of the latest log-prob pass against the engine's routing (collective)."""
        ...

    def hf_weight_buckets(
        self,
        buffer_bytes: int,
        keep: bool | Callable[[int], bool] = True,
        live: LiveBytes | None = None,
    ) -> Iterator[NamedTensors]:
        """The actor's weights under Hugging Face names in buckets of about buffer_bytes
        (collective: every rank iterates them; keep says which buckets this rank holds)."""
        ...


class TrainedCritic(TrainedModel, Protocol):
    def values(self, batch: TokenBatch) -> torch.Tensor:
        """The value of every position [n, L]."""
        ...


class TrainBackend(Protocol):
    """The trainer ranks: who this one is, the models, the collectives the loop uses."""

    rank: int  # global
    world_size: int
    dp_rank: int
    dp_size: int
    dp_rank_of: list[int]  # every rank's DP rank, by global rank (when routing ids are sent)

    @property
    def actor(self) -> TrainedActor: ...

    @property
    def critic(self) -> TrainedCritic | None:
        """None without a value model (GRPO)."""
        ...

    def describe(self) -> str:
        """One line for the log: ranks, device, parallel layout, the layer implementation."""
        ...

    def initial_model(self) -> str:
        """What the actor's initial weights depend on (a checkpoint, or the seed and whether
        the layout): config.json records it."""
        ...

    def device(self) -> torch.device:
        """Where this rank computes (and an in-process engine generates)."""
        ...

    def gather_rows(self, outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Every DP rank's share of a no-grad pass, concatenated in DP order (collective)."""
        ...

    def wait_for_rank_0(self) -> None:
        """Every rank waits until rank 0 arrives, however long it works alone (collective)."""
        ...

    def broadcast_from_rank_0(self, payload: Any) -> Any:
        """Rank 0's payload (any picklable object) on every rank (collective)."""
        ...

    def any_rank(self, flag: bool) -> bool:
        """Whether the flag is set on any rank (collective)."""
        ...

    def all_gather_object(self, value: Any) -> list:
        """Every rank's value, by global rank (collective)."""
        ...

    def gather_to_rank_0(self, value: Any) -> list | None:
        """Every rank's value, by global rank, on rank 0; None elsewhere (collective)."""
        ...

    def send_rows(self, rows_of_rank: dict[int, dict[int, torch.Tensor]]) -> None:
        """This rank sends each rank in rows_of_rank its {row: tensor} (point to point)."""
        ...

    def recv_rows(self, source: int = 0) -> dict[int, torch.Tensor]:
        """This rank's {row: tensor} from `source`'s send_rows."""
        ...

    def free_cached_memory(self) -> None:
        """Hand the allocator's freed blocks back to the driver (engines take them next)."""
        ...

    def load_checkpoint(self, step_dir: Path) -> Any:
        """Weights, optimizer states and counters of a checkpoint; the RNG state this rank
        restores, or None (a rank that no saved state belongs to, e.g. under another layout)."""
        ...

    def load_weights(self, step_dir: Path) -> Any:
        """Only the actor's weights of a checkpoint (an evaluation); on rank 0 the RNG state
        the checkpoint's rank 0 saved, None on the others."""
        ...

    def save_checkpoint(self, save_dir: str, rollout_step: int, loop_state: dict) -> Path:
        """A checkpoint of the models and the loop state (collective); its directory."""
        ...

    def set_rng_state(self, rng_state: Any) -> None:
        """Restore the generators a checkpoint saved."""
        ...
