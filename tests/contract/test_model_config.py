"""SGLang 0.5.23's ModelConfig on the model directory hyrl writes for its servers.

SGLang stops every request on the union of config.json's and generation_config.json's eos ids
(ModelConfig._get_hf_eos_token_id, used by managers/schedule_batch.py), whatever the request's
own stop ids. At 74107ac config.json said eos_token_id = 1, which is '"' in Qwen's vocabulary:
every response stopped at its first quote, with finish reason "stop".
"""

from __future__ import annotations

import torch
from qwen_checkpoint import ENDOFTEXT, IM_END, qwen_checkpoint
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.server_args import prepare_server_args

from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B, TINY
from hyrl.rollout.sglang.launch import rollout_eos_ids, write_rollout_model


def sglang_model_config(model_dir) -> ModelConfig:
    """As the server builds it from its command line (--dtype as hyrl passes it)."""
    args = prepare_server_args(
        ["--model-path", str(model_dir), "--dtype", "bfloat16", "--skip-tokenizer-init"]
    )
    return ModelConfig.from_server_args(args)


def test_sglang_stops_on_the_checkpoints_eos_ids_not_on_a_quote(tmp_path):
    checkpoint = qwen_checkpoint(tmp_path / "Qwen3-30B-A3B")
    model_dir = write_rollout_model(
        QWEN3_30B_A3B, tmp_path / "rollout_model", rollout_eos_ids(IM_END, str(checkpoint)), 151643
    )
    config = sglang_model_config(model_dir)
    assert config.hf_eos_token_id == {IM_END, ENDOFTEXT}
    assert 1 not in config.hf_eos_token_id
    assert config.hf_config.architectures == ["Qwen3MoeForCausalLM"]
    assert config.dtype == torch.bfloat16
    assert config.hf_config.num_experts == 128 and config.hf_config.num_hidden_layers == 48


def test_without_a_checkpoint_sglang_stops_on_the_tokenizers_eos(tmp_path):
    model_dir = write_rollout_model(TINY, tmp_path / "rollout_model", rollout_eos_ids(1))
    assert sglang_model_config(model_dir).hf_eos_token_id == {1}  # the built-in task's <eos>


def test_the_checkpoints_sampling_defaults_do_not_reach_sglang(tmp_path):
    """hyrl's --rollout-* flags alone decide how the engines sample: Qwen's temperature 0.6
    and top-k 20 must not become the server's defaults under --sampling-defaults model."""
    checkpoint = qwen_checkpoint(tmp_path / "Qwen3-30B-A3B")
    model_dir = write_rollout_model(
        QWEN3_30B_A3B, tmp_path / "rollout_model", rollout_eos_ids(IM_END, str(checkpoint))
    )
    config = sglang_model_config(model_dir)
    config.sampling_defaults = "model"
    assert config.get_default_sampling_params() == {}
