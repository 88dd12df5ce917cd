"""Megatron's checkpoint-writer helper process, started by hyrl so that it outlives a
preemption signal and dies with its rank.

megatron.core's torch_dist save (dist_checkpointing/strategies/filesystem_async.py) collects
its write results through a queue served by a multiprocessing Manager: a spawned process that
`_get_write_results_queue` starts at the first save and keeps for the life of the rank. It
sits in the rank's process group but has none of the rank's signal handlers. So a SIGTERM to
the whole group (torchrun forwards it that way, and so do `kill -- -PGID`, systemd and
Kubernetes) kills it while the rank finishes its step, and the preemption save that follows
fails with BrokenPipeError. And a SIGKILLed rank leaves it running, with multiprocessing's
resource tracker, which waits for it.

`start` starts that Manager before megatron does, ignoring the preemption signals (the rank
acts on them) and SIGINT, and set to receive SIGKILL when its rank dies (Linux
PR_SET_PDEATHSIG). It hands the Manager's queue to megatron through the module global that
`_get_write_results_queue` returns when set.
"""

from __future__ import annotations

import multiprocessing
import signal
from multiprocessing.managers import SyncManager
from typing import Any, cast

# what hyrl.train.stopping acts on (SIGTERM, SIGUSR1), and SIGINT
IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_manager: SyncManager | None = None


def _writer_helper_init() -> None:
    """In the Manager's process: the signals a whole process group receives on a preemption are
    for the rank to act on; SIGKILL when the rank dies."""
    import ctypes

    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def start() -> int:
    """Start the writer helper on this rank unless it runs already; return its pid. Call it from
    the thread that lives as long as the rank (the main thread): PR_SET_PDEATHSIG fires when the
    creating thread exits."""
    global _manager
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if _manager is None:
        if filesystem_async._results_queue is not None:
            raise RuntimeError(
                "megatron's checkpoint writer was started before hyrl's: call "
                "checkpoint_writer.start() before the first dist_checkpointing.save"
            )
        manager = SyncManager(ctx=multiprocessing.get_context("spawn"))  # megatron's context
        manager.start(initializer=_writer_helper_init)
        filesystem_async._results_queue = manager.Queue()
        _manager = manager
    process = cast(Any, _manager)._process  # BaseManager's, set by start
    return process.pid
