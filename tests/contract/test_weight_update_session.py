"""hyrl's weight syncs against SGLang 0.5.23's own scheduler code (sglang_scheduler.py).

SGLang refuses tensor and distributed updates outside a /begin_weight_update ... /end_weight_update
session (managers/scheduler_components/weight_updater.py). hyrl at 74107ac sent none, so its
first sync was refused and GRPO and PPO stopped at start-up. Here every mode runs through
SGLang's request decoding, session, deserializer (tensor), process-group rendezvous and receive
(distributed), and the tests read back what SGLang handed the model.
"""

from __future__ import annotations

import functools

import pytest
import sglang_sessions as table
from fake_sglang_server import hf_state_dict_with_shift
from sglang_scheduler import joined_weight_group

from hyrl.rollout.sglang.client import SGLangError
from hyrl.rollout.sglang.receive.disk import DiskWeightSync
from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync
from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors, sglang_serializer
from hyrl.rollout.sglang.receive.tensor import TensorWeightSync
from hyrl.rollout.sglang.server import free_port


def loaded_since(server, before: int) -> tuple[list[str], float]:
    """The names SGLang's weight updater handed the model after the first `before` loads, and
    the sum of their values."""
    loads = server.recorded()["loaded"][before:]
    return [n for load in loads for n in load["names"]], sum(s for ld in loads for s in ld["sums"])


SENT = [name for name, _ in checkpoint_named_tensors(hf_state_dict_with_shift(1.0))]


# ---- hyrl's syncs, each mode ----------------------------------------------------------------


def test_tensor_sync_is_accepted_and_loads_every_tensor(server, client):
    before = len(server.recorded()["loaded"])
    sync = TensorWeightSync([client], 200, serializer=sglang_serializer(cuda=False))
    stats = sync.sync(checkpoint_named_tensors(hf_state_dict_with_shift(3.0)))
    names, total = loaded_since(server, before)
    assert names == SENT and total == 3.0  # deserialized by SGLang's SafeUnpickler
    assert stats.buckets == 4
    sync.sync(
        checkpoint_named_tensors(hf_state_dict_with_shift(5.0))
    )  # the next sync opens its own session
    assert loaded_since(server, before + 4)[1] == 5.0
    assert server.recorded()["weight_versions"][-1] == "2"


def test_a_refused_load_closes_the_session_and_the_next_sync_goes_through(server, client):
    sync = TensorWeightSync([client], 200, serializer=sglang_serializer(cuda=False))
    server.refuse_next_load()
    with pytest.raises(SGLangError):
        sync.sync(checkpoint_named_tensors(hf_state_dict_with_shift(1.0)))
    assert not server.recorded()["session_open"]
    before = len(server.recorded()["loaded"])
    sync.sync(checkpoint_named_tensors(hf_state_dict_with_shift(2.0)))
    assert loaded_since(server, before) == (SENT, 2.0)


def test_distributed_sync_joins_sglangs_group_and_is_accepted(server, client):
    before = len(server.recorded()["loaded"])
    sync = DistributedWeightSync(
        [client], 200, backend="gloo", group_name=f"hyrl_contract_{free_port()}", timeout_s=60.0
    )
    try:
        sync.sync(
            checkpoint_named_tensors(hf_state_dict_with_shift(4.0))
        )  # SGLang's own rendezvous, gloo
        assert sync.group_name in server.recorded()["groups"]
        assert loaded_since(server, before) == (SENT, 4.0)  # received by SGLang's broadcast
    finally:
        sync.close()
    assert sync.group_name not in server.recorded()["groups"]


def test_disk_sync_is_accepted_without_a_session(server, client, tmp_path):
    before = len(server.recorded()["loaded"])
    DiskWeightSync([client], 200, directory=tmp_path / "sync").sync(
        checkpoint_named_tensors(hf_state_dict_with_shift(6.0))
    )
    names, total = loaded_since(server, before)
    assert sorted(names) == sorted(SENT) and total == 6.0


# ---- the table of request sequences, shared with the fake's test ----------------------------


@pytest.fixture(scope="module")
def joined_group(server):
    """The distributed rows assume a joined group, as the fake's do."""
    with joined_weight_group(server.url, table.GROUP_NAME):
        yield


@pytest.mark.parametrize(("mode", "sequence"), table.ROWS)
def test_sglang_answers_each_session_sequence_as_the_table_says(
    server, client, joined_group, mode, sequence, tmp_path
):
    post = functools.partial(client.request, "POST")
    got = table.answers(
        post, mode, sequence, str(tmp_path), sglang_serializer(cuda=False, flattened=False)
    )
    assert got == table.EXPECTED[(mode, sequence)]
