"""Your own reward function, named on the command line as --custom-rm-path module:function.

The contract:

* ``function(response_text: str, label: str, finish_reason: str) -> float``: the decoded response
  (special tokens removed), the record's label as text (numbers converted with str(), list/dict
  labels as JSON text), and "stop" (ended with eos) or "length" (cut by
  --rollout-max-response-len). It may be a function or any callable object, e.g. an instance
  made at module level (not a class: calling a class makes an instance, not a float).
* It returns a float (or anything float() accepts); a non-finite value counts as a failure.
* Any exception it raises scores that response 0.0 and counts in train/reward_failures (the
  first few messages go to the log); the run goes on. Reward workers kill a call that runs past
  the pool's timeout (also 0.0, a failure and a timeout).
* ``module`` must be importable by the reward workers, which are separate Ray processes: put its
  folder on PYTHONPATH (or install it) before starting the run, not only on sys.path of the
  trainer. The module is imported once per worker, so keep import-time work light.
"""

from __future__ import annotations

import importlib
import traceback

from hyrl.rewards.base import RewardFn

FLAG = "--custom-rm-path"


class CustomRewardError(ValueError):
    """--custom-rm-path does not name a usable reward function."""


def load_custom_reward(path: str, flag: str = FLAG, signature: str = "") -> RewardFn:
    """Import `module` and return its `function` from "module:function" (module may be dotted);
    errors name `flag` (--custom-rm-path, or another flag taking a function) and `signature`."""
    signature = signature or "f(response_text, label, finish_reason) -> float"
    module_name, sep, attribute = path.partition(":")
    module_name, attribute = module_name.strip(), attribute.strip()
    if not (sep and module_name and attribute) or ":" in attribute:
        raise CustomRewardError(
            f"{flag} {path!r} is not module:function "
            f"(e.g. my_rewards:score, or package.module:score)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError or whatever the module raises on import
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise CustomRewardError(
            f"{flag} {path!r}: cannot import module {module_name!r}: {detail} "
            f"(is its folder on PYTHONPATH?)"
        ) from exc
    fn = module
    for part in attribute.split("."):  # "module:Class.method" or "module:instance" both work
        if not hasattr(fn, part):
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            raise CustomRewardError(
                f"{flag} {path!r}: module {module_name!r} "
                f"({getattr(module, '__file__', None)}) has no attribute "
                f"{attribute!r}; it defines {public[:20]}"
            )
        fn = getattr(fn, part)
    if not callable(fn):
        raise CustomRewardError(
            f"{flag} {path!r}: {attribute!r} is a {type(fn).__name__}, "
            f"not callable; it must be {signature}"
        )
    return fn
