"""The input rules every user data file is read under (hyrl/data/files.py, sources.py): text
read as bytes (UTF-8, a BOM accepted, any other byte named by file, line and byte offset),
parquet known by its content whatever its name, and a directory of shards imported whole or
refused naming the shards at fault. Both readers are held to them: --prompt-data and
--eval-prompt-data (load_records) and `hyrl data import` (import_rows, the CLI)."""

import gzip
import json
import re

import pytest
from data_files import data_import as import_cli
from data_files import write_jsonl, write_parquet
from testpaths import DATA

from hyrl.config import ConfigError, parse_args, resolve
from hyrl.data.importer import PRESETS, ImportDataError, import_rows
from hyrl.data.prompt_data import PromptDataError, load_records
from hyrl.train.preflight import preflight_data

# 33 bytes with its newline: { "prompt" : _ "1+1=" , _ "label" : _ "2" } is 1+8+1+1+6+1+1+7+1+1+3+1.
GOOD_LINE = b'{"prompt": "1+1=", "label": "2"}\n'
# Latin-1 "café": the é is the single byte 0xE9, 15 bytes into the line ({"prompt": "caf).
LATIN1_LINE = b'{"prompt": "caf\xe9", "label": "1"}\n'
BOM = b"\xef\xbb\xbf"


def problems(*numbers):
    return [{"problem": f"Find {n}.", "answer": str(n)} for n in numbers]


