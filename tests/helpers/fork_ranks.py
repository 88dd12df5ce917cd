"""A test's worker script on N gloo ranks of this machine, forked from one process that imported
torch, megatron-core (as hyrl.backends.megatron imports it) and transformers once: what
`torchrun --standalone` does for a test, without a new interpreter per rank. On the 2-core CI
machine those imports took about 7.5 s of CPU per interpreter, most of a small worker's time.

    python fork_ranks.py NPROC WORKER [ARGS...]

Each rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID) and runs WORKER as
`__main__` with ARGS. As torchrun's agent does, this process holds the ranks' store (a TCPStore
bound to a port the kernel picks): a port picked free and bound later by rank 0 could be taken
in between by another test's connection (a rendezvous failed with EADDRINUSE so under parallel
tests). The ranks share this process's stdout and stderr. When a rank fails, the others are
killed (they would wait at a collective until its timeout) and the exit status is 1; a rank
dies with this process (PR_SET_PDEATHSIG), so a test's timeout leaves none behind. Nothing here
runs a torch operation before the fork: the ranks start with no thread pool of the parent's.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import runpy
import signal
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1


def _rank(rank: int, nproc: int, port_pipe: int, worker: str, args: list[str]) -> int:
    """Run the worker as rank `rank` once the store's port arrives on `port_pipe`; its exit
    status."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    with os.fdopen(port_pipe) as pipe:
        port = pipe.readline().strip()
    if not port:
        return 1  # the launcher died before its store was up
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port,
        TORCHELASTIC_USE_AGENT_STORE="True",  # env:// makes every rank a client of our store
        TORCHELASTIC_RUN_ID="fork_ranks",  # as torchrun: a lone rank meets at env:// too
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

    # fork first: the store's server thread must not be running in a forked rank
    children, port_pipes = {}, []
    for rank in range(nproc):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            for other in port_pipes:
                os.close(other)
            os.close(write_end)
            os._exit(_rank(rank, nproc, read_end, worker, args))
        os.close(read_end)
        port_pipes.append(write_end)
        children[pid] = rank
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)
    for write_end in port_pipes:
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(f"{store.port}\n")
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
