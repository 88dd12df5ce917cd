"""hyrl.profile and `hyrl profile-rollout`: decode throughput against concurrency.

The fake engine costs a fixed 10 ms per chunk of up to CAP=8 sequences (a chunk of 16 costs two
such steps): throughput rises linearly with concurrency c up to 8, then stays flat, so the
plateau is c=8. Its time runs on a fake clock, so every number below is exact.
"""

from __future__ import annotations

import json
import math

import pytest

from hyrl.cli import main
from hyrl.profile.measure import find_plateau, percentile, profile_engine
from hyrl.profile.report import write_outputs
from hyrl.rollout.base import Generation, SamplingParams

CAP, STEP_S = 8, 0.010
PROMPTS = [[2, 3 + i % 10, 13, 4, 14] for i in range(32)]
PARAMS = SamplingParams(max_new_tokens=4)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeEngine:
    """Every response has 1 + (second prompt token % 4) tokens; a chunk of n costs
    STEP_S x ceil(n / CAP) seconds of the fake clock."""

    def __init__(self, concurrency: int, clock: FakeClock, chunk_sizes: list[int]):
        self.concurrency, self.clock, self.chunk_sizes = concurrency, clock, chunk_sizes

    def generate(self, prompts, params):
        assert len(prompts) <= self.concurrency
        self.chunk_sizes.append(len(prompts))
        self.clock.now += STEP_S * math.ceil(len(prompts) / CAP)
        return [
            Generation(p, [7] * (1 + p[1] % 4), [0.0] * (1 + p[1] % 4), "length") for p in prompts
        ]


def tokens_of(prompts) -> int:
    return sum(1 + p[1] % 4 for p in prompts)


def fake_profile(concurrencies, repeats=3, warmup=1, chunk_sizes=None, **kwargs):
    clock = FakeClock()
    chunk_sizes = [] if chunk_sizes is None else chunk_sizes
    return profile_engine(
        lambda c: FakeEngine(c, clock, chunk_sizes),
        PROMPTS,
        concurrencies,
        PARAMS,
        repeats=repeats,
        warmup=warmup,
        clock=clock,
        **kwargs,
    )


# --- the plateau -----------------------------------------------------------------------------


def rows(*pairs):
    return [{"c": c, "tokens_per_s": t} for c, t in pairs]


def test_plateau_is_the_smallest_concurrency_within_five_percent_of_the_best():
    # best 1000; 960 is within 5% (>= 950), 900 is not
    assert find_plateau(rows((1, 100), (2, 190), (4, 900), (8, 960), (16, 1000), (32, 990))) == 8


def test_plateau_boundary_is_inclusive_and_tolerance_is_a_parameter():
    assert find_plateau(rows((1, 950), (2, 1000))) == 1  # exactly 95% counts
    assert find_plateau(rows((1, 949), (2, 1000))) == 2
    assert find_plateau(rows((1, 800), (2, 1000)), tolerance=0.25) == 1


def test_plateau_when_throughput_falls_after_a_peak_and_when_still_rising():
    assert find_plateau(rows((1, 100), (4, 400), (16, 300))) == 4
    assert find_plateau(rows((1, 100), (2, 200), (4, 400))) == 4
    assert find_plateau(rows((16, 5), (1, 10), (4, 3))) == 1  # order of rows does not matter


def test_plateau_needs_rows():
    with pytest.raises(ValueError):
        find_plateau([])


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    assert percentile([7.0], 90) == 7.0


# --- profile_engine on a fake engine ---------------------------------------------------------


def test_throughput_rises_linearly_to_the_cap_then_plateaus_there():
    result = fake_profile([1, 2, 4, 8, 16, 32])
    by_c = {r["c"]: r for r in result["rows"]}
    n, tokens = len(PROMPTS), tokens_of(PROMPTS)
    for c in (1, 2, 4, 8):  # 32/c chunks of 10 ms
        wall = STEP_S * n / c
        assert by_c[c]["median_wall_s"] == pytest.approx(wall)
        assert by_c[c]["tokens_per_s"] == pytest.approx(tokens / wall)
        assert by_c[c]["responses_per_s"] == pytest.approx(n / wall)
        assert by_c[c]["latency_median_s"] == pytest.approx(STEP_S)
        assert by_c[c]["latency_p90_s"] == pytest.approx(STEP_S)
    for c in (16, 32):  # chunks cost ceil(c/8) steps: the same 40 ms per pass as c=8
        assert by_c[c]["median_wall_s"] == pytest.approx(0.040)
        assert by_c[c]["latency_median_s"] == pytest.approx(STEP_S * c / CAP)
    speeds = [by_c[c]["tokens_per_s"] for c in (1, 2, 4, 8)]
    assert all(b == pytest.approx(2 * a) for a, b in zip(speeds, speeds[1:]))
    assert result["plateau_concurrency"] == 8
    assert result["plateau_reached"] is True
    assert result["tokens_per_s_ratio_max_over_c1"] == pytest.approx(8.0)
    assert by_c[1]["mean_response_tokens"] == pytest.approx(tokens / n)


