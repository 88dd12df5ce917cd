"""Test hooks in the hyrl processes a test starts (a recipe run through the launcher): behaviour
no flag asks for, patched into hyrl's own functions from outside. hyrl reads no HYRL_TEST_*
variable; a test passes hook_env(...) as the run's environment, which puts hook_site/ first on
PYTHONPATH: its sitecustomize.py calls install() in every Python process of the run, and
install() patches each hooked module right after it is imported, when its variable is set.

A hook whose target moved or was renamed fails the run at that import, naming it: it is never
skipped in silence.

HYRL_TEST_CRASH_IN_SAVE=N: every rank os._exit(17) in the middle of the save after rollout step
N, once the first model (the actor) is written and nothing else: a crash mid-save must leave the
previous checkpoint in use.
HYRL_TEST_GENERATION_DELAY_S=S: rank 0 sleeps S seconds after each engine call
(RolloutManager._engine_call returns, out of the engine lock, so a rollout's first segment starts on
the weights it found): a generation slower than --distributed-timeout-minutes, or one a weight
sync lands in (--inflight-weight-updates), or a rollout longer than --log-interval-s (the
heartbeat).
HYRL_TEST_ENOSPC_IN_SAVE=N: every rank's save after rollout step N fails as a full disk does,
once the first model (the actor) is written: OSError(ENOSPC) naming a file in .tmp-step_N.
HYRL_TEST_FAIL_WEIGHT_SYNC=N: rank 0's hf engine takes one bucket of the N-th weight stream and
raises (an engine that fails mid-sync while the other ranks are in their gathers).
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

HOOK_SITE = Path(__file__).resolve().parent / "hook_site"


def _delay_each_generation(manager: ModuleType) -> None:
    delay_s = float(os.environ["HYRL_TEST_GENERATION_DELAY_S"])
    engine_call = manager.RolloutManager._engine_call

    @functools.wraps(engine_call)
    def engine_call_then_sleep(self, prompt_ids, sampling):
        result = engine_call(self, prompt_ids, sampling)
        time.sleep(delay_s)  # after the call, outside the lock: a sync may land in the pause
        return result

    manager.RolloutManager._engine_call = engine_call_then_sleep


def _crash_in_save(train_checkpoint: ModuleType) -> None:
    from hyrl.checkpoint.trainer_state import TMP_PREFIX, step_dir_name

    saving = TMP_PREFIX + step_dir_name(int(os.environ["HYRL_TEST_CRASH_IN_SAVE"]))
    save_mcore = train_checkpoint.save_mcore

    @functools.wraps(save_mcore)
    def save_mcore_then_crash(model, out_dir, *args, **kwargs):
        metadata = save_mcore(model, out_dir, *args, **kwargs)
        if Path(out_dir).parent.name == saving:  # the step's first model, into .tmp-step_N/
            _die_as_a_killed_job()
        return metadata

    train_checkpoint.save_mcore = save_mcore_then_crash


def _enospc_in_save(train_checkpoint: ModuleType) -> None:
    import errno

    from hyrl.checkpoint.trainer_state import TMP_PREFIX, step_dir_name

    saving = TMP_PREFIX + step_dir_name(int(os.environ["HYRL_TEST_ENOSPC_IN_SAVE"]))
    save_mcore = train_checkpoint.save_mcore

    @functools.wraps(save_mcore)
    def save_mcore_then_fill_the_disk(model, out_dir, *args, **kwargs):
        metadata = save_mcore(model, out_dir, *args, **kwargs)
        if Path(out_dir).parent.name == saving:
            next_file = Path(out_dir).parent / "optimizer" / "__0_0.distcp"
            raise OSError(errno.ENOSPC, "No space left on device", str(next_file))
        return metadata

    train_checkpoint.save_mcore = save_mcore_then_fill_the_disk


def _die_as_a_killed_job() -> None:
    """Every rank at once, with the save half written; the checkpoint writer's worker
    processes go too (they hold the launcher's output pipes)."""
    import multiprocessing

    import torch

    torch.distributed.barrier()
    for child in multiprocessing.active_children():
        child.kill()
    os._exit(17)


def _fail_weight_sync(hf_engine: ModuleType) -> None:
    fail_at = int(os.environ["HYRL_TEST_FAIL_WEIGHT_SYNC"])
    stream = hf_engine.HFRolloutEngine.update_weights_stream
    calls = [0]

    @functools.wraps(stream)
    def stream_then_fail(self, buckets):
        calls[0] += 1
        if calls[0] != fail_at:
            return stream(self, buckets)
        next(iter(buckets))
        raise RuntimeError(f"test hook: the engine refused weight stream {fail_at}")

    hf_engine.HFRolloutEngine.update_weights_stream = stream_then_fail


# variable -> (the module patched, the patch, given the module just imported)
HOOKS: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "HYRL_TEST_CRASH_IN_SAVE": ("hyrl.backends.megatron.train_checkpoint", _crash_in_save),
    "HYRL_TEST_GENERATION_DELAY_S": ("hyrl.rollout.manager", _delay_each_generation),
    "HYRL_TEST_ENOSPC_IN_SAVE": ("hyrl.backends.megatron.train_checkpoint", _enospc_in_save),
    "HYRL_TEST_FAIL_WEIGHT_SYNC": ("hyrl.rollout.hf_engine", _fail_weight_sync),
}


def hook_env(**variables: str) -> dict[str, str]:
    """The environment a test adds to a run for these hooks: the variables, and hook_site/
    first on PYTHONPATH (before the tree under test). A name that is no hook is refused."""
    unknown = sorted(set(variables) - set(HOOKS))
    if unknown:
        raise ValueError(f"{unknown}: not test hooks; allowed: {sorted(HOOKS)}")
    path = [str(HOOK_SITE), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), **variables}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds one module through the other finders and patches it once it has run."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the finders after it find the module
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            raise ImportError(f"test hook: {fullname} not found, nothing to patch")
        exec_module, patch = spec.loader.exec_module, self.patch

        def exec_module_then_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_module_then_patch  # this module's loader only
        return spec


def install() -> None:
    """The hooks whose variable is set, each patched right after its module is imported."""
    for variable, (module, patch) in HOOKS.items():
        if variable not in os.environ:
            continue
        if module in sys.modules:
            patch(sys.modules[module])
        else:
            sys.meta_path.insert(0, _PatchAfterImport(module, patch))
