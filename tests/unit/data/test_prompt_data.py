"""Prompt datasets from .jsonl/.parquet files (hyrl/data/prompt_data.py) and the sample files."""

import json
import os

import pytest
from testpaths import DATA

from hyrl.data.arith import ArithTask, Prompt
from hyrl.data.prompt_data import (
    PromptDataError,
    PromptDataset,
    encode_prompt,
    load_eval_prompt_sets,
    load_prompt_dataset,
    load_records,
    load_tokenizer,
)
from hyrl.data.tokenizer import build_tokenizer

DATA = str(DATA)
TINY_TOKENIZER = os.path.join(DATA, "tiny_tokenizer")


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_TOKENIZER)


# --- records -----------------------------------------------------------------------------------
def test_math_sample_jsonl_and_parquet_hold_the_same_records():
    jsonl = load_records(os.path.join(DATA, "math_sample.jsonl"), "prompt", "label")
    parquet = load_records(os.path.join(DATA, "math_sample.parquet"), "prompt", "label")
    assert len(jsonl) == 24 and jsonl == parquet
    assert jsonl[3]["label"] == r"\frac{7}{8}"
    assert jsonl[7]["label"] == "12"  # a JSON number label becomes text
    assert jsonl[13]["label"] == "0.75"


def test_sample_files_load():
    assert len(load_records(os.path.join(DATA, "mcq_sample.jsonl"))) == 12
    logic = load_records(os.path.join(DATA, "logic_sample.jsonl"))
    assert len(logic) == 12
    assert json.loads(logic[0]["label"]) == {"alice": "knight", "bob": "knave"}
    assert json.loads(logic[4]["label"]) == ["amy", "ben", "cal"]
    assert logic[10]["label"] == '{"q_lit": true}'
    assert len(load_records(os.path.join(DATA, "tiny_arith.jsonl"))) == 100


def test_blank_lines_are_skipped_and_other_keys_chosen(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl",
        ['{"q": "1+1=", "a": 2}', "", "   ", '{"q": "2+2=", "a": "4", "extra": 1}'],
    )
    assert load_records(path, "q", "a") == [
        {"prompt": "1+1=", "label": "2"},
        {"prompt": "2+2=", "label": "4"},
    ]


@pytest.mark.parametrize(
    "lines,message",
    [
        (['{"prompt": "a", "label": "1"}', '{"prompt": "b", "label": '], r"line 2: not valid JSON"),
        (
            ['{"prompt": "a", "label": "1"}', "", '{"question": "b", "label": "1"}'],
            r"line 3: no key 'prompt' \(--input-key\); the record has keys \['label', 'question'\]",
        ),
        (
            ['{"prompt": "a"}'],
            r"line 1: no key 'label' \(--label-key\); the record has keys \['prompt'\]",
        ),
        (['{"prompt": 7, "label": "1"}'], r"line 1: prompt 'prompt' is a int, not a string"),
        (['{"prompt": "  ", "label": "1"}'], r"line 1: prompt 'prompt' is empty"),
        (['{"prompt": "a", "label": null}'], r"line 1: label 'label' is null"),
        (['["prompt", "label"]'], r"line 1: expected a JSON object, got a list"),
        (["", "  "], r"empty, no records"),
    ],
)
def test_jsonl_errors_name_file_line_and_problem(tmp_path, lines, message):
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(PromptDataError, match=message) as info:
        load_records(path, "prompt", "label")
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unsupported_extension_lists_the_allowed_ones(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[]")
    with pytest.raises(
        PromptDataError,
        match=r"p.json: unsupported extension; allowed: "
        r"\.jsonl, \.parquet",
    ):
        load_records(str(path))


def test_missing_file_is_named():
    with pytest.raises(PromptDataError, match="nope.jsonl: no such file"):
        load_records("nope.jsonl")


def test_parquet_missing_column_lists_the_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"question": ["1+1="], "answer": ["2"]}), path)
    with pytest.raises(
        PromptDataError,
        match=r"p.parquet row 0: no column 'prompt' "
        r"\(--input-key\); the file has columns "
        r"\['answer', 'question'\]",
    ):
        load_records(path)
    assert load_records(path, "question", "answer") == [{"prompt": "1+1=", "label": "2"}]


def test_parquet_bad_row_is_named(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"prompt": ["a", None], "label": ["1", "2"]}), path)
    with pytest.raises(PromptDataError, match=r"p.parquet row 1: prompt 'prompt' is a NoneType"):
        load_records(path)


# --- tokenizer ---------------------------------------------------------------------------------
def test_tiny_tokenizer_encodes_like_the_builtin_task(tokenizer):
    # bos + one id per character, with or without the chat template: what ArithTask feeds the model
    builtin = {p.text: p.prompt_ids for p in ArithTask(build_tokenizer()).all_prompts()}
    assert encode_prompt(tokenizer, "3+4=", apply_chat_template=False) == builtin["3+4="]
    assert encode_prompt(tokenizer, "3+4=", apply_chat_template=True) == builtin["3+4="]
    assert builtin["3+4="] == [2, 6, 13, 7, 14]


