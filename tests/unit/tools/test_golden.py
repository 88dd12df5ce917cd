"""tools/golden.py's comparison: what `make golden` calls a difference (the golden runs
themselves are `make golden`, run by .ci/run)."""

import json

from testpaths import ROOT
from tool_modules import load_tool

golden = load_tool("golden")


def _records(name: str) -> list[dict]:
    return golden.read_records(ROOT / "tests" / "golden" / f"{name}.jsonl")


def test_the_committed_records_agree_with_themselves_whatever_their_timing():
    records = _records("grpo")
    slower = [{**r, "elapsed_s": r["elapsed_s"] * 3, "perf/step_s": 9.0} for r in records]
    assert golden.differences(records, slower) == []


def test_a_changed_number_a_missing_key_a_new_key_and_a_lost_record_are_each_named():
    records = _records("ppo")
    changed = json.loads(json.dumps(records))
    changed[6]["train/entropy"] *= 1 + 1e-3
    del changed[7]["critic/value_loss"]
    changed[7]["train/new_thing"] = 1.0
    changed[7]["perf/weight_sync_peak_bytes"] = -1  # bytes are compared, not timing
    lines = golden.differences(records, changed)
    assert any("record 7 (rollout_step 7): train/entropy" in line for line in lines)
    assert any("record 8 (rollout_step 8): critic/value_loss missing" in line for line in lines)
    assert any("train/new_thing is new" in line for line in lines)
    assert any("perf/weight_sync_peak_bytes" in line for line in lines)
    assert golden.differences(records, records[:-1])[0] == "7 records, the golden has 8"


def test_integers_are_exact_and_floats_agree_within_float32_rounding_on_another_cpu():
    assert golden.differences([{"samples": 128}], [{"samples": 129}])
    assert not golden.differences([{"x": 20721.6}], [{"x": 20722.4}])  # 3.7e-5, measured
    assert not golden.differences([{"x": 2.4e-7}], [{"x": 4.8e-7}])  # float32 noise, measured
    assert golden.differences([{"x": 1.0}], [{"x": 1.0 + 1e-3}])
    assert golden.differences([{"x": 1e-5}], [{"x": 3e-6}])
    assert golden.differences([{"x": float("nan")}], [{"x": 0.0}])
    assert not golden.differences([{"x": float("nan")}], [{"x": float("nan")}])


def test_check_exits_1_naming_the_case_that_differs(monkeypatch, capsys):
    records = _records("grpo")
    moved = json.loads(json.dumps(records))
    moved[-1]["train/entropy"] *= 1.01
    runs = {"grpo": records, "ppo": moved}
    monkeypatch.setattr(golden, "read_records", lambda path: runs["grpo"])
    monkeypatch.setattr(golden, "run_case", lambda name, work: runs[name])
    assert golden.check(["grpo"]) == 0
    assert golden.check(["grpo", "ppo"]) == 1
    out = capsys.readouterr().out
    assert "ppo: DIFFERS" in out and "train/entropy" in out and "update ppo" in out


def test_a_case_whose_run_fails_fails_the_check_and_the_others_still_run(monkeypatch, capsys):
    records = _records("grpo")

    def run_case(name, work):
        if name == "ppo":
            raise RuntimeError("ppo: recipes/tiny/ppo.sh exited 2:\nhyrl train: error: ...")
        return records

    monkeypatch.setattr(golden, "read_records", lambda path: records)
    monkeypatch.setattr(golden, "run_case", run_case)
    assert golden.check(["ppo", "grpo"]) == 1
    out = capsys.readouterr().out
    assert "ppo.sh exited 2" in out and "grpo: 5 records" in out
