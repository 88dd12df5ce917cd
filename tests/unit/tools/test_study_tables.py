"""tools/study_tables.py: the committed copy of an analysis report (no absolute paths, no
curves) and the table rebuilt from it alone."""

import json

import pytest
from testpaths import ROOT
from tool_modules import load_tool

study_tables = load_tool("study_tables")


def _report(sweep: str) -> dict:
    estimate = {"value": 1.0, "never": False, "low": 1.0, "high": 1.0}
    return {
        "reference": "b128-ref-s1",
        "target": {"metric": "eval/accuracy", "value": 0.75},
        "runs": [{"name": "b128-ref-s1", "path": f"{sweep}/b128-ref-s1"}],
        "notes": [f"{sweep}/b128-ref-s1 is the reference", "seen in /elsewhere? no"],
        "over_seeds": None,
        "estimate": estimate,
    }


def test_the_copy_names_runs_by_name_and_paths_relative_to_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    report = _report(str(sweep))
    report["notes"] = [f"{sweep}/b128-ref-s1 is the reference"]
    copy = study_tables.committed_copy(report, sweep)
    assert copy["runs"][0]["path"] == "b128-ref-s1"
    assert copy["notes"] == ["b128-ref-s1 is the reference"]
    assert report["runs"][0]["path"].startswith("/")  # the original is left as it was


def test_a_path_outside_the_sweep_is_refused_not_committed(tmp_path):
    report = _report(str(tmp_path / "sweep"))
    report["notes"] = ["/home/someone/elsewhere"]
    with pytest.raises(ValueError, match="absolute paths left"):
        study_tables.committed_copy(report, tmp_path / "sweep")


def test_the_committed_demo_report_rebuilds_its_table():
    """docs/sweep/report.json, committed: no absolute path in it, and the over-seeds table and
    verdicts come back from it alone."""
    path = ROOT / "docs" / "sweep" / "report.json"
    text = path.read_text()
    assert '"/' not in text
    lines = study_tables.table_lines(json.loads(text))
    assert any(line.startswith("| **b128-ref** (ref) | 128 |") for line in lines)
    assert any("needs more samples than b512-sqrt" in line for line in lines)


def test_the_docs_quote_the_committed_reports_tables_as_the_tool_writes_them():
    """Every study_tables block of docs/batch-size.md is its report's table, rebuilt (the
    figures in the docs come from the committed JSON)."""
    doc = ROOT / "docs" / "batch-size.md"
    text = doc.read_text()
    assert study_tables.BLOCK_START in text
    new, changed = study_tables.render_blocks(text, ROOT)
    assert changed == [] and new == text


def test_a_stale_block_is_found_and_rewritten(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report(str(tmp_path))))
    stale = f"intro\n{study_tables.BLOCK_START}r.json -->\nold table\n{study_tables.BLOCK_END}\nend"
    new, changed = study_tables.render_blocks(stale, tmp_path)
    assert changed == ["r.json"]
    assert "old table" not in new and new.startswith("intro\n") and new.endswith("\nend")
    assert "Target eval/accuracy = 0.75; reference b128-ref-s1." in new
    assert study_tables.render_blocks(new, tmp_path) == (new, [])
