"""A set imported with `hyrl data import` is trained on: one real rollout step (not --dry-run,
which does not open the data) of recipes/tiny/grpo_data.sh on the imported training file, with
the imported held-out file evaluated before it.

The tiny model's tokenizer knows digits, + and = only (tests/data/make_tiny_tokenizer.py) and
its positions stop at 64, so the prompts are arithmetic kept as written (verl and slime
prompts are not wrapped in an instruction) and the reward is exact_match; the point is that
the file loads, tokenizes, is rolled out, rewarded and trained on."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from recipe_runs import records, run_recipe
from testpaths import ROOT

from hyrl.cli import main as hyrl_main

GRPO_DATA = ROOT / "recipes" / "tiny" / "grpo_data.sh"
TRAIN = [(a, b) for a in range(4) for b in range(4)]  # 16 sums, each written twice below
HELDOUT = [(5, 4), (6, 3), (2, 7)]


def test_an_imported_set_trains_one_step_and_its_heldout_set_is_evaluated(tmp_path, capsys):
    # Training: a verl parquet (DAPO-Math-17k's columns), each prompt repeated as there.
    rows = [
        {
            "data_source": "arith",
            "prompt": [{"content": f"{a}+{b}=", "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
            "extra_info": {"index": f"{a}-{b}"},
        }
        for a, b in TRAIN * 2
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    # Held out: slime's jsonl (zhuzilin/aime-2024's columns), a number label.
    heldout = [
        {"prompt": [{"role": "user", "content": f"{a}+{b}="}], "label": a + b} for a, b in HELDOUT
    ]
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in heldout))

    train, evals = tmp_path / "train.jsonl", tmp_path / "heldout_prompts.jsonl"
    argv = ["data", "import", str(tmp_path / "train.parquet"), "--preset", "dapo-math"]
    assert hyrl_main([*argv, "--out", str(train)]) == 0
    assert "dropped 16 duplicates" in capsys.readouterr().out
    argv = ["data", "import", str(tmp_path / "heldout.jsonl"), "--preset", "aime"]
    assert hyrl_main([*argv, "--out", str(evals)]) == 0

    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps", "1",
        "--rollout-batch-size", "4",
        "--n-samples-per-prompt", "2",
        "--global-batch-size", "8",
        "--micro-batch-size", "8",
        "--eval-prompt-data", "heldout", str(evals),
        recipe=GRPO_DATA,
        extra_env={"DATA": str(train)},
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["prompt_data"] == str(train)
    assert config["eval_prompt_data"] == ["heldout", str(evals)]
    evaluation, step = records(run_dir)
    assert evaluation["step"] == 0 and evaluation["eval/num_responses"] == len(HELDOUT)
    assert 0.0 <= evaluation["eval/heldout/accuracy"] <= 1.0
    assert step["step"] == 1 and step["samples"] == 8 and step["actor/optimizer_steps"] == 1
    assert step["batch/prompts_per_step"] == 4


def test_every_layouts_sample_imports_and_passes_hyrl_trains_data_checks(tmp_path, capsys):
    # The problem/answer sets get an English instruction the tiny tokenizer cannot train on,
    # so this is --preflight-only: every check that opens the files (records, labels, the
    # tokenizer, the reward) before any process group, on each imported file.
    samples = ROOT / "tests" / "data" / "import_samples"
    out = {}
    for name, preset in (
        ("math500_sample.jsonl", "math500"),
        ("aime_sample.parquet", "aime"),
        ("dapo_sample.parquet", "dapo-math"),
        ("slime_aime_sample.jsonl", "aime"),
    ):
        out[name] = tmp_path / f"{name.split('.')[0]}.jsonl"
        assert hyrl_main(["data", "import", str(samples / name), "--preset", preset,
                          "--out", str(out[name])]) == 0  # fmt: skip
    capsys.readouterr()
    evals = [arg for name in list(out)[1:] for arg in (name.split("_")[0], str(out[name]))]
    proc = run_recipe(
        tmp_path / "run",
        "--preflight-only",
        "--prompt-data", str(out["math500_sample.jsonl"]),
        "--rm-type", "math",
        "--eval-prompt-data", *evals,
        recipe=GRPO_DATA,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = run_recipe(
        tmp_path / "run2",
        "--preflight-only",
        "--prompt-data", str(out["math500_sample.jsonl"]),
        "--label-key", "answer",  # the source's column, not the imported file's
        "--rm-type", "math",
        recipe=GRPO_DATA,
        timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "no key 'answer' (--label-key)" in bad.stderr
