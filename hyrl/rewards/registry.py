"""From --rm-type / --custom-rm-path to the factory RewardPool builds each worker's reward with.

    factory = reward_factory("math", None)      # or reward_factory(None, "my_rewards:score")
    pool = RewardPool(factory, num_workers=4, timeout_s=10.0)

Built-in rewards (each module's docstring states its rules):

    exact_match  hyrl/rewards/exact_match.py  response.strip() == label, ended with eos
    math         hyrl/rewards/math.py         last \\boxed{} (else last number), math-verify
    mcq          hyrl/rewards/mcq.py          the one choice letter A-J committed to
    logic        hyrl/rewards/logic.py        last JSON object/list == label, normalised
    deepscaler   hyrl/rewards/deepscaler.py   last \\boxed{} after </think>, math-verify (slime's)
    dapo         hyrl/rewards/dapo.py         last "Answer:" line, math-verify (slime's)
    f1           hyrl/rewards/f1.py           SQuAD token F1, boxed answer else response (slime's)

slime's --rm-type names deepscaler, dapo and f1 work here; docs/recipes.md ("Reward functions")
says what each does differently from slime's.

Plugging in your own reward (the hook): write ``f(response_text, label, finish_reason) -> float``
in a module on PYTHONPATH and pass ``--custom-rm-path module:f`` instead of --rm-type; the
contract is in hyrl/rewards/custom.py. To make one a built-in instead, add its class to
BUILTIN_REWARDS below and its name to --rm-type's choices in hyrl/config/concerns/data.py.

The factory is a functools.partial of a module-level callable, never a lambda or closure, so it
pickles by reference and Ray ships it to workers that import hyrl.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from hyrl.rewards.base import RewardFn
from hyrl.rewards.custom import load_custom_reward
from hyrl.rewards.dapo import DAPOReward
from hyrl.rewards.deepscaler import DeepScaleRReward
from hyrl.rewards.exact_match import ExactMatchReward
from hyrl.rewards.f1 import F1Reward
from hyrl.rewards.logic import LogicReward
from hyrl.rewards.math import MathReward
from hyrl.rewards.mcq import MCQReward

BUILTIN_REWARDS: dict[str, type] = {
    "exact_match": ExactMatchReward,
    "math": MathReward,
    "mcq": MCQReward,
    "logic": LogicReward,
    "deepscaler": DeepScaleRReward,
    "dapo": DAPOReward,
    "f1": F1Reward,
}


def reward_factory(rm_type: str | None, custom_rm_path: str | None) -> Callable[[], RewardFn]:
    """A picklable zero-argument callable that builds the reward function.

    A custom path is imported here once, so a bad one fails at start-up, not in the workers.
    """
    if rm_type is not None and custom_rm_path is not None:
        raise ValueError(
            f"--rm-type {rm_type} and --custom-rm-path {custom_rm_path} were both "
            f"given; use one of them"
        )
    if custom_rm_path is not None:
        load_custom_reward(custom_rm_path)
        return functools.partial(load_custom_reward, custom_rm_path)
    if rm_type is None:
        raise ValueError(
            "no reward function: give --rm-type "
            f"({', '.join(BUILTIN_REWARDS)}) or --custom-rm-path module:function"
        )
    if rm_type not in BUILTIN_REWARDS:
        raise ValueError(f"--rm-type {rm_type!r} is not one of {', '.join(BUILTIN_REWARDS)}")
    return functools.partial(BUILTIN_REWARDS[rm_type])
