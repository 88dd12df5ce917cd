"""What the Ray actor pools (hyrl.rewards.pool, hyrl.rollout.fleet) share."""

from __future__ import annotations

import functools


def describe(exc: BaseException, max_chars: int) -> str:
    """"ExcType: message" on one line, the message cut to max_chars."""
    text = " ".join(str(exc).split())
    if len(text) > max_chars:
        text = text[:max_chars - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.cache
def remote_class(cls: type):
    """`cls` as a Ray actor class that Ray never restarts or retries: the pools replace dead
    actors themselves (a fresh actor, the newest state). Built on first use, so importing
    a pool does not import Ray."""
    import ray

    return ray.remote(max_restarts=0, max_task_retries=0)(cls)
