"""A replaced engine rejoins the distributed weight sync, against SGLang 0.5.23's own code.

SGLang fixes a weight-update group's world size when it forms (``init_custom_process_group`` in
``model_executor/model_runner_components/weight_updater.py``, one entry per group name in
``_model_update_group``). At c42290d hyrl's SGLangFleet formed its group once, at start: after a
replacement (a new server at a new URL) the next sync posted to the dead server's URL. Here two
servers run SGLang's scheduler code; one goes away and a new one takes its place, and the next
sync must leave the old group on the servers still up and reach both servers through a new one.

The fleet of Ray engine actors is stood in for by ``ServerSet`` (its server URLs; this venv has
no Ray): the SGLang side, its rendezvous, session and receive, is SGLang's own.
"""

from __future__ import annotations

import torch
from fake_sglang_server import hf_state_dict_with_shift
from sglang_scheduler import SchedulerServer

from hyrl.models.weight_buckets import iter_buckets
from hyrl.rollout.sglang.fleet import SGLangFleet
from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors


class ServerSet:
    """What SGLangFleet asks of its RolloutFleet in distributed mode: the servers' URLs, once
    every engine is up (``settle``), and the note that the started engines synced."""

    def __init__(self, urls: list[str]):
        self.urls, self.settled, self.synced = list(urls), 0, 0
        self.restarts = [0] * len(urls)

    def stats(self) -> dict:
        return {"restarts": list(self.restarts)}

    def settle(self) -> None:
        self.settled += 1

    def call_all(self, method: str) -> list[str]:
        assert method == "server_url", method
        return list(self.urls)

    def mark_synced(self) -> None:
        self.synced += 1

    def close(self) -> None:
        pass


def loaded_total(server: SchedulerServer, before: int) -> float:
    """The sum of the values SGLang handed the model after its first `before` loads."""
    return sum(s for load in server.recorded()["loaded"][before:] for s in load["sums"])


def sync(engine: SGLangFleet, shift: float) -> None:
    named = checkpoint_named_tensors(hf_state_dict_with_shift(shift))
    engine.update_weights_stream(iter_buckets(named, 200))


def test_after_a_replacement_the_next_sync_forms_a_new_group_with_the_servers_up():
    with SchedulerServer() as kept:
        replaced = SchedulerServer().__enter__()
        servers = ServerSet([kept.url, replaced.url])
        engine = SGLangFleet(
            servers,  # type: ignore[arg-type]  # the stand-in above
            "distributed",
            buffer_bytes=200,
            gpus_per_engine=1,
            backend="gloo",
            device=torch.device("cpu"),
            master_address="127.0.0.1",
        )
        try:
            first = engine._distributed.group_name
            assert first in kept.recorded()["groups"] and first in replaced.recorded()["groups"]
            before = len(kept.recorded()["loaded"])
            sync(engine, 4.0)
            assert loaded_total(kept, before) == 4.0

            replaced.__exit__(None, None, None)  # the engine died; a new one has a new server
            with SchedulerServer() as replacement:
                servers.urls[1] = replacement.url
                servers.restarts[1] += 1
                before = len(kept.recorded()["loaded"])
                sync(engine, 5.0)
                second = engine._distributed.group_name
                assert second != first
                assert first not in kept.recorded()["groups"]  # left where it could be
                assert second in kept.recorded()["groups"]
                assert second in replacement.recorded()["groups"]
                assert loaded_total(kept, before) == 5.0
                assert loaded_total(replacement, 0) == 5.0  # it took the sync: it serves

                before = len(kept.recorded()["loaded"])
                sync(engine, 6.0)  # nothing changed: the same group
                assert engine._distributed.group_name == second
                assert loaded_total(kept, before) == 6.0
                engine.close()
        finally:
            engine.close()
