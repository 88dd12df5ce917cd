"""Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476, section 3.2): a prompt group whose G
rewards are all equal has zero group-relative advantage, so it adds no gradient and only dilutes
the batch. Such groups are dropped and more prompts generated until P groups with a signal are
collected, which changes what a batch costs: `samples` stays the responses the update consumed,
`samples_generated` counts every response decoded (hyrl.train.trainer records both)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

FLAG = "--dynamic-sampling-filter-path"
SIGNATURE = "f(rewards, finish_reasons) -> bool (True keeps the group)"

GroupFilter = Callable[[list[float], list[str]], bool]


def has_signal(rewards: Sequence[float], finish_reasons: Sequence[str] = ()) -> bool:
    """DAPO's filter: keep a group unless its rewards are all equal (their std is 0)."""
    return len(set(rewards)) > 1


def load_group_filter(path: str | None) -> GroupFilter:
    """--dynamic-sampling-filter-path module:function, or has_signal without one."""
    if path is None:
        return has_signal
    from hyrl.rewards.custom import load_custom_reward

    return load_custom_reward(path, flag=FLAG, signature=SIGNATURE)  # type: ignore[return-value]


@dataclass(frozen=True)
class DynamicSampling:
    """One rollout step's account: which generated groups it trains on (indices in generation
    order) and what it took to find them."""

    groups: list[int]  # P of them: the first useful ones, then filtered ones when short
    rounds: int  # generation rounds of P prompts
    generated_groups: int  # every group decoded this step
    filtered_groups: int  # of which the filter dropped (some may fill a short step)
    filled_groups: int  # filtered groups trained on because the rounds ran out
    responses_generated: int  # generated_groups x G
    reward_mean_generated: float  # over every response decoded, the policy's own reward

    @classmethod
    def of(cls, keep: Sequence[bool], needed: int, rounds: int, rewards: Sequence[float]):
        """The first `needed` groups the filter kept, in generation order; when fewer were
        kept, the earliest filtered groups fill the rest (with a zero advantage they add no
        gradient, and the step keeps its shape: P x G rows for the data-parallel split)."""
        kept = [i for i, k in enumerate(keep) if k]
        dropped = [i for i, k in enumerate(keep) if not k]
        filled = max(0, needed - len(kept))
        if filled > len(dropped):
            raise ValueError(f"{len(keep)} groups generated, fewer than the {needed} needed")
        return cls(
            groups=sorted(kept[:needed] + dropped[:filled]),
            rounds=rounds,
            generated_groups=len(keep),
            filtered_groups=len(dropped),
            filled_groups=filled,
            responses_generated=len(rewards),
            reward_mean_generated=sum(rewards) / len(rewards),
        )

    def metrics(self) -> dict[str, float]:
        return {
            "train/filtered_groups_frac": self.filtered_groups / self.generated_groups,
            "train/dynamic_sampling_rounds": self.rounds,
            "train/dynamic_sampling_filled_groups": self.filled_groups,
            "train/reward_mean_generated": self.reward_mean_generated,
        }
