"""Specification of the built-in task: tokenizer, arith_mod10 prompts and the exact-match reward."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from hyrl.data.arith import ArithTask, Prompt
from hyrl.data.tokenizer import TOKENIZER_VOCAB_SIZE, build_tokenizer
from hyrl.rewards.exact_match import ExactMatchReward


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


# --- tokenizer ----------------------------------------------------------------------------


def test_vocabulary_has_16_tokens_in_a_fixed_order(tok):
    expected = {
        "<pad>": 0,
        "<eos>": 1,
        "<bos>": 2,
        **{str(d): 3 + d for d in range(10)},
        "+": 13,
        "=": 14,
        "<unk>": 15,
    }
    assert tok.get_vocab() == expected
    assert len(tok) == TOKENIZER_VOCAB_SIZE == 16
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 15)


def test_encoding_is_one_token_per_character_without_added_specials(tok):
    assert tok("3+4=").input_ids == [6, 13, 7, 14]
    assert tok.encode("3+4=", add_special_tokens=True) == [6, 13, 7, 14]
    assert tok.encode("12") == [4, 5]
    assert tok.encode("3 x") == [6, 15, 15]  # unknown characters, spaces included


def test_decoding_joins_characters_and_can_drop_specials(tok):
    assert tok.decode([6, 1], skip_special_tokens=True) == "3"
    assert tok.decode([2, 6, 13, 7, 14, 1]) == "<bos>3+4=<eos>"


def test_tokenizer_round_trips_through_save_pretrained(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tok.get_vocab()
    assert loaded("9+8=").input_ids == [12, 13, 11, 14]
    assert loaded.decode([10, 4, 1], skip_special_tokens=True) == "71"
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.bos_token_id) == (0, 1, 2)


# --- arith_mod10 prompts ------------------------------------------------------------------


def test_all_prompts_are_every_sum_in_order(tok):
    prompts = ArithTask(tok).all_prompts()
    assert len(prompts) == 100
    assert prompts[0] == Prompt(prompt_ids=[2, 3, 13, 3, 14], label="0", text="0+0=", index=0)
    assert prompts[34] == Prompt(prompt_ids=[2, 6, 13, 7, 14], label="7", text="3+4=", index=34)
    assert prompts[99] == Prompt(prompt_ids=[2, 12, 13, 12, 14], label="8", text="9+9=", index=99)
    assert prompts[58].text == "5+8=" and prompts[58].label == "3"  # 13 mod 10
    assert all(len(p.prompt_ids) == 5 for p in prompts)


def test_max_operand_bounds_the_operands(tok):
    prompts = ArithTask(tok, max_operand=2).all_prompts()
    assert [p.text for p in prompts] == [
        "0+0=",
        "0+1=",
        "0+2=",
        "1+0=",
        "1+1=",
        "1+2=",
        "2+0=",
        "2+1=",
        "2+2=",
    ]
    assert [p.label for p in prompts] == ["0", "1", "2", "1", "2", "3", "2", "3", "4"]
    with pytest.raises(ValueError, match="max_operand"):
        ArithTask(tok, max_operand=10)  # two-digit operands would break the 5-token prompt


def test_each_epoch_is_a_fresh_shuffle_of_all_prompts(tok):
    stream = ArithTask(tok, max_operand=9, seed=0).next_batch(200)
    all_texts = sorted(p.text for p in ArithTask(tok).all_prompts())
    epoch0, epoch1 = [p.text for p in stream[:100]], [p.text for p in stream[100:]]
    assert sorted(epoch0) == all_texts and sorted(epoch1) == all_texts
    assert epoch0 != epoch1
    assert epoch0 != [p.text for p in ArithTask(tok).all_prompts()]  # actually shuffled
    assert [p.index for p in stream] == list(range(200))
    assert all(p.label == str(sum(map(int, p.text[:-1].split("+"))) % 10) for p in stream)


def test_stream_is_determined_by_the_seed(tok):
    def texts(seed):
        return [p.text for p in ArithTask(tok, seed=seed).next_batch(150)]

    assert texts(0) == texts(0)
    assert texts(0) != texts(1)


def test_batch_boundaries_do_not_change_the_stream(tok):
    split = ArithTask(tok, seed=3)
    pieces = split.next_batch(70) + split.next_batch(0) + split.next_batch(60)
    whole = ArithTask(tok, seed=3).next_batch(130)
    assert pieces == whole


def test_state_dict_resumes_the_same_continuation(tok):
    original = ArithTask(tok, seed=7)
    original.next_batch(130)
    state = json.loads(json.dumps(original.state_dict()))  # plain JSON data
    assert state["position"] == 130 and state["epoch"] == 1 and state["seed"] == 7

    resumed = ArithTask(tok, seed=0)
    resumed.load_state_dict(state)
    assert resumed.next_batch(120) == original.next_batch(120)


# --- exact-match reward -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, label, finish_reason, reward",
    [
        ("3", "3", "stop", 1.0),  # correct and terminated with eos
        ("3", "3", "length", 0.0),  # correct digit but never emitted eos
        ("4", "3", "stop", 0.0),  # wrong
        ("3 ", "3", "stop", 1.0),  # surrounding whitespace is stripped
        ("", "3", "stop", 0.0),  # empty answer
        ("33", "3", "stop", 0.0),  # extra characters
    ],
)
def test_exact_match_reward_table(text, label, finish_reason, reward):
    assert ExactMatchReward()(text, label, finish_reason) == reward


def test_score_batch_scores_each_response():
    scores = ExactMatchReward().score_batch(
        ["7", "7", "2"], ["7", "7", "1"], ["stop", "length", "stop"]
    )
    assert scores == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        ExactMatchReward().score_batch(["7"], ["7", "1"], ["stop"])


def test_held_out_prompts_never_appear_in_the_training_stream(tok):
    task = ArithTask(tok, seed=5, eval_fraction=0.2)
    held_out = {p.text for p in task.eval_prompts()}
    assert len(held_out) == 20 and task.num_prompts == 80
    streamed = {p.text for p in task.next_batch(80 * 3)}  # three epochs
    assert streamed.isdisjoint(held_out)
    assert len(streamed) == 80


def test_held_out_split_is_the_same_for_every_run_seed(tok):
    first = [p.text for p in ArithTask(tok, seed=1, eval_fraction=0.2).eval_prompts()]
    second = [p.text for p in ArithTask(tok, seed=2, eval_fraction=0.2).eval_prompts()]
    assert first == second
    # nothing held out: evaluation covers the training prompts themselves
    assert ArithTask(tok, eval_fraction=0.0).eval_prompts() == ArithTask(tok).all_prompts()
