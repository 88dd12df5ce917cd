"""The model directory SGLang starts from carries the tokenizer's and checkpoint's eos ids.

SGLang stops every request on the union of config.json's and generation_config.json's
eos_token_id; in Qwen's vocabulary id 1 is '"', so an architecture-default eos of 1 ended every
response at its first quote. tests/contract/test_model_config.py reads the same directories
with SGLang's own ModelConfig.
"""

import json

from qwen_checkpoint import ENDOFTEXT, IM_END, qwen_checkpoint

from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B, TINY
from hyrl.rollout.sglang.launch import rollout_eos_ids, write_rollout_model


def test_eos_ids_come_from_the_checkpoint_then_the_tokenizer(tmp_path):
    checkpoint = qwen_checkpoint(tmp_path / "qwen")
    assert rollout_eos_ids(IM_END, str(checkpoint)) == [IM_END, ENDOFTEXT]
    assert rollout_eos_ids(7, str(checkpoint)) == [IM_END, ENDOFTEXT, 7]
    assert rollout_eos_ids(IM_END, None) == [IM_END]  # random weights: the tokenizer's alone


def test_config_and_generation_config_carry_exactly_the_eos_ids(tmp_path):
    out = write_rollout_model(QWEN3_30B_A3B, tmp_path / "model", [IM_END, ENDOFTEXT], 151643)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    generation = json.loads((tmp_path / "model" / "generation_config.json").read_text())
    assert out == str(tmp_path / "model")
    assert config["eos_token_id"] == [IM_END, ENDOFTEXT] and config["bos_token_id"] == 151643
    assert generation == {"eos_token_id": [IM_END, ENDOFTEXT], "bos_token_id": 151643}
    assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["dtype"] == "bfloat16"


def test_a_single_eos_id_is_written_as_an_int(tmp_path):
    write_rollout_model(TINY, tmp_path, [1])
    assert json.loads((tmp_path / "config.json").read_text())["eos_token_id"] == 1
    assert json.loads((tmp_path / "generation_config.json").read_text()) == {"eos_token_id": 1}


def test_the_architecture_alone_names_no_special_tokens():
    config = QWEN3_30B_A3B.to_hf_config()
    assert config.eos_token_id is None and config.bos_token_id is None
