"""--hf-checkpoint: the actor, its reference and the rollout engine start from the checkpoint."""

import pytest
import torch

from hyrl.config import ConfigError, load


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY

    path = tmp_path_factory.mktemp("hf") / "tiny"
    torch.manual_seed(11)
    Qwen3MoeForCausalLM(TINY.to_hf_config()).save_pretrained(path)
    return path


def test_actor_reference_and_engine_hold_the_checkpoint_weights(hf_dir, tmp_path):
    from transformers import Qwen3MoeForCausalLM

    from hyrl.backends.megatron.model import destroy_distributed
    from hyrl.train.trainer import Trainer

    expected = Qwen3MoeForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).state_dict()
    cfg = load(
        [
            "--hf-checkpoint",
            str(hf_dir),
            "--kl-loss-coef",
            "0.1",
            "--num-steps",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--no-progress",
        ],
        world_size=1,
    )
    trainer = Trainer(cfg, world_size=1)
    try:
        actor_weights = trainer.actor.export_hf_state_dict()
        engine_weights = trainer.rollout_manager.engine.model.state_dict()
        assert actor_weights.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(actor_weights[name], tensor), name
            assert torch.equal(engine_weights[name], tensor), name
        reference = trainer.actor.ref_model.state_dict()
        for name, tensor in trainer.actor.model.state_dict().items():
            if isinstance(tensor, torch.Tensor):
                assert torch.equal(reference[name], tensor), name
    finally:
        trainer.close()
        destroy_distributed()


def test_a_missing_checkpoint_directory_is_refused_naming_the_flag(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(["--hf-checkpoint", str(tmp_path / "nope"), "--run-dir", str(tmp_path / "run")], 1)
    assert info.value.flag == "--hf-checkpoint" and "not an existing directory" in str(info.value)


def test_an_expert_count_written_as_num_local_experts_is_compared(hf_dir):
    import json

    from hyrl.models.qwen3_moe.config import TINY

    written = json.loads((hf_dir / "config.json").read_text())
    assert "num_local_experts" in written  # transformers 5's key for the expert count
    assert TINY.mismatches(written) == []
    assert TINY.mismatches({**written, "num_local_experts": 8}) == [
        "num_experts: 8 in the checkpoint, 4 in the flags"
    ]


def _copy_without_weights(hf_dir, path):
    import shutil

    path.mkdir()
    shutil.copy(hf_dir / "config.json", path / "config.json")
    return path


def test_weights_that_config_json_does_not_describe_are_refused_before_any_process_group(
    hf_dir, tmp_path
):
    from safetensors.torch import load_file, save_file

    from hyrl.train.preflight import preflight

    other = _copy_without_weights(hf_dir, tmp_path / "other")
    tensors = load_file(hf_dir / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(8, 64)  # wrong rows
    save_file(tensors, other / "model.safetensors")
    cfg = load(["--hf-checkpoint", str(other), "--run-dir", str(tmp_path / "run")], 1)
    with pytest.raises(ConfigError) as info:
        preflight(cfg)  # reads the files' metadata only: no process group, no model
    assert info.value.flag == "--hf-checkpoint"
    assert "model.layers.0.self_attn.q_proj.weight" in str(info.value)

    truncated = _copy_without_weights(hf_dir, tmp_path / "truncated")
    data = (hf_dir / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[:100])
    cfg = load(["--hf-checkpoint", str(truncated), "--run-dir", str(tmp_path / "run")], 1)
    with pytest.raises(ConfigError) as info:
        preflight(cfg)
    assert info.value.flag == "--hf-checkpoint"
    assert f"{truncated / 'model.safetensors'}: cannot be read" in str(info.value)
