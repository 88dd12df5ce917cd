"""The fake SGLang server accepts and refuses weight-update sessions as SGLang 0.5.23 does: the
table in tests/helpers/sglang_sessions.py, which tests/contract/ runs against SGLang's own
scheduler code."""

import pytest
import sglang_sessions as table
import torch
from fake_sglang_server import FakeSGLangServer, pickle_serializer
from safetensors.torch import save_file

from hyrl.rollout.sglang.client import SGLangClient


def update_payload(mode: str, disk_dir: str) -> dict:
    """A minimal valid update: nothing to load (tensor, distributed) or one zero tensor (disk)."""
    if mode == "tensor":
        return {"serialized_named_tensors": [pickle_serializer([])], "flush_cache": False}
    if mode == "distributed":
        return {
            "names": [],
            "dtypes": [],
            "shapes": [],
            "group_name": table.GROUP_NAME,
            "flush_cache": False,
        }
    return {"model_path": disk_dir, "flush_cache": False}


@pytest.mark.parametrize(("mode", "sequence"), table.ROWS)
def test_the_fake_answers_each_session_sequence_as_sglang(mode, sequence, tmp_path):
    shard = {"lm_head.weight": torch.zeros(16, 4)}
    save_file(shard, tmp_path / "model.safetensors")
    with FakeSGLangServer() as fake:
        fake._groups[table.GROUP_NAME] = object()  # as if /init_weights_update_group had run
        client = SGLangClient(fake.url)
        accepted = []
        for call in table.SEQUENCES[sequence]:
            if call == "update":
                route, payload = table.UPDATE_ROUTES[mode], update_payload(mode, str(tmp_path))
            else:
                route, payload = table.CALL_ROUTES[call], {}
            status, body = client.request("POST", route, payload)
            assert status in (200, 400), body
            accepted.append(status == 200)
    assert tuple(accepted) == table.EXPECTED[(mode, sequence)]


def test_the_table_covers_every_mode_and_sequence():
    assert set(table.EXPECTED) == set(table.ROWS)
    for (mode, sequence), answers in table.EXPECTED.items():
        assert len(answers) == len(table.SEQUENCES[sequence]), (mode, sequence)
