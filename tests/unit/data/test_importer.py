"""`hyrl data import` (hyrl/data/importer.py, hyrl/data/import_cli.py): each layout users
download, built here as a tiny local file with the real column names and types (docs/data.md
names where each was seen), turned into prompt/label jsonl that --prompt-data loads."""

import json
import os

import pytest
from data_files import data_import as run
from data_files import write_jsonl, write_parquet
from testpaths import DATA

from hyrl.data.importer import (
    BOXED_AFTER,
    DAPO_AFTER,
    DAPO_BEFORE,
    PRESETS,
    ImportDataError,
    import_rows,
)
from hyrl.data.prompt_data import load_records


def dapo(problem):
    return DAPO_BEFORE + problem + DAPO_AFTER


def verl_row(content, answer, index, role="user"):
    """A row of BytedTsinghua-SIA/DAPO-Math-17k's parquet: the same columns and nesting."""
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": content, "role": role}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": index},
    }


# --- the layouts ----------------------------------------------------------------------------
def test_verl_parquet_keeps_the_dapo_prompt_and_drops_its_repeats(tmp_path):
    # DAPO-Math-17k's parquet repeats each prompt ~100 times; an exact repeat is dropped.
    rows = [
        verl_row(dapo("What is $1+1$?"), "2", "a1"),
        verl_row(dapo("Find $x$ if $2x=8$."), "4", "b2"),
        verl_row(dapo("What is $1+1$?"), "2", "a1-again"),
    ]
    result = import_rows(write_parquet(tmp_path / "dapo.parquet", rows), PRESETS["dapo-math"])
    assert result.layout == "verl" and result.rows_read == 3 and result.duplicates_dropped == 1
    assert result.records == [
        {
            "prompt": dapo("What is $1+1$?"),
            "label": "2",
            "id": "a1",
            "source": "dapo.parquet row 0",
        },
        {
            "prompt": dapo("Find $x$ if $2x=8$."),
            "label": "4",
            "id": "b2",
            "source": "dapo.parquet row 1",
        },
    ]
    assert result.wrapped == 0  # a verl prompt carries its instruction: kept as written
    assert result.answer_formats == {"answer_line": 2, "boxed": 0, "none": 0}
    assert result.rm_type == "dapo"


def test_slime_jsonl_with_chat_messages_or_a_string_prompt(tmp_path):
    # zhuzilin/dapo-math-17k: "prompt" is a list of messages (slime applies the chat template
    # to it with --apply-chat-template), "label" the answer.
    path = write_jsonl(
        tmp_path / "dapo-math-17k.jsonl",
        [
            {"prompt": [{"content": dapo("What is $2+3$?"), "role": "user"}], "label": "5"},
            {"prompt": dapo("What is $3+3$?"), "label": 6},  # a string prompt, a number label
        ],
    )
    result = import_rows(path, PRESETS["dapo-math"])
    assert result.layout == "slime"
    assert [(r["prompt"], r["label"]) for r in result.records] == [
        (dapo("What is $2+3$?"), "5"),
        (dapo("What is $3+3$?"), "6"),
    ]
    assert [r["id"] for r in result.records] == [
        "dapo-math-17k.jsonl line 1",
        "dapo-math-17k.jsonl line 2",
    ]


def test_math500_problem_answer_jsonl_gets_the_boxed_instruction(tmp_path):
    # HuggingFaceH4/MATH-500's test.jsonl: problem, solution, answer, subject, level, unique_id.
    row = {
        "problem": "Compute $\\dbinom{4}{2}$.",
        "solution": "$\\dbinom{4}{2} = \\boxed{6}$.",
        "answer": "6",
        "subject": "Counting & Probability",
        "level": 2,
        "unique_id": "test/counting_and_probability/1.json",
    }
    result = import_rows(write_jsonl(tmp_path / "test.jsonl", [row]), PRESETS["math500"])
    assert result.layout == "problem/answer" and result.wrapped == 1
    (record,) = result.records
    assert record["prompt"] == (
        "Compute $\\dbinom{4}{2}$. Let's think step by step and output the final answer "
        "within \\boxed{}."
    )
    assert record["label"] == "6" and record["id"] == "test/counting_and_probability/1.json"
    assert result.rm_type == "math"


def test_capitalised_aime_columns_and_a_number_answer(tmp_path):
    # Maxwell-Jia/AIME_2024: ID, Problem, Solution, Answer (an integer).
    row = {"ID": "2024-I-1", "Problem": "Every morning Aya walks.", "Solution": "", "Answer": 204}
    result = import_rows(write_parquet(tmp_path / "aime.parquet", [row]), PRESETS["aime"])
    assert result.records == [
        {
            "prompt": "Every morning Aya walks." + BOXED_AFTER,
            "label": "204",
            "id": "2024-I-1",
            "source": "aime.parquet row 0",
        }
    ]


