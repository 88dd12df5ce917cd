"""When the loop stops early (hyrl.train.stopping): a preemption signal, skipped steps."""

import os
import signal
from types import SimpleNamespace

import pytest

from hyrl.train.stopping import (
    Preemption,
    TrainingStopped,
    check_skipped_steps,
    skipped_steps,
    target_reached,
)


def test_a_preemption_signal_is_recorded_and_the_previous_handler_restored():
    before = signal.getsignal(signal.SIGUSR1)
    preemption = Preemption()
    try:
        assert not preemption.received
        os.kill(os.getpid(), signal.SIGUSR1)
        assert preemption.received and preemption.signal_name == "SIGUSR1"
        assert preemption.message(7, "/ckpt") == (
            "hyrl: SIGUSR1 received: stopping after rollout step 7; "
            "checkpoint /ckpt/step_7 written; resume with --load /ckpt"
        )
        assert preemption.message(7, None).endswith("no checkpoint written (no --save)")
    finally:
        preemption.close()
    assert signal.getsignal(signal.SIGUSR1) is before


def _part(prefix, skipped, in_a_row):
    return SimpleNamespace(metric_prefix=prefix, skipped_steps=skipped, consecutive_skips=in_a_row)


def test_skipped_steps_stop_the_run_at_max_skipped_steps_in_a_row():
    parts = [_part("actor", 5, 2), _part("critic", 3, 3)]
    assert skipped_steps(parts) == 8
    check_skipped_steps(parts, 4, rollout_step=9)  # 3 in a row < 4: goes on
    with pytest.raises(TrainingStopped, match=r"the critic skipped 3 optimizer steps in a row"):
        check_skipped_steps(parts, 3, rollout_step=9)


def test_stop_at_target_says_which_target_and_step():
    assert target_reached("eval/accuracy=0.8", 12) == (
        "hyrl: --target eval/accuracy=0.8 reached at rollout step 12; --stop-at-target ends the run"
    )
