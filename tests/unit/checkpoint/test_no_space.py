"""hyrl.checkpoint.no_space: a save that runs out of disk is found wherever the writer wrapped
the error, and the words that stop the run name the path, the bytes and what remains."""

import errno

from torch.distributed.checkpoint.api import CheckpointException, _wrap_exception

from hyrl.checkpoint.no_space import no_space_error, no_space_message, remove_unfinished
from hyrl.checkpoint.trainer_state import STATE_FILE


def full(path="/ckpt/.tmp-step_2/actor/__0_0.distcp"):
    return OSError(errno.ENOSPC, "No space left on device", path)


def test_enospc_is_found_raised_plainly_from_another_error_and_inside_torchs_failures():
    plain = full()
    assert no_space_error(plain) is plain
    try:
        try:
            raise plain
        except OSError as err:
            raise RuntimeError("writer failed") from err
    except RuntimeError as wrapped:
        assert no_space_error(wrapped) is plain
    # torch.distributed.checkpoint gathers each rank's failure as (exception, traceback)
    try:
        raise plain
    except OSError as err:
        gathered = CheckpointException("save failed", {1: _wrap_exception(err)})
    assert no_space_error(gathered) is plain


def test_other_errors_are_not_taken_for_a_full_disk():
    assert no_space_error(OSError(errno.EIO, "I/O error")) is None
    assert no_space_error(CheckpointException("x", {0: _wrap_exception(ValueError("y"))})) is None


def test_the_message_names_the_path_the_bytes_and_the_steps_that_remain(tmp_path):
    save_dir = tmp_path / "ckpt"
    step_1 = save_dir / "step_1"
    (step_1 / "actor").mkdir(parents=True)
    (step_1 / STATE_FILE).write_text("{}")
    (step_1 / "actor" / "w.distcp").write_bytes(b"x" * 1000)
    unfinished = save_dir / ".tmp-step_2" / "actor"
    unfinished.mkdir(parents=True)
    (unfinished / "w.distcp").write_bytes(b"x" * 10)

    remove_unfinished(save_dir, 2)
    words = no_space_message(save_dir, 2, full(str(unfinished / "w.distcp")))
    assert not (save_dir / ".tmp-step_2").exists() and step_1.is_dir()
    assert "rollout step 2 ran out of disk space" in words
    assert str(unfinished / "w.distcp") in words
    assert "about 1,002 bytes (step_1's size)" in words  # the 1,000-byte shard and {}
    assert "are free" in words and f"the newest {step_1}" in words


def test_without_an_earlier_save_the_message_says_so(tmp_path):
    (tmp_path / "ckpt").mkdir()
    words = no_space_message(tmp_path / "ckpt", 1, full())
    assert "no earlier step was saved" in words and "hyrl plan" in words