def test_question_is_the_problem_column_too(tmp_path):
    # opencompass/AIME2025: question, answer.
    path = write_jsonl(tmp_path / "aime25.jsonl", [{"question": "Find 70.", "answer": "70"}])
    (record,) = import_rows(path, PRESETS["aime"]).records
    assert record["prompt"] == "Find 70." + BOXED_AFTER and record["label"] == "70"


def test_a_bare_problem_under_dapo_math_gets_dapos_instruction(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"problem": "What is $1+1$?", "answer": "2"}])
    result = import_rows(path, PRESETS["dapo-math"])
    assert result.records[0]["prompt"] == dapo("What is $1+1$?") and result.rm_type == "dapo"


def test_aime_prompts_that_ask_for_an_answer_line_are_meant_for_the_dapo_reward(tmp_path):
    # zhuzilin/aime-2024 and BytedTsinghua-SIA/AIME-2024 carry DAPO's instruction: the reward
    # follows what the prompt asks for, not the preset's default.
    path = write_jsonl(
        tmp_path / "aime-2024.jsonl",
        [{"prompt": [{"role": "user", "content": dapo("Find 204.")}], "label": "204"}],
    )
    assert import_rows(path, PRESETS["aime"]).rm_type == "dapo"


def test_prompts_without_an_answer_format_get_the_presets_reward_and_a_warning(tmp_path, capsys):
    src = write_jsonl(tmp_path / "s.jsonl", [{"prompt": "3+4=", "label": "7"}])
    rc, out, _ = run(capsys, src, "--preset", "aime", "--out", tmp_path / "o.jsonl")
    assert rc == 0
    assert '0 an "Answer:" line (DAPO), 0 \\boxed{}, 1 neither' in out
    assert "warning: 1 of 1 prompts ask for no answer format; --rm-type math" in out


def test_a_directory_of_parquet_shards_is_read_in_name_order(tmp_path):
    shards = tmp_path / "data"
    shards.mkdir()
    write_parquet(shards / "train-00001-of-00002.parquet", [verl_row(dapo("B"), "2", "b")])
    write_parquet(shards / "train-00000-of-00002.parquet", [verl_row(dapo("A"), "1", "a")])
    result = import_rows(str(shards), PRESETS["dapo-math"])
    assert [r["source"] for r in result.records] == [
        "train-00000-of-00002.parquet row 0",
        "train-00001-of-00002.parquet row 0",
    ]


def test_a_json_list_is_read(tmp_path):
    path = tmp_path / "aime.json"
    path.write_text(json.dumps([{"problem": "Find 1.", "answer": 1}]))
    (record,) = import_rows(str(path), PRESETS["aime"]).records
    assert record["label"] == "1" and record["source"] == "aime.json item 0"


def test_a_single_ground_truth_in_a_list_is_the_label(tmp_path):
    # verl's dataset README shows "ground_truth": ["72"].
    row = verl_row("Natalia sold 48 clips ... \\boxed{}", ["72"], 0)
    (record,) = import_rows(write_jsonl(tmp_path / "g.jsonl", [row]), PRESETS["math500"]).records
    assert record["label"] == "72" and record["id"] == "0"


@pytest.mark.parametrize(
    "sample,preset,rows,written,wrapped,rm_type",
    [
        ("dapo_sample.parquet", "dapo-math", 6, 3, 0, "dapo"),
        ("math500_sample.jsonl", "math500", 3, 3, 3, "math"),
        ("aime_sample.parquet", "aime", 2, 2, 2, "math"),
        ("slime_aime_sample.jsonl", "aime", 2, 2, 0, "dapo"),
    ],
)
def test_the_checked_in_samples_import_as_docs_data_md_shows(
    sample, preset, rows, written, wrapped, rm_type
):
    result = import_rows(str(DATA / "import_samples" / sample), PRESETS[preset])
    assert (result.rows_read, len(result.records), result.wrapped) == (rows, written, wrapped)
    assert result.rm_type == rm_type
    assert [r["label"] for r in result.records] == ["2", "9", "15"][:written]


# --- duplicates -----------------------------------------------------------------------------
def test_keep_duplicates_keeps_every_row(tmp_path):
    rows = [{"problem": "P", "answer": "1"}] * 3
    result = import_rows(
        write_jsonl(tmp_path / "d.jsonl", rows), PRESETS["aime"], keep_duplicates=True
    )
    assert len(result.records) == 3 and result.duplicates_dropped == 0