# --- text is UTF-8, read as bytes -----------------------------------------------------------
def test_a_latin1_byte_at_line_99_of_prompt_data_names_file_line_and_byte_offset(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(GOOD_LINE * 98 + LATIN1_LINE + GOOD_LINE)
    with pytest.raises(PromptDataError) as info:
        load_records(str(path))
    # 98 lines of 33 bytes = 3234, then 15 bytes before the é: offset 3249 from the file's start
    assert str(info.value).startswith(
        f"{path} line 99, byte offset 3249: not UTF-8 (found 0xE9: invalid continuation byte); "
        "allowed: UTF-8 text (a UTF-8 BOM at the start is accepted)"
    )


def test_hyrl_train_refuses_the_latin1_prompt_file_before_any_process_group(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(GOOD_LINE * 98 + LATIN1_LINE)
    argv = ["--run-dir", str(tmp_path / "run"), "--prompt-data", str(path)]
    argv += ["--tokenizer-path", str(DATA / "tiny_tokenizer"), "--rm-type", "exact_match"]
    cfg = resolve(parse_args(argv))
    with pytest.raises(ConfigError) as info:
        preflight_data(cfg.data, cfg.model, cfg.dynamic_sampling_filter_path)
    assert info.value.flag == "--prompt-data" and "\n" not in str(info.value)
    assert f"{path} line 99, byte offset 3249: not UTF-8 (found 0xE9" in str(info.value)


def test_a_latin1_byte_in_a_json_list_source_names_its_line_and_byte_offset(tmp_path):
    path = tmp_path / "aime.json"
    path.write_bytes(b'[\n{"problem": "Find 1.", "answer": "1"},\n{"problem": "caf\xe9"}\n]\n')
    # line 1 "[\n" is 2 bytes, line 2 is 39, the é 16 bytes into line 3 ({"problem": "caf)
    with pytest.raises(ImportDataError, match=r"aime.json line 3, byte offset 57: not UTF-8"):
        import_rows(str(path), PRESETS["aime"])


def test_a_utf8_bom_at_the_start_is_accepted_by_both_readers(tmp_path):
    prompts = tmp_path / "bom.jsonl"
    prompts.write_bytes(BOM + GOOD_LINE + GOOD_LINE)
    assert load_records(str(prompts)) == [{"prompt": "1+1=", "label": "2"}] * 2
    source = tmp_path / "bom.json"
    source.write_bytes(BOM + json.dumps(problems(1)).encode())
    assert [r["label"] for r in import_rows(str(source), PRESETS["aime"]).records] == ["1"]


def test_a_bom_line_after_a_latin1_one_still_counts_bytes_from_the_files_start(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(BOM + GOOD_LINE + LATIN1_LINE)
    # the 3 BOM bytes are counted: 3 + 33 + 15
    with pytest.raises(PromptDataError, match=r"bom.jsonl line 2, byte offset 51: not UTF-8"):
        load_records(str(path))


@pytest.mark.parametrize(
    "content,named",
    [
        (
            gzip.compress(GOOD_LINE, mtime=0),
            "a gzip file (starts with bytes 1F 8B), not UTF-8 text; decompress it first",
        ),
        (
            GOOD_LINE.decode().encode("utf-16-le"),  # no BOM: the bytes are not UTF-8 anyway
            "a NUL byte at byte offset 1: UTF-16 text or a binary file, not UTF-8 text",
        ),
        (
            GOOD_LINE.decode().encode("utf-16"),  # with a BOM, as Windows Notepad saves it
            "UTF-16 text (little-endian BOM) (starts with bytes FF FE), not UTF-8 text",
        ),
    ],
    ids=["gzip", "utf16", "utf16-bom"],  # the same on every xdist worker
)
def test_a_gzip_or_utf16_file_named_jsonl_is_named_for_what_it_is(tmp_path, content, named):
    path = tmp_path / "p.jsonl"
    path.write_bytes(content)
    with pytest.raises(PromptDataError, match=re.escape(f"p.jsonl: {named}")):
        load_records(str(path))


# --- parquet by its content -----------------------------------------------------------------
def test_a_parquet_file_named_jsonl_is_read_as_parquet_by_both_readers(tmp_path, capsys):
    path = write_parquet(tmp_path / "p.jsonl", [{"prompt": "1+1=", "label": "2"}])
    assert load_records(path) == [{"prompt": "1+1=", "label": "2"}]
    source = write_parquet(tmp_path / "aime.jsonl", problems(7))
    (record,) = import_rows(source, PRESETS["aime"]).records
    assert record["label"] == "7" and record["source"] == "aime.jsonl row 0"
    rc, out, _ = import_cli(capsys, source, "--preset", "aime", "--out", tmp_path / "o.jsonl")
    assert rc == 0
    assert f"note: {source} is parquet by its content and was read as parquet" in out


def test_a_file_named_parquet_that_is_not_parquet_is_refused_not_read_as_text(tmp_path):
    path = write_jsonl(tmp_path / "p.parquet", [{"prompt": "1+1=", "label": "2"}])
    message = r"p.parquet: named .parquet but not a parquet file: it starts with b'\{\"pr'"
    with pytest.raises(PromptDataError, match=message):
        load_records(path)
    with pytest.raises(ImportDataError, match=message):
        import_rows(path, PRESETS["aime"])


# --- a directory of shards ------------------------------------------------------------------
def test_a_directory_of_two_parquet_and_one_jsonl_shard_imports_all_three(tmp_path, capsys):
    shards = tmp_path / "data"
    shards.mkdir()
    write_parquet(shards / "train-00000-of-00003.parquet", problems(1, 2))
    write_parquet(shards / "train-00001-of-00003.parquet", problems(3))
    write_jsonl(shards / "train-00002-of-00003.jsonl", problems(4, 5))
    result = import_rows(str(shards), PRESETS["aime"])
    assert [r["source"] for r in result.records] == [
        "train-00000-of-00003.parquet row 0",
        "train-00000-of-00003.parquet row 1",
        "train-00001-of-00003.parquet row 0",
        "train-00002-of-00003.jsonl line 1",
        "train-00002-of-00003.jsonl line 2",
    ]
    rc, out, _ = import_cli(capsys, shards, "--preset", "aime", "--out", tmp_path / "o.jsonl")
    assert rc == 0
    assert out.startswith(f"read 5 rows from 3 files (2 parquet, 1 jsonl) in {shards} (")


def test_a_shard_missing_from_its_numbering_is_refused_naming_it(tmp_path):
    shards = tmp_path / "data"
    shards.mkdir()
    write_parquet(shards / "train-00000-of-00003.parquet", problems(1))
    write_parquet(shards / "train-00002-of-00003.parquet", problems(3))
    with pytest.raises(
        ImportDataError,
        match=r"1 of 3 shards named train-K-of-00003 are missing: train-00001-of-00003; ",
    ):
        import_rows(str(shards), PRESETS["aime"])


def test_one_shard_in_two_formats_is_refused_naming_both_files(tmp_path):
    shards = tmp_path / "data"
    shards.mkdir()
    write_parquet(shards / "train-00000-of-00002.parquet", problems(1))
    write_parquet(shards / "train-00001-of-00002.parquet", problems(2))
    write_jsonl(shards / "train-00001-of-00002.jsonl", problems(2))
    with pytest.raises(
        ImportDataError,
        match=r"train-00001-of-00002.jsonl and train-00001-of-00002.parquet are both shard 1 "
        r"of 00002 of train; keep one of them",
    ):
        import_rows(str(shards), PRESETS["aime"])


def test_a_directorys_entries_that_are_not_shards_are_named_in_the_report(tmp_path, capsys):
    shards = tmp_path / "snapshot"
    (shards / "extra").mkdir(parents=True)
    (shards / "README.md").write_text("# a dataset card\n")
    (shards / ".gitattributes").write_text("*.parquet filter=lfs\n")  # hidden: skipped
    write_parquet(shards / "train", problems(1))  # parquet by its content, no extension
    rc, out, _ = import_cli(capsys, shards, "--preset", "aime", "--out", tmp_path / "o.jsonl")
    assert rc == 0
    assert out.splitlines()[:3] == [
        f"read 1 rows from {shards} (problem/answer: a bare problem and its answer)",
        f"note: {shards / 'train'} is parquet by its content and was read as parquet",
        "not read (not a .parquet, .jsonl or .json shard): README.md, extra/",
    ]


# --- the CLI: one line, exit 2, nothing written ---------------------------------------------
def test_the_import_cli_refuses_latin1_text_in_one_line_and_writes_nothing(tmp_path, capsys):
    source = tmp_path / "s.jsonl"
    source.write_bytes(b'{"problem": "Find 1.", "answer": "1"}\n' + LATIN1_LINE)
    out = tmp_path / "o.jsonl"
    rc, printed, err = import_cli(capsys, source, "--preset", "aime", "--out", out)
    assert rc == 2 and printed == "" and not out.exists()
    assert err.count("\n") == 1 and "Traceback" not in err
    # line 1 is 38 bytes, the é 15 bytes into line 2
    assert err.startswith(f"hyrl data import: error: {source} line 2, byte offset 53: not UTF-8")


def test_the_import_cli_names_an_out_it_cannot_write_in_one_line(tmp_path, capsys):
    source = write_jsonl(tmp_path / "s.jsonl", problems(1))
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "o.jsonl"  # under a file, not a directory
    rc, _, err = import_cli(capsys, source, "--preset", "aime", "--out", out)
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("hyrl data import: error: ") and str(tmp_path / "file") in err
