"""tools/make_tiny_base.py: the tiny recipe's base checkpoint, a deterministic supervised
pre-pass. Small step counts keep it fast; the recipe's own count is exercised by `make demo`."""

import hashlib
import json

import pytest
import torch
from tool_modules import load_tool

from hyrl.checkpoint.hf_io import read_hf_arch
from hyrl.data.tokenizer import build_tokenizer
from hyrl.models.qwen3_moe.config import TINY

make_tiny_base = load_tool("make_tiny_base")


def _digest(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_the_task_batch_is_every_prompt_its_digit_then_eos():
    tok = build_tokenizer()
    inputs, answers = make_tiny_base.task_batch(tok)
    assert inputs.shape == (100, 7) and answers.shape == (100, 2)
    # prompt 37 is "3+7=": bos 3 + 7 = then the digit 0 and eos
    assert tok.decode(inputs[37, 1:5]) == "3+7="
    assert tok.decode(answers[37, :1]) == "0" and answers[37, 1] == tok.eos_token_id
    assert torch.equal(inputs[:, 5:], answers)


def test_the_pre_pass_is_deterministic_and_gives_a_checkpoint_of_the_tiny_recipe(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert make_tiny_base.main([str(a), "--steps", "3"]) == 0
    assert make_tiny_base.main([str(b), "--steps", "3"]) == 0
    assert _digest(a) == _digest(b)
    assert read_hf_arch(a).mismatches(TINY.to_hf_config().to_dict()) == []
    record = json.loads((a / "base.json").read_text())
    assert record["steps"] == 3
    # training moved the weights: another step count gives other weights
    c = tmp_path / "c"
    assert make_tiny_base.main([str(c), "--steps", "4"]) == 0
    assert _digest(c) != _digest(a)


def test_a_non_empty_out_dir_and_bad_values_are_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as err:
        make_tiny_base.main([str(tmp_path / "x")])
    assert err.value.code == 2 and "OUT_DIR" in capsys.readouterr().err
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"
    with pytest.raises(SystemExit):
        make_tiny_base.main([str(tmp_path / "y"), "--lr", "0"])
    assert not (tmp_path / "y").exists()
