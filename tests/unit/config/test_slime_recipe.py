"""slime's own Qwen3-30B-A3B scripts, verbatim (tests/data/slime_qwen3_30b_a3b/, THUDM/slime
624b824a), reach hyrl: bash assembles `train.py`'s arguments as it would (the model script
sourced, `$(seq 16 8 256)` expanded; pkill, sleep, nvidia-smi and ray stubbed, ray handing back
what it would submit), and `hyrl train --dry-run` answers them in-process with a note for each
flag that asks for what hyrl does and one message naming every flag it refuses; without those
and with the three flags whose hyrl defaults differ, `hyrl train --dry-run` and `hyrl plan`
print a plan, the data and checkpoint paths (which exist only on slime's machine) unchecked."""

from __future__ import annotations

import json
import subprocess

import pytest
from testpaths import DATA

import hyrl.plan.cli
import hyrl.train.cli

SCRIPT = DATA / "slime_qwen3_30b_a3b" / "run-qwen3-30B-A3B.sh"
MODEL_SCRIPT = DATA / "slime_qwen3_30b_a3b" / "models" / "qwen3-30B-A3B.sh"
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"

# The script's commands that would touch this machine are stubbed; `ray job submit ... --
# python3 train.py ARGS` writes ARGS to fd 3, NUL-separated (bash's words, exactly).
STUBS = """
exec 3>&1 1>&2
pkill() { :; }
sleep() { :; }
nvidia-smi() { :; }
ray() {
  [ "$1" = job ] || return 0
  while [ "$1" != -- ]; do shift; done
  shift 3
  printf '%s\\0' "$@" >&3
}
source "$0"
"""

# What the script gives that asks for what hyrl does: accepted, each with one note.
ACCEPTED = [
    "--disable-bias-linear",
    "--group-query-attention",
    "--position-embedding-type rope",
    "--rotary-percent 1.0",
    "--swiglu",
    "--moe-router-score-function softmax",
    "--moe-layer-freq [1,1,1,1,1,1,1,1,1,1...",
    "--moe-grouped-gemm",
    "--moe-token-drop-policy probs",
    "--moe-router-dtype fp32",
    "--moe-aux-loss-coeff 0",
    "--rollout-shuffle",
    "--optimizer adam",
    "--context-parallel-size 1",
    "--eval-top-p 1",
    "--attention-dropout 0.0",
    "--hidden-dropout 0.0",
    "--attention-softmax-in-fp32",
]
# What it gives that hyrl refuses, with the number of values each takes in the script.
REFUSED = {
    "--actor-num-nodes": 1,
    "--actor-num-gpus-per-node": 1,
    "--ref-load": 1,
    "--balance-data": 0,
    "--optimizer-cpu-offload": 0,
    "--overlap-cpu-optimizer-d2h-h2d": 0,
    "--use-precision-aware-optimizer": 0,
    "--attention-backend": 1,  # flash; hyrl's is megatron's auto
    "--use-kl-loss": 0,  # beside --kl-loss-coef 0.00, where hyrl computes no KL
}
# Flags whose hyrl default differs from what the script relies on (docs/recipes.md).
HYRL_DEFAULTS_DIFFER = [
    "--rollout-engine",
    "sglang",
    "--max-position-embeddings",
    "40960",
    "--rollout-max-prompt-len",
    "2048",
]
CUDA_GRAPH_BS = ["1", "2", "4", "8", *(str(n) for n in range(16, 257, 8))]


@pytest.fixture(scope="module")
def slime_argv() -> list[str]:
    """train.py's arguments as slime's script assembles them (the copies name their commit)."""
    assert SLIME_COMMIT in SCRIPT.read_text().splitlines()[1]
    assert SLIME_COMMIT in MODEL_SCRIPT.read_text().splitlines()[0]
    done = subprocess.run(
        ["bash", "-c", STUBS, str(SCRIPT)], capture_output=True, check=True, timeout=60
    )
    words = done.stdout.decode().split("\0")
    assert words[-1] == ""
    argv = words[:-1]
    assert argv[:5] == ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate"]
    at = argv.index("--sglang-cuda-graph-bs")
    assert argv[at + 1 : at + 1 + len(CUDA_GRAPH_BS)] == CUDA_GRAPH_BS  # 35 values
    assert argv[argv.index("--moe-layer-freq") + 1] == "[" + ",".join(["1"] * 48) + "]"
    return argv


def _without_refused(argv: list[str]) -> list[str]:
    kept, i = [], 0
    while i < len(argv):
        if argv[i] in REFUSED:
            i += 1 + REFUSED[argv[i]]
            continue
        kept.append(argv[i])
        i += 1
    return kept


@pytest.fixture
def slime_machine(monkeypatch, tmp_path):
    """The script's world (one node of 8 GPUs) from a fresh directory (hyrl's default
    --run-dir, runs/latest, is relative), as rank 0."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.delenv("RANK", raising=False)


def test_the_verbatim_script_gets_its_notes_and_one_message_naming_every_refusal(
    slime_argv, slime_machine, capsys
):
    assert hyrl.train.cli.main([*slime_argv, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    for given in ACCEPTED:
        notes = [line for line in lines if line.startswith(f"hyrl: {given}: ")]
        assert len(notes) == 1 and notes[0].endswith("; accepted"), given
    assert len([line for line in lines if line.endswith("; accepted")]) == len(ACCEPTED)
    assert "hyrl: --swiglu: hyrl's Qwen3-MoE always uses SwiGLU; accepted" in lines
    assert "hyrl: --sglang-cuda-graph-bs: SGLang 0.5.23 has no --cuda-graph-bs" in err
    errors = [line for line in err.splitlines() if line.startswith("hyrl train: error:")]
    assert len(errors) == 1 and "9 unknown flags:" in errors[0]
    assert "stray" not in err
    for flag in REFUSED:
        assert err.count(f"\n  {flag}") == 1, flag
    assert (
        "\n  --attention-backend flash: " in err
        and "accepted only as --attention-backend auto" in err
    )
    assert "accepted only as --use-kl-loss with --kl-loss-coef above 0" in err


def test_without_the_refusals_the_dry_run_plans_from_a_machine_without_its_files(
    slime_argv, slime_machine, capsys
):
    argv = [*_without_refused(slime_argv), *HYRL_DEFAULTS_DIFFER, "--dry-run"]
    assert hyrl.train.cli.main(argv) == 0
    out, err = capsys.readouterr()
    resolved = json.loads(out)
    assert resolved["world_size"] == 8 and resolved["tensor_model_parallel_size"] == 4
    assert resolved["sglang_server_args"] == "--cuda-graph-bs-decode " + " ".join(CUDA_GRAPH_BS)
    assert "hyrl plan: world size 8" in err and "Traceback" not in err
    assert (
        "hyrl train: not checked under --dry-run: "
        "--prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl, "
        "--eval-prompt-data /root/aime-2024/aime-2024.jsonl, "
        "--hf-checkpoint /root/Qwen3-30B-A3B, --load /root/Qwen3-30B-A3B_slime/\n"
    ) in err


def test_hyrl_plan_prints_the_plan_of_the_same_flags(slime_argv, slime_machine, capsys):
    flags = [*_without_refused(slime_argv), *HYRL_DEFAULTS_DIFFER]
    assert hyrl.plan.cli.main(["--world-size", "8", "--", *flags]) == 0
    out, err = capsys.readouterr()
    assert "hyrl plan: world size 8" in out and "layout  TP=4 PP=1 EP=8" in out
    assert "hyrl plan: not checked: --prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl" in err
    assert "error" not in err
