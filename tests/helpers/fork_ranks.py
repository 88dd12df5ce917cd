"""A test's worker script on N gloo ranks of this machine, forked from one process that imported
torch, megatron-core (as hyrl.backends.megatron imports it) and transformers once: what
`torchrun --standalone` does for a test, without a new interpreter per rank. On the 2-core CI
machine those imports took about 7.5 s of CPU per interpreter, most of a small worker's time.

    python fork_ranks.py NPROC WORKER [ARGS...]

Each rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and runs WORKER as `__main__` with ARGS. The ranks share this
process's stdout and stderr. When a rank fails, the others are killed (they would wait at a
collective until its timeout) and the exit status is 1; a rank dies with this process
(PR_SET_PDEATHSIG), so a test's timeout leaves none behind. Nothing here runs a torch
operation before the fork: the ranks start with no thread pool of the parent's.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import runpy
import signal
import socket
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, nproc: int, port: int, worker: str, args: list[str]) -> int:
    """Run the worker as rank `rank`; its exit status."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    sys.argv = [worker, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(worker))  # as `python WORKER` has it
    try:
        runpy.run_path(worker, run_name="__main__")
        return 0
    except SystemExit as stop:
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # noqa: BLE001  (the rank's traceback, as torchrun's error file has it)
        print(f"[rank {rank}] failed:", file=sys.stderr)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main() -> int:
    nproc, worker, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    # imported once, before the fork; megatron.core first as hyrl imports it
    for module in ("hyrl.backends.megatron", "megatron.core.models.gpt", "transformers"):
        importlib.import_module(module)

    port = _free_port()
    children = {}
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            os._exit(_rank(rank, nproc, port, worker, args))
        children[pid] = rank
    status = 0
    while children:
        pid, wait_status = os.wait()
        children.pop(pid, None)
        code = os.waitstatus_to_exitcode(wait_status)
        if code != 0 and status == 0:
            status = 1
            time.sleep(2)  # the failing rank's last lines reach stderr first
            for other in children:
                os.kill(other, signal.SIGKILL)
    return status


if __name__ == "__main__":
    sys.exit(main())