def test_generated_tokens_are_counted_not_assumed():
    # responses are 1..4 tokens long, not max_new_tokens=4 each
    result = fake_profile([4], repeats=1, warmup=0)
    assert result["rows"][0]["tokens_per_s"] == pytest.approx(tokens_of(PROMPTS) / 0.080)
    assert tokens_of(PROMPTS) < 4 * len(PROMPTS)


def test_warmup_calls_are_untimed_and_chunks_never_exceed_the_concurrency():
    chunk_sizes = []
    result = fake_profile([4, 32], repeats=2, warmup=3, chunk_sizes=chunk_sizes)
    # c=4: 3 warmup calls of 4 prompts + 2 passes x 8 chunks; c=32: 3 + 2 x 1
    assert chunk_sizes == [4] * (3 + 16) + [32] * (3 + 2)
    assert result["rows"][0]["median_wall_s"] == pytest.approx(0.080)  # warmups not in it
    assert result["parameters"]["warmup"] == 3 and result["parameters"]["repeats"] == 2


def test_latency_is_the_wall_time_of_the_chunk_that_held_the_request():
    # 32 prompts at c=24: a chunk of 24 (3 steps, 30 ms) and one of 8 (10 ms)
    result = fake_profile([24], repeats=1, warmup=0)
    row = result["rows"][0]
    assert row["latency_median_s"] == pytest.approx(0.030)  # 24 of 32 requests
    assert row["latency_p90_s"] == pytest.approx(0.030)
    assert row["median_wall_s"] == pytest.approx(0.040)


def test_progress_reports_every_generate_call_and_rows_carry_peak_rss():
    seen = []
    result = fake_profile(
        [8, 16],
        repeats=2,
        warmup=1,
        on_progress=lambda c, done, total: seen.append((c, done, total)),
    )
    assert seen[-1] == (16, 2 + 2 * 4 + 2 * 2, 14)
    assert [done for _, done, _ in seen] == list(range(1, 15))
    assert all(r["peak_rss_mb"] > 0 for r in result["rows"])


def test_out_of_memory_stops_the_sweep_and_says_where():
    clock = FakeClock()

    def make_engine(c):
        if c >= 16:
            raise MemoryError("cannot allocate the KV cache")
        return FakeEngine(c, clock, [])

    result = profile_engine(
        make_engine, PROMPTS, [4, 8, 16, 32], PARAMS, repeats=1, warmup=0, clock=clock
    )
    assert [r["c"] for r in result["rows"]] == [4, 8]
    assert result["stopped"]["concurrency"] == 16
    assert "out of memory" in result["stopped"]["reason"]


def test_other_engine_errors_propagate():
    def make_engine(c):
        raise RuntimeError("engine misconfigured")

    with pytest.raises(RuntimeError, match="misconfigured"):
        profile_engine(make_engine, PROMPTS, [1], PARAMS, repeats=1, warmup=0)


def test_a_real_clock_measures_real_sleeps():
    import time

    class SleepyEngine(FakeEngine):
        def generate(self, prompts, params):
            time.sleep(0.004 * math.ceil(len(prompts) / 4))
            return super().generate(prompts, params)

    clock = FakeClock()
    result = profile_engine(
        lambda c: SleepyEngine(c, clock, []), PROMPTS[:16], [1, 4, 16], PARAMS, repeats=1, warmup=0
    )
    by_c = {r["c"]: r["tokens_per_s"] for r in result["rows"]}
    assert by_c[4] > 2.5 * by_c[1]  # 64 ms -> 16 ms of sleep
    assert result["plateau_concurrency"] in (4, 16)


def test_write_outputs_from_a_fake_profile(tmp_path):
    result = fake_profile([1, 2, 4, 8, 16], repeats=1, warmup=0)
    written = write_outputs(result, tmp_path)
    assert {p.name for p in written} == {"profile.json", "profile.md", "profile.png"}
    md = (tmp_path / "profile.md").read_text()
    assert "| 8 |" in md and "plateau" in md and "8.00x" in md
    assert json.loads((tmp_path / "profile.json").read_text())["plateau_concurrency"] == 8


# --- the CLI ---------------------------------------------------------------------------------


def cli_args(out, **overrides):
    flags = {
        "--engine": "hf",
        "--concurrency": "1,4,16",
        "--num-prompts": "16",
        "--max-new-tokens": "4",
        "--repeats": "1",
        "--out": str(out),
    }
    flags.update(overrides)
    return ["profile-rollout", *[x for kv in flags.items() for x in kv]]


