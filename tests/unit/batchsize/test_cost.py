"""hyrl.batchsize.cost and `hyrl cost`: what a cut in time-to-target saves."""

from __future__ import annotations

import json

import pytest

from hyrl.batchsize.cost import CostError, cost, format_table
from hyrl.cli import main

FLEET = ["--gpus", "10000", "--hours", "720", "--usd-per-gpu-hour", "3", "--time-reduction", "0.1"]


def test_ten_thousand_gpus_for_thirty_days_with_a_ten_percent_cut():
    out = cost(10_000, 720, 3.0, 0.1)
    assert out["gpu_hours"] == pytest.approx(7_200_000)
    assert out["usd"] == pytest.approx(21_600_000)
    assert out["saved_gpu_hours"] == pytest.approx(720_000)
    assert out["saved_usd"] == pytest.approx(2_160_000)
    assert out["gpu_hours_after"] == pytest.approx(6_480_000)
    table = format_table(out)
    assert "720,000" in table and "$2.16M" in table and "7,200,000" in table


def test_zero_cut_and_free_gpus_save_nothing():
    assert cost(8, 10, 2.5, 0.0)["saved_usd"] == 0
    out = cost(8, 10, 0.0, 0.5)
    assert out["saved_gpu_hours"] == pytest.approx(40) and out["saved_usd"] == 0


def test_cli_json_prints_one_object(capsys):
    assert main(["cost", *FLEET, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["saved_gpu_hours"] == pytest.approx(720_000)
    assert out["saved_usd"] == pytest.approx(2_160_000)
    assert out["gpus"] == 10_000 and out["hours"] == 720 and out["time_reduction"] == 0.1


def test_cli_table(capsys):
    assert main(["cost", *FLEET]) == 0
    text = capsys.readouterr().out
    assert "saved GPU-hours" in text and "720,000" in text and "$2.16M" in text


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--gpus", "0"),
        ("--gpus", "2.5"),
        ("--hours", "0"),
        ("--hours", "-1"),
        ("--usd-per-gpu-hour", "-0.5"),
        ("--time-reduction", "1"),
        ("--time-reduction", "10"),
        ("--time-reduction", "-0.1"),
        ("--hours", "nan"),
    ],
)
def test_cli_rejects_bad_values_naming_the_flag(capsys, flag, value):
    args = dict(zip(FLEET[::2], FLEET[1::2]))
    args[flag] = value
    rc = main(["cost", *[x for kv in args.items() for x in kv]])
    assert rc == 2
    assert flag in capsys.readouterr().err


def test_api_validation_names_the_flag():
    with pytest.raises(CostError, match="--time-reduction .*0 <= F < 1"):
        cost(1, 1, 1, 1.5)
    with pytest.raises(CostError, match="--gpus"):
        cost(0, 1, 1, 0.1)
    with pytest.raises(CostError, match="--usd-per-gpu-hour"):
        cost(1, 1, -1, 0.1)


def test_cli_missing_flag_exits_2(capsys):
    assert main(["cost", "--gpus", "4"]) == 2
    assert "--hours" in capsys.readouterr().err
