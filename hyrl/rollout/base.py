"""The rollout interface: what an engine is asked for and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 decodes greedily
    top_p: float = 1.0


@dataclass
class Generation:
    """One response. Log-probs are the engine's, under softmax(logits / temperature)."""

    prompt_ids: list[int]
    response_ids: list[int]  # includes the stop token when finish_reason == "stop"
    response_log_probs: list[float]
    finish_reason: str  # "stop" (end-of-sequence token) or "length" (hit max_new_tokens)
    # --use-routing-replay: the top-k expert ids (global) the engine routed each token to,
    # int32 [tokens, MoE layers, top-k]. Row i is the token at sequence position i of
    # prompt + response; an engine returns every token that went through the model, i.e.
    # len(prompt) + len(response) - 1 rows (the last sampled token is never fed back). Fewer
    # rows are the LAST positions of that range (the earlier ones are routed by the trainer).
    routed_experts: torch.Tensor | None = None


@dataclass
class Sample:
    """A generation with what the loop attaches to it: its prompt group, label and reward."""

    group_index: int  # prompts are repeated G times; responses of one prompt share it
    label: str
    generation: Generation
    response_text: str = ""
    reward: float = 0.0
    extra: dict = field(default_factory=dict)


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One response per prompt, in order; at most the engine's concurrency at once."""
        ...

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        """Load the actor's newest weights (HF names) before the next rollout."""
        ...