def test_a_prompt_with_two_labels_keeps_both_and_is_counted(tmp_path, capsys):
    rows = [{"problem": "P", "answer": "1"}, {"problem": "P", "answer": "2"}]
    src = write_jsonl(tmp_path / "d.jsonl", rows)
    rc, out, _ = run(capsys, src, "--preset", "aime", "--out", tmp_path / "o.jsonl")
    assert rc == 0
    assert "note: 1 prompts appear with more than one label (each pair kept)" in out
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 2


# --- refusals -------------------------------------------------------------------------------
def test_an_unknown_layout_is_refused_naming_the_columns_and_writes_nothing(tmp_path, capsys):
    src = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [], "completion": "hi"}])
    out = tmp_path / "o.jsonl"
    rc, _, err = run(capsys, src, "--preset", "math500", "--out", out)
    assert rc == 2 and not out.exists()
    assert f"{src} line 1: unknown layout, columns found: ['completion', 'messages']" in err
    assert "layouts: verl (prompt + reward_model.ground_truth); slime (prompt + label); pro" in err


def test_problem_in_two_cases_is_ambiguous(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"problem": "p", "Problem": "p", "answer": "1"}])
    with pytest.raises(ImportDataError, match=r"ambiguous columns \['Problem', 'answer', 'probl"):
        import_rows(path, PRESETS["aime"])


@pytest.mark.parametrize(
    "messages,found",
    [
        (
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
            "2 message(s) with roles ['system', 'user']",
        ),
        (
            [{"role": "user", "content": "1+1?"}, {"role": "user", "content": "and 2+2?"}],
            "2 message(s) with roles ['user', 'user']",
        ),
        ([{"role": "assistant", "content": "2"}], "1 message(s) with roles ['assistant']"),
    ],
)
def test_a_prompt_that_is_not_one_user_message_is_refused(tmp_path, messages, found):
    rows = [{"prompt": [{"role": "user", "content": "ok"}], "label": "1"}]
    rows.append({"prompt": messages, "label": "2"})
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(ImportDataError) as info:
        import_rows(path, PRESETS["math500"])
    assert str(info.value).startswith(f"{path} line 2: 'prompt' holds {found}; a prompt must")


def test_a_non_text_message_content_is_refused(tmp_path):
    row = {"prompt": [{"role": "user", "content": [{"type": "image"}]}], "label": "1"}
    with pytest.raises(ImportDataError, match="user message content is a list, not text"):
        import_rows(write_jsonl(tmp_path / "m.jsonl", [row]), PRESETS["math500"])


@pytest.mark.parametrize(
    "answer,found",
    [(["1", "2"], "holds 2 answers"), (True, "is a boolean"), ({"x": 1}, "is a dict")],
)
def test_an_answer_that_is_not_one_value_is_refused(tmp_path, answer, found):
    path = write_jsonl(tmp_path / "a.jsonl", [verl_row("p \\boxed{}", answer, 0)])
    with pytest.raises(ImportDataError, match=f"line 1: 'reward_model.ground_truth' {found}"):
        import_rows(path, PRESETS["math500"])


def test_incomplete_rows_are_refused_or_dropped_and_counted(tmp_path, capsys):
    rows = [
        {"problem": "Find 1.", "answer": "1"},
        {"problem": " ", "answer": "2"},
        {"problem": "Find 3.", "answer": None},
        {"problem": "Find 4.", "answer": ""},
    ]
    src = write_jsonl(tmp_path / "i.jsonl", rows)
    out = tmp_path / "o.jsonl"
    rc, _, err = run(capsys, src, "--preset", "aime", "--out", out)
    assert rc == 2 and not out.exists()
    assert (
        f"3 incomplete row(s): {src} line 2 (no prompt); {src} line 3 (no answer); "
        f"{src} line 4 (no answer); fix the source or pass --drop-incomplete" in err
    )
    rc, printed, _ = run(capsys, src, "--preset", "aime", "--out", out, "--drop-incomplete")
    assert rc == 0
    assert "dropped 0 duplicates (same prompt and label as an earlier row), 3 incomplete" in printed
    assert [r["label"] for r in load_records(str(out))] == ["1"]


def test_more_than_five_incomplete_rows_list_five_and_count_the_rest(tmp_path):
    rows = [{"problem": f"Find {i}.", "answer": None} for i in range(7)]
    with pytest.raises(ImportDataError) as info:
        import_rows(write_jsonl(tmp_path / "i.jsonl", rows), PRESETS["aime"])
    assert str(info.value).startswith("7 incomplete row(s): ")
    assert "line 5 (no answer) and 2 more; fix the source" in str(info.value)
    assert "line 6" not in str(info.value)


