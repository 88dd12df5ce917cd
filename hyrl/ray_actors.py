"""What the Ray actor pools (hyrl.rewards.pool, hyrl.rollout.fleet) share: error text, the
actor class Ray never restarts, and the slot that replaces a dead actor in its place."""

from __future__ import annotations

import functools
import time
from typing import Any


def describe(exc: BaseException, max_chars: int) -> str:
    """ "ExcType: message" on one line, the message cut to max_chars."""
    text = " ".join(str(exc).split())
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.cache
def remote_class(cls: type):
    """`cls` as a Ray actor class that Ray never restarts or retries: the pools replace dead
    actors themselves (a fresh actor, the newest state). Built on first use, so importing
    a pool does not import Ray."""
    import ray

    return ray.remote(max_restarts=0, max_task_retries=0)(cls)


class ActorSlot:
    """One position of an actor pool, holding at most one actor of `actor_cls`, built with the
    same `options` and constructor `args` each time. A pool replaces a dead or hung actor with
    `replace` (counted in `restarts`); what the pool does with the fresh actor (its first call,
    its bookkeeping) stays the pool's. Subclasses add that bookkeeping and reset it in `kill`."""

    def __init__(
        self, index: int, actor_cls: type, options: dict, args: tuple, startup_timeout_s: float
    ):
        self.index = index
        self.actor: Any = None  # a Ray actor handle (Ray's handles carry no method types)
        self.start_deadline = 0.0  # time.monotonic() by which the current actor must be up
        self.restarts = 0  # replacements of this slot's actor, over the pool's life
        self._actor_cls, self._options, self._args = actor_cls, dict(options), tuple(args)
        self._startup_timeout_s = startup_timeout_s

    def start(self):
        """A new actor in the slot (its constructor runs in the background); returns it."""
        self.actor = remote_class(self._actor_cls).options(**self._options).remote(*self._args)
        self.start_deadline = time.monotonic() + self._startup_timeout_s
        return self.actor

    def kill(self) -> None:
        """Kill the slot's actor, if any (one already gone is fine); the slot is then empty."""
        import ray

        if self.actor is not None:
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actor = None

    def replace(self):
        """Kill the actor and start a fresh one in its place; returns the new actor."""
        self.kill()
        self.restarts += 1
        return self.start()
