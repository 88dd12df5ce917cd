"""A save that runs out of disk (ENOSPC): found wherever the writer wrapped it, the half-written
step removed, and the words that stop the run.

    err = no_space_error(exc)                   # the OSError(ENOSPC) inside, or None
    words = no_space_message(save_dir, step, err)   # rank 0, after remove_unfinished

The steps already saved are complete and stay as they are (a save writes into .tmp-step_N and
renames it only once whole: hyrl.checkpoint.trainer_state); the half-written one is removed so
that its bytes come back and nothing mistakes it for a save.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from hyrl.checkpoint.retention import complete_steps
from hyrl.checkpoint.trainer_state import TMP_PREFIX, step_dir_name


def no_space_error(exc: BaseException) -> OSError | None:
    """The OSError with errno ENOSPC in `exc`, its causes and contexts, or in the failures a
    checkpoint writer collected (torch.distributed.checkpoint's CheckpointException keeps them
    by rank in ``failures``); None when there is none."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        failures = getattr(current, "failures", None)  # {rank: (exception, its traceback)}
        if isinstance(failures, dict):
            for failure in failures.values():
                failure = failure[0] if isinstance(failure, tuple) and failure else failure
                if isinstance(failure, BaseException):
                    pending.append(failure)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return None


def remove_unfinished(save_dir: str | os.PathLike, rollout_step: int) -> None:
    """Rank 0: the half-written .tmp-step_N of this save, gone (its space comes back)."""
    shutil.rmtree(Path(save_dir) / (TMP_PREFIX + step_dir_name(rollout_step)), ignore_errors=True)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def no_space_message(save_dir: str | os.PathLike, rollout_step: int, err: OSError) -> str:
    """What stops the run: where the disk filled, the bytes a save takes (the newest complete
    one's size, when there is one) and the bytes free now, and what is still there."""
    save_dir = Path(save_dir)
    steps = complete_steps(save_dir)
    free = shutil.disk_usage(save_dir).free
    where = err.filename or save_dir
    if steps:
        newest = steps[max(steps)]
        size = tree_bytes(newest)
        need = f"a save takes about {size:,} bytes ({newest.name}'s size), {free:,} are free"
        kept = f"{len(steps)} complete step(s) remain, the newest {newest}"
    else:
        need = f"{free:,} bytes are free (`hyrl plan` prints the size of one save)"
        kept = "no earlier step was saved"
    return (
        f"the checkpoint of rollout step {rollout_step} ran out of disk space: {where}: "
        f"{err.strerror or 'no space left on device'} (errno ENOSPC). In {save_dir} {need}; "
        f"the half-written step was removed and {kept}. Free space there or choose another "
        "--save (--keep-last-checkpoints bounds how many steps stay), then resume with --load"
    )
