"""A damaged checkpoint is named before anything loads it (hyrl.checkpoint.manifest): each
kind of file truncated, the message names --load, the file and what is wrong, and the older
step that passes; `hyrl checkpoint verify` checks on demand. A step without its manifest is
checked too (megatron's .metadata, the files trainer_state.json names, each by its format), and
the user is told its sizes were not recorded."""

import dataclasses
import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from recipe_runs import run_recipe

from hyrl.checkpoint import verify_cli
from hyrl.checkpoint.manifest import check_loadable, damage, verify
from hyrl.checkpoint.trainer_state import check_resumable
from hyrl.config import ConfigError, RunConfig, resolve
from hyrl.evaluation.cli import main as eval_main
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.train.checkpointing import resume

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


# -- a step without its manifest (saved before manifests, or the file was lost) ----------------
def _without_manifest(saved, tmp_path):
    ckpt = _copy(saved, tmp_path)
    (ckpt / "step_2" / "manifest.json").unlink()
    return ckpt


def _run_config(ckpt):
    """The resolved config of the checkpoint's run (trainer_state.json records it), loading
    ckpt."""
    state = json.loads((ckpt / "step_1" / "trainer_state.json").read_text())
    names = {f.name for f in dataclasses.fields(RunConfig)}
    flags = {k: v for k, v in state["config"].items() if k in names}  # not the derived values
    return resolve(RunConfig(**{**flags, "load": str(ckpt)}))


def test_without_a_manifest_megatrons_metadata_finds_a_truncated_distcp_and_sizes_are_noted(
    saved, tmp_path
):
    ckpt = _without_manifest(saved, tmp_path)
    _truncate(ckpt / "step_2" / "actor" / "model" / "__0_0.distcp")
    problems, notes = verify(ckpt / "step_2")
    assert len(problems) == 1, problems  # named once: reading it through adds nothing
    assert problems[0].startswith("actor/model/__0_0.distcp: 100 bytes, .metadata reads up to ")
    assert notes == [
        f"{ckpt / 'step_2'} has no manifest.json: its file sizes were not recorded (saved "
        "before manifests, or the file was lost); checked instead by megatron's .metadata and "
        "each file's format"
    ]
    with pytest.raises(ConfigError) as info:
        check_loadable(ckpt / "step_2")
    assert ".metadata reads up to" in str(info.value)
    assert f"--load {ckpt / 'step_1'}" in str(info.value)


def _empty(path) -> None:
    path.write_bytes(b"")


def _a_list(path) -> None:
    path.write_text("[]")


@pytest.mark.parametrize(
    "name, spoil, found",
    [
        ("rank_00000-of-00001.pt", _truncate, "100 bytes, not a whole torch file"),
        ("actor/model/common.pt", lambda path: path.unlink(), "missing"),
        ("actor_optimizer/common.pt", _truncate, "100 bytes, not a whole torch file"),
        ("trainer_state.json", _a_list, "a JSON list, not hyrl's loop state"),
        ("trainer_state.json", _empty, "empty (0 bytes)"),
    ],
    ids=["rank file truncated", "common.pt deleted", "optimizer common.pt", "[]", "empty"],
)
def test_without_a_manifest_a_resume_refuses_each_damaged_file_of_hyrl_naming_the_older_step(
    saved, tmp_path, name, spoil, found
):
    ckpt = _without_manifest(saved, tmp_path)
    spoil(ckpt / "step_2" / name)
    cfg = _run_config(ckpt)
    with pytest.raises(ConfigError) as info:  # what preflight runs, before any process group
        check_resumable(
            cfg.load, Qwen3MoeArch.of(cfg.model), cfg.parallel, cfg.algorithm, cfg.async_rollout
        )
    message = str(info.value)
    assert message.startswith(f"--load={ckpt / 'step_2'}: damaged checkpoint: {name}: {found}")
    assert message.endswith(f"passes these checks (--load {ckpt / 'step_1'})"), message


def test_resuming_a_whole_step_without_a_manifest_notes_that_its_sizes_were_not_recorded(
    saved, tmp_path, capsys
):
    ckpt = _without_manifest(saved, tmp_path)
    backend = SimpleNamespace(rank=0, load_checkpoint=lambda step_dir: None)
    cfg = _run_config(ckpt)
    arch = Qwen3MoeArch.of(cfg.model)
    resumed = resume(cfg.load, arch, cfg.parallel, cfg.algorithm, cfg.rollout, backend, None)
    assert resumed.step_dir == ckpt / "step_2"
    out = capsys.readouterr().out
    assert f"hyrl: note: {ckpt / 'step_2'} has no manifest.json: its file sizes were" in out


def test_verify_calls_a_step_without_manifest_and_common_pt_damaged(saved, tmp_path, capsys):
    ckpt = _without_manifest(saved, tmp_path)
    (ckpt / "step_2" / "actor" / "model" / "common.pt").unlink()
    assert verify_cli.main(["verify", str(ckpt)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"{ckpt / 'step_2'}: damaged", "  actor/model/common.pt: missing"], out
    assert out[2].startswith(f"  ({ckpt / 'step_2'} has no manifest.json") and out[3:] == [
        f"{ckpt / 'step_1'}: whole"
    ]


def test_a_missing_distcp_is_named_once(saved, tmp_path):
    ckpt = _copy(saved, tmp_path)
    (ckpt / "step_2" / "actor" / "model" / "__0_0.distcp").unlink()
    assert damage(ckpt / "step_2") == ["actor/model/__0_0.distcp: missing"]


def test_an_evaluation_of_a_step_whose_trainer_state_is_a_list_names_the_older_step(
    saved, tmp_path, capsys
):
    ckpt = _copy(saved, tmp_path)
    _a_list(ckpt / "step_2" / "trainer_state.json")
    assert eval_main(["--load", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("hyrl eval: error: ") == 1, err
    assert "trainer_state.json: 2 bytes, the save wrote" in err
    assert f"(--load {ckpt / 'step_1'})" in err