def test_chat_template_wraps_the_prompt_as_a_user_message(tokenizer):
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1+2="}], add_generation_prompt=True, tokenize=False
    )
    assert rendered == "<bos>1+2="
    assert (
        encode_prompt(tokenizer, "1+2=", True)
        == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    )


def test_chat_template_required_with_the_flag(tmp_path):
    build_tokenizer().save_pretrained(str(tmp_path))  # no chat template
    plain = load_tokenizer(str(tmp_path))
    assert encode_prompt(plain, "3+4=", apply_chat_template=False) == [6, 13, 7, 14]
    with pytest.raises(
        ValueError,
        match=r"--apply-chat-template: the tokenizer at .*"
        + str(tmp_path.name)
        + ".* has no chat template",
    ):
        encode_prompt(plain, "3+4=", apply_chat_template=True)


def test_load_tokenizer_errors_name_the_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match="--tokenizer-path .*not an existing directory"):
        load_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="--tokenizer-path .*cannot load a tokenizer"):
        load_tokenizer(str(tmp_path))  # an empty directory


# --- dataset -----------------------------------------------------------------------------------
def records(*texts):
    return [{"prompt": t, "label": str(i)} for i, t in enumerate(texts)]


def test_too_long_prompts_are_dropped_and_counted(tokenizer):
    # plain encoding adds bos: "1+2=" is 5 tokens, "11+22=" is 7, "111+222=" is 9
    dataset = PromptDataset(
        records("1+2=", "11+22=", "111+222="),
        tokenizer,
        apply_chat_template=False,
        max_prompt_len=7,
        seed=0,
    )
    assert dataset.dropped_too_long == 1
    assert [p.text for p in dataset.prompts()] == ["1+2=", "11+22="]
    assert [p.index for p in dataset.prompts()] == [0, 1]
    assert len(dataset) == 2


def test_no_prompt_short_enough_is_an_error(tokenizer):
    with pytest.raises(
        PromptDataError,
        match=r"all 2 prompts are longer than "
        r"--rollout-max-prompt-len=4 tokens \(longest 7\)",
    ):
        PromptDataset(
            records("1+2=", "11+22="),
            tokenizer,
            apply_chat_template=False,
            max_prompt_len=4,
            seed=0,
        )


def test_epochs_are_deterministic_shuffles_and_batches_straddle_them(tokenizer):
    texts = [f"{a}+{a}=" for a in range(10)]

    def stream(seed, batch_sizes):
        dataset = PromptDataset(
            records(*texts), tokenizer, apply_chat_template=False, max_prompt_len=None, seed=seed
        )
        return [[p.text for p in dataset.next_batch(n)] for n in batch_sizes]

    first = sum(stream(0, [7, 7, 6]), [])  # 20 prompts = 2 epochs; batch 2 straddles them
    assert sorted(first[:10]) == sorted(texts) and sorted(first[10:]) == sorted(texts)
    assert first[:10] != first[10:]  # reshuffled per epoch
    assert first == sum(stream(0, [20]), [])  # same seed, same stream, however it is batched
    assert first != sum(stream(1, [20]), [])


def test_next_batch_indexes_the_stream_and_resumes(tokenizer):
    dataset = PromptDataset(
        records("1+1=", "2+2=", "3+3="),
        tokenizer,
        apply_chat_template=False,
        max_prompt_len=None,
        seed=3,
    )
    batch = dataset.next_batch(4)
    assert [p.index for p in batch] == [0, 1, 2, 3] and isinstance(batch[0], Prompt)
    state = dataset.state_dict()
    expected = [p.text for p in dataset.next_batch(5)]
    resumed = PromptDataset(
        records("1+1=", "2+2=", "3+3="),
        tokenizer,
        apply_chat_template=False,
        max_prompt_len=None,
        seed=0,
    )
    resumed.load_state_dict(state)
    assert [p.text for p in resumed.next_batch(5)] == expected


def test_tiny_arith_file_through_the_run_flags(tokenizer):
    dataset = load_prompt_dataset(
        os.path.join(DATA, "tiny_arith.jsonl"),
        tokenizer,
        apply_chat_template=True,
        max_prompt_len=5,
        seed=0,
    )
    assert len(dataset) == 100 and dataset.dropped_too_long == 0
    by_text = {p.text: p for p in dataset.prompts()}
    assert by_text["3+4="].label == "7" and by_text["9+8="].label == "7"
    assert by_text["3+4="].prompt_ids == [2, 6, 13, 7, 14]


def test_eval_sets_are_loaded_by_name(tokenizer):
    path = os.path.join(DATA, "tiny_arith.jsonl")
    sets = load_eval_prompt_sets(["easy", path, "same", path], tokenizer)
    assert list(sets) == ["easy", "same"] and len(sets["easy"]) == 100
    with pytest.raises(ValueError, match="NAME FILE pairs"):
        load_eval_prompt_sets(["easy"], tokenizer)