ROW_KEYS = {
    "c",
    "median_wall_s",
    "tokens_per_s",
    "responses_per_s",
    "latency_median_s",
    "latency_p90_s",
    "peak_rss_mb",
}


def test_hf_engine_small_run_writes_json_markdown_and_plot(tmp_path, capsys):
    out = tmp_path / "profile"
    assert main([*cli_args(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    result = json.loads((out / "profile.json").read_text())
    assert printed == result
    assert {
        "machine",
        "parameters",
        "rows",
        "plateau_concurrency",
        "tokens_per_s_ratio_max_over_c1",
    } <= set(result)
    assert {"processor", "cpu_count", "torch_version", "torch_threads"} <= set(result["machine"])
    assert result["parameters"]["engine"] == "hf"
    assert result["parameters"]["num_prompts"] == 16
    assert [r["c"] for r in result["rows"]] == [1, 4, 16]
    for row in result["rows"]:
        assert ROW_KEYS <= set(row)
        assert row["tokens_per_s"] > 0 and row["responses_per_s"] > 0
        assert 1 <= row["mean_response_tokens"] <= 4  # may stop early at eos
    assert result["plateau_concurrency"] in (1, 4, 16)
    assert result["tokens_per_s_ratio_max_over_c1"] >= 1
    md = (out / "profile.md").read_text()
    assert "tokens/s" in md and "plateau" in md and "profile.png" in md
    assert (out / "profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--concurrency", "0,1"),
        ("--concurrency", "4,2"),
        ("--concurrency", "2,2"),
        ("--concurrency", "1,32"),
        ("--concurrency", "1,a"),
        ("--num-prompts", "0"),
        ("--max-new-tokens", "0"),
        ("--max-new-tokens", "60"),
        ("--repeats", "0"),
        ("--warmup", "-1"),
        ("--seed", "-1"),
        ("--repeats", "x"),
        ("--engine", "vllm"),
    ],
)
def test_cli_rejects_bad_values_naming_the_flag(tmp_path, capsys, flag, value):
    assert main(cli_args(tmp_path / "out", **{flag: value})) == 2
    assert flag in capsys.readouterr().err


def test_cli_rejects_an_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(cli_args(blocker / "out")) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, flag, words",
    [
        ({"--engine": "sglang"}, "--engine sglang", "got neither"),
        (
            {"--engine": "sglang", "--sglang-url": "http://h:1", "--model-path": "."},
            "--engine sglang",
            "got both",
        ),
        ({"--sglang-url": "http://h:1"}, "--sglang-url", "sglang only"),
        ({"--engine": "sglang", "--sglang-url": "h:1"}, "--sglang-url", "http(s)://"),
        ({"--engine": "sglang", "--model-path": "/nonexistent"}, "--model-path", "config.json"),
    ],
)
def test_cli_sglang_source_flags_are_checked_before_anything_starts(
    tmp_path, capsys, extra, flag, words
):
    assert main(cli_args(tmp_path / "out", **extra)) == 2
    err = capsys.readouterr().err
    assert flag in err and words in err
    assert not (tmp_path / "out" / "profile.json").exists()


def test_sglang_profile_against_the_protocol_fake_is_continuous_and_capped(tmp_path, capsys):
    """Protocol test (tests/helpers/fake_sglang_server.py, not SGLang): each pass sends all N
    prompts with at most C in flight, and every response of max_new_tokens tokens is counted."""
    from fake_sglang_server import FakeSGLangServer

    with FakeSGLangServer(generate_delay_s=0.05) as fake:
        args = [
            "profile-rollout",
            "--engine",
            "sglang",
            "--sglang-url",
            fake.url,
            "--concurrency",
            "1,4,8",
            "--num-prompts",
            "16",
            "--max-new-tokens",
            "3",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ]
        assert main(args) == 0
        assert (
            2 <= fake.peak_in_flight <= 8
        )  # capped at the largest C (a loaded CPU may not fill it)
        assert [r for r, _ in fake.calls].count("/generate") == 3 * 16
    result = json.loads(capsys.readouterr().out)
    assert result["parameters"]["batching"] == "continuous"
    assert [row["c"] for row in result["rows"]] == [1, 4, 8]
    assert all(row["mean_response_tokens"] == 3 for row in result["rows"])
    # 50 ms per request: 16 one at a time take >= 0.8 s, 8 at a time about an eighth of that
    by_c = {row["c"]: row for row in result["rows"]}
    assert by_c[1]["median_wall_s"] >= 0.8
    assert by_c[8]["responses_per_s"] > 2 * by_c[1]["responses_per_s"]
    assert (tmp_path / "out" / "profile.png").is_file()


def test_command_is_listed_in_usage(capsys):
    assert main(["--help"]) == 0
    assert "profile-rollout" in capsys.readouterr().out
