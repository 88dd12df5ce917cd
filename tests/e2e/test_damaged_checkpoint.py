"""A damaged checkpoint is named before anything loads it (hyrl.checkpoint.manifest): each
kind of file truncated, the message names --load, the file and what is wrong, and the older
step that passes; `hyrl checkpoint verify` checks on demand."""

import json
import shutil
import subprocess
import sys

import pytest
from recipe_runs import run_recipe

from hyrl.checkpoint.manifest import check_loadable, damage
from hyrl.config import ConfigError

# one of each kind of file a step holds (1 rank: one .distcp per distributed checkpoint)
KINDS = [
    "actor/model/__0_0.distcp",
    "actor_optimizer/__0_0.distcp",
    "actor/model/.metadata",
    "actor/model/common.pt",
    "rank_00000-of-00001.pt",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two steps saved (step_1, step_2) by the tiny recipe on one rank: the --save directory."""
    root = tmp_path_factory.mktemp("damaged")
    proc = run_recipe(
        root / "run", "--num-steps", "2", "--save", str(root / "ck"), "--save-interval", "1"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "ck"


def _copy(saved, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(saved, ckpt)
    return ckpt


def _truncate(path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_a_whole_step_passes_and_its_manifest_lists_every_file(saved):
    step = saved / "step_2"
    assert damage(step) == []
    files = json.loads((step / "manifest.json").read_text())["files"]
    assert set(KINDS) <= set(files) and files["trainer_state.json"] > 0


@pytest.mark.parametrize("name", KINDS)
def test_each_kind_of_truncated_file_is_named_with_the_older_step_to_load(saved, tmp_path, name):
    ckpt = _copy(saved, tmp_path)
    _truncate(ckpt / "step_2" / name)
    with pytest.raises(ConfigError) as info:
        check_loadable(ckpt / "step_2")
    message = str(info.value)
    assert info.value.flag == "--load" and "damaged checkpoint" in message
    assert name in message, message
    assert f"--load {ckpt / 'step_1'}" in message  # the older step passes


def test_a_damaged_latest_step_stops_the_run_with_one_message(saved, tmp_path):
    ckpt = _copy(saved, tmp_path)
    _truncate(ckpt / "step_2" / "actor" / "model" / "__0_0.distcp")
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "3", "--load", str(ckpt))
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("hyrl train: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "actor/model/__0_0.distcp: 100 bytes, the save wrote" in errors[0]
    assert not run_dir.exists()


def _verify(*args: str):
    return subprocess.run(
        [sys.executable, "-m", "hyrl", "checkpoint", "verify", *args],
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_hyrl_checkpoint_verify_reads_every_file_and_records_then_compares_checksums(
    saved, tmp_path
):
    ckpt = _copy(saved, tmp_path)
    first = _verify(str(ckpt), "--checksums")
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{ckpt / 'step_2'}: whole" in first.stdout and "checksums recorded" in first.stdout
    # a flipped byte keeps every size: only the checksums see it
    target = ckpt / "step_2" / "actor_optimizer" / "__0_0.distcp"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    assert damage(ckpt / "step_2") == []
    second = _verify(str(ckpt / "step_2"), "--checksums")
    assert second.returncode == 1
    assert "actor_optimizer/__0_0.distcp: SHA-256" in second.stdout, second.stdout
    bad = _verify(str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "no checkpoint" in bad.stderr