def test_a_source_without_rows_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ImportDataError, match="empty.jsonl: no prompts to write \\(0 rows read"):
        import_rows(str(tmp_path / "empty.jsonl"), PRESETS["aime"])


def test_a_row_missing_the_layouts_column_is_refused(tmp_path):
    rows = [{"problem": "Find 1.", "answer": "1"}, {"problem": "Find 2."}]
    with pytest.raises(ImportDataError, match=r"line 2: no column 'answer' \(problem/answer lay"):
        import_rows(write_jsonl(tmp_path / "r.jsonl", rows), PRESETS["aime"])


def test_a_jsonl_line_that_is_not_json_is_refused_naming_file_and_line(tmp_path):
    # blank lines are skipped but counted: the bad line is the file's third
    source = tmp_path / "r.jsonl"
    source.write_text('{"problem": "Find 1.", "answer": "1"}\n\n{"problem": "Find 2.", \n')
    with pytest.raises(ImportDataError, match=r"r.jsonl line 3: not valid JSON \(Expecting"):
        import_rows(str(source), PRESETS["aime"])


def test_out_is_never_replaced_without_force_and_is_written_whole(tmp_path, capsys):
    src = write_jsonl(tmp_path / "s.jsonl", [{"problem": "Find 1.", "answer": "1"}])
    out = tmp_path / "o.jsonl"
    out.write_text("mine\n")
    rc, _, err = run(capsys, src, "--preset", "aime", "--out", out)
    assert rc == 2 and f"--out {out}: exists; pass --force to replace it" in err
    assert out.read_text() == "mine\n"
    assert run(capsys, src, "--preset", "aime", "--out", out, "--force")[0] == 0
    assert load_records(str(out))[0]["label"] == "1"
    assert sorted(os.listdir(tmp_path)) == ["o.jsonl", "s.jsonl"]  # no temporary file left


def test_a_bad_row_at_the_end_leaves_nothing_written(tmp_path, capsys):
    rows = [{"problem": "Find 1.", "answer": "1"}] * 3 + [{"problem": "Find 2.", "answer": [1, 2]}]
    src = write_jsonl(tmp_path / "s.jsonl", rows)
    rc, _, err = run(capsys, src, "--preset", "aime", "--out", tmp_path / "new" / "o.jsonl")
    assert rc == 2 and f"{src} line 4: 'answer' holds 2 answers" in err
    assert sorted(os.listdir(tmp_path)) == ["s.jsonl"]


@pytest.mark.parametrize(
    "source,out,message",
    [
        ("s.csv", "o.jsonl", "s.csv: unsupported extension; allowed: .parquet, .jsonl, .json"),
        ("missing.parquet", "o.jsonl", "missing.parquet: no such file"),
        ("s.jsonl", "o.parquet", "o.parquet: must end with .jsonl"),
    ],
)
def test_bad_paths_are_refused(tmp_path, capsys, source, out, message):
    (tmp_path / "s.csv").write_text("problem,answer\n")
    write_jsonl(tmp_path / "s.jsonl", [{"problem": "Find 1.", "answer": "1"}])
    rc, _, err = run(capsys, tmp_path / source, "--preset", "aime", "--out", tmp_path / out)
    assert rc == 2 and message in err


# --- what the user is told ------------------------------------------------------------------
def test_the_printed_flags_load_the_written_file(tmp_path, capsys):
    rows = [verl_row(dapo("What is $1+1$?"), "2", "a")] * 2
    src = write_parquet(tmp_path / "dapo.parquet", rows)
    out = tmp_path / "dapo.jsonl"
    rc, printed, _ = run(capsys, src, "--preset", "dapo-math", "--out", out)
    assert rc == 0
    assert printed.splitlines() == [
        f"read 2 rows from {src} (verl: prompt + reward_model.ground_truth)",
        "preset dapo-math: 0 bare problems given its instruction, 2 prompts kept as written",
        "dropped 1 duplicates (same prompt and label as an earlier row), 0 incomplete",
        'answer format asked for: 1 an "Answer:" line (DAPO), 0 \\boxed{}, 0 neither',
        f"wrote 1 prompts to {out}",
        "train on it:",
        f"  --prompt-data {out} --input-key prompt --label-key label --apply-chat-template "
        "--rm-type dapo",
        "or evaluate on it (same --input-key, --label-key, --apply-chat-template):",
        f"  --eval-prompt-data NAME {out}",
    ]
    assert load_records(str(out), "prompt", "label") == [
        {"prompt": dapo("What is $1+1$?"), "label": "2"}
    ]
