"""SGLangFleet (hyrl/rollout/sglang/fleet.py): SGLang engine actors on Ray, weight sync through the
fleet or over a broadcast group, memory release for colocation.

Protocol tests: the engine actors drive tests/helpers/fake_sglang_server.py servers (a test double
for the routes hyrl calls, not SGLang) running in this process; the broadcast group is gloo here,
NCCL on GPUs.
"""

import functools
import os
import sys

import pytest
import torch

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ray = pytest.importorskip("ray")

import fake_sglang_server  # noqa: E402
from fake_sglang_server import (  # noqa: E402
    FakeSGLangServer,
    hf_state_dict_with_shift,
    pickle_serializer,
)

from hyrl.rollout.base import SamplingParams  # noqa: E402
from hyrl.rollout.fleet import RolloutFleet  # noqa: E402
from hyrl.rollout.sglang.client import SGLangError  # noqa: E402
from hyrl.rollout.sglang.engine import SGLangEngine  # noqa: E402
from hyrl.rollout.sglang.fleet import SGLangFleet  # noqa: E402

# neither this module nor the fake's can be imported by the Ray workers: ship them by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(fake_sglang_server)

EOS = 1
PARAMS = SamplingParams(max_new_tokens=3, temperature=0)
PROMPTS = [[2, d] for d in range(3, 11)]  # 8 prompts


def expected_tokens(prompt, shift):
    """The fake's toy model: next = (previous + 1 + shift) % 16, three tokens or up to EOS."""
    tokens, previous = [], prompt[-1]
    while len(tokens) < 3 and EOS not in tokens:
        previous = (previous + 1 + shift) % 16
        tokens.append(previous)
    return tokens


def make_disk_engine(urls, directory, engine_index):
    return SGLangEngine(
        urls[engine_index],
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync="disk",
        weight_sync_options={"directory": f"{directory}/engine{engine_index}"},
    )


def make_tensor_engine(urls, engine_index):  # the distributed mode's local catch-up path
    return SGLangEngine(
        urls[engine_index],
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync="tensor",
        weight_sync_options={"serializer": pickle_serializer},
    )


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def fakes():
    with FakeSGLangServer() as a, FakeSGLangServer() as b:
        yield [a, b]


def test_disk_sync_through_the_fleet_reaches_every_server_and_generation_spreads(
    ray_cluster, fakes, tmp_path
):
    import functools

    urls = [f.url for f in fakes]
    fleet = RolloutFleet(
        functools.partial(make_disk_engine, urls, str(tmp_path)),
        num_engines=2,
        concurrency_per_engine=4,
        num_cpus_per_engine=0.5,
    )
    engine = SGLangFleet(fleet, "disk", buffer_bytes=1 << 20, gpus_per_engine=1)
    try:
        engine.update_weights(hf_state_dict_with_shift(3.0))
        assert [f.shift for f in fakes] == [3, 3]
        stats = engine.last_sync_stats
        assert stats.transport == "disk" and stats.tensor_bytes > 0
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 3) for p in PROMPTS]
        assert all(f.routes_called().count("/generate") == 4 for f in fakes)  # 2 chunks of 4

        engine.release_memory()
        engine.resume_memory()
        for fake in fakes:
            routes = fake.routes_called()
            assert routes[-3:] == [
                "/flush_cache",
                "/release_memory_occupation",
                "/resume_memory_occupation",
            ]
    finally:
        engine.close()


def test_a_checkpoint_the_trainer_wrote_reaches_every_server_and_replacements(
    ray_cluster, fakes, tmp_path
):
    """--update-weight-transport disk: the trainer ranks write shards + index; the engines only load
    the directory, and a replacement loads the same one (nothing through the object store)."""
    import functools

    from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
    from hyrl.models.weight_buckets import write_index, write_shard
    from hyrl.rollout.base import DiskCheckpoint

    checkpoint = tmp_path / "sync-000001"
    checkpoint.mkdir()
    named = split_fused_experts(hf_state_dict_with_shift(4.0))
    weight_map = {
        **write_shard(named[:3], checkpoint / "model-rank00000-00000.safetensors"),
        **write_shard(named[3:], checkpoint / "model-rank00001-00000.safetensors"),
    }
    write_index(checkpoint, weight_map, total_bytes=800)
    urls = [f.url for f in fakes]
    fleet = RolloutFleet(
        functools.partial(make_disk_engine, urls, str(tmp_path)),
        num_engines=2,
        concurrency_per_engine=4,
        num_cpus_per_engine=0.5,
    )
    engine = SGLangFleet(fleet, "disk", buffer_bytes=1 << 20, gpus_per_engine=1)
    try:
        engine.load_weights_from_disk(DiskCheckpoint(str(checkpoint), 800, 2))
        assert [f.shift for f in fakes] == [4, 4]
        assert (engine.last_sync_stats.tensor_bytes, engine.last_sync_stats.buckets) == (800, 2)
        for fake in fakes:
            assert fake.calls[-3:][0] == ("/update_weights_from_disk", fake.calls[-3][1])
            assert fake.calls[-3][1]["model_path"] == str(checkpoint)
        fakes[1].weights = {name: torch.zeros_like(t) for name, t in fakes[1].weights.items()}
        fleet.kill_engine(1)
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 4) for p in PROMPTS]
        fleet.call_all("server_url")  # returns once the replacement has started and loaded
        assert fakes[1].shift == 4
    finally:
        engine.close()


def test_distributed_sync_broadcasts_to_every_server_and_stages_nothing_for_replacements(
    ray_cluster, fakes
):
    import functools

    from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
    from hyrl.models.weight_buckets import iter_buckets

    urls = [f.url for f in fakes]
    fleet = RolloutFleet(
        functools.partial(make_tensor_engine, urls),
        num_engines=2,
        concurrency_per_engine=4,
        num_cpus_per_engine=0.5,
    )
    engine = SGLangFleet(
        fleet,
        "distributed",
        buffer_bytes=1 << 20,
        gpus_per_engine=1,
        backend="gloo",
        device=torch.device("cpu"),
    )
    try:
        assert all("/init_weights_update_group" in f.routes_called() for f in fakes)
        engine.update_weights_stream(
            iter_buckets(split_fused_experts(hf_state_dict_with_shift(5.0)), 1 << 20)
        )
        assert [f.shift for f in fakes] == [5, 5]
        assert engine.last_sync_stats.transport == "distributed"
        for fake in fakes:  # the broadcast went over the group, not through the engine actors
            routes = fake.routes_called()
            assert "/update_weights_from_distributed" in routes
            assert "/update_weights_from_tensor" not in routes
        # nothing was staged: a replacement waits for the next sync, engine 0 serves meanwhile
        fakes[1].weights = {name: torch.zeros_like(t) for name, t in fakes[1].weights.items()}
        fleet.kill_engine(1)
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 5) for p in PROMPTS]
        assert fleet.stats()["restarts"] == [0, 1]
        fleet.call_all("server_url")  # returns once the replacement has started
        assert "/update_weights_from_tensor" not in fakes[1].routes_called()
        assert fakes[1].shift == 0
        engine.update_weights_stream(
            iter_buckets(split_fused_experts(hf_state_dict_with_shift(3.0)), 1 << 20)
        )
        assert [f.shift for f in fakes] == [3, 3]
        # the replacement came back at the same URL (a server can get the dead one's port):
        # a restart alone makes the sync form a new group
        assert [f.routes_called().count("/init_weights_update_group") for f in fakes] == [2, 2]
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 3) for p in PROMPTS]
    finally:
        engine.close()


def make_engine_on_a_new_server(urls, spare_url, marker_dir, engine_index):
    """Engine 1's replacement talks to `spare_url`, as a replacement's own new server would."""
    first_start = f"{marker_dir}/engine{engine_index}"
    url = urls[engine_index]
    if engine_index == 1 and os.path.exists(first_start):
        url = spare_url
    open(first_start, "w").close()
    return make_tensor_engine({engine_index: url}, engine_index)


def test_a_replacement_on_a_new_server_rejoins_the_distributed_sync(ray_cluster, tmp_path):
    """SGLang fixes a weight-update group's world size when it forms; a replacement's server
    has a new URL. The next sync leaves the old group and forms one with the servers up."""
    from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
    from hyrl.models.weight_buckets import iter_buckets

    def stream(shift):
        return iter_buckets(split_fused_experts(hf_state_dict_with_shift(shift)), 1 << 20)

    with FakeSGLangServer() as kept, FakeSGLangServer() as spare:
        dead = FakeSGLangServer().__enter__()
        fleet = RolloutFleet(
            functools.partial(
                make_engine_on_a_new_server, [kept.url, dead.url], spare.url, str(tmp_path)
            ),
            num_engines=2,
            concurrency_per_engine=4,
            num_cpus_per_engine=0.5,
        )
        engine = SGLangFleet(
            fleet, "distributed", 1 << 20, 1, backend="gloo", device=torch.device("cpu")
        )
        try:
            engine.update_weights_stream(stream(5.0))
            assert [kept.shift, dead.shift] == [5, 5]
            dead.__exit__(None, None, None)  # its server is gone, then its engine
            fleet.kill_engine(1)
            generations = engine.generate(PROMPTS, PARAMS)  # engine 0 serves; 1 is replaced
            assert [g.response_ids for g in generations] == [expected_tokens(p, 5) for p in PROMPTS]
            assert fleet.stats()["restarts"] == [0, 1]
            engine.update_weights_stream(stream(3.0))
            assert [kept.shift, spare.shift] == [3, 3]
            assert "/update_weights_from_distributed" in spare.routes_called()
            generations = engine.generate(PROMPTS, PARAMS)  # both serve the newest weights
            assert [g.response_ids for g in generations] == [expected_tokens(p, 3) for p in PROMPTS]
            assert spare.routes_called().count("/generate") > 0
        finally:
            engine.close()


def test_engine_actor_launches_its_server_from_a_config_only_directory(tmp_path, monkeypatch):
    """What make_sglang_engine asks SGLang for (the launch itself needs a GPU: tests/gpu)."""
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.sglang.launch import make_sglang_engine, write_rollout_model

    launched = {}

    def fake_launch(cls, server, startup_timeout_s, **options):
        launched.update(server=server, options=options, timeout=startup_timeout_s)
        return "engine"

    monkeypatch.setattr(SGLangEngine, "launch", classmethod(fake_launch))
    model = write_rollout_model(TINY, tmp_path / "model", [EOS])
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        "config.json",
        "generation_config.json",
    ]
    assert (
        make_sglang_engine(
            {
                "model_path": model,
                "concurrency": 64,
                "gpus_per_engine": 2,
                "colocated": True,
                "mem_fraction_static": 0.4,
                "server_args": ["--attention-backend", "triton"],
                "log_dir": str(tmp_path / "logs"),
                "seed": 7,
                "return_routed_experts": False,
            },
            [EOS],
            "tensor",
            1 << 20,
            120.0,
            engine_index=3,
            request_timeout_s=1800.0,
        )
        == "engine"
    )
    command = launched["server"].command()
    flags = dict(zip(command[3::], command[4::]))  # after python -m sglang.launch_server
    assert command[1:3] == ["-m", "sglang.launch_server"]
    assert (flags["--model-path"], flags["--tp-size"], flags["--base-gpu-id"]) == (model, "2", "0")
    assert (flags["--max-running-requests"], flags["--mem-fraction-static"]) == ("64", "0.4")
    assert (flags["--random-seed"], flags["--load-format"]) == ("10", "dummy")  # seed + index
    assert "--enable-memory-saver" in command and flags["--attention-backend"] == "triton"
    assert flags["--dtype"] == "bfloat16"
    assert launched["server"].log_path == tmp_path / "logs" / "sglang_engine3.log"
    assert launched["server"].die_with_parent
    assert launched["options"]["weight_sync"] == "tensor"
    assert launched["options"]["weight_sync_options"] == {"device": "cuda:0", "tp_size": 2}
    assert launched["options"]["timeout_s"] == 1800.0  # --sglang-request-timeout-s


def test_rollout_config_names_the_architecture_and_bfloat16_as_sglang_reads_them(tmp_path):
    """SGLang's ModelConfig indexes architectures[0] and, under --dtype auto, reads the config's
    dtype (torch_dtype before transformers 5), turning a missing one into float16."""
    import json

    from transformers import AutoConfig

    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.sglang.launch import write_rollout_model

    model = write_rollout_model(TINY, tmp_path / "model", [EOS])
    written = json.loads((tmp_path / "model" / "config.json").read_text())
    assert written["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (written["dtype"], written["torch_dtype"]) == ("bfloat16", "bfloat16")
    loaded = AutoConfig.from_pretrained(model)  # what SGLang's get_config returns
    assert loaded.architectures[0] == "Qwen3MoeForCausalLM" and loaded.dtype == torch.bfloat16
    assert TINY.mismatches(written) == []  # still the flags' architecture


def test_colocated_tensor_sync_feeds_every_server_from_the_training_ranks_and_stages_nothing(
    ray_cluster, fakes, monkeypatch
):
    """--colocate tensor through SGLangFleet: rank 0 posts each server the serialized copy of
    the training rank on its GPU (one gloo rank here, on the GPU both fakes claim), and keeps
    nothing for a replacement, which takes the next sync."""
    import functools

    import torch.distributed as dist
    from torch_ranks import DefaultGroupRanks

    from hyrl.models.qwen3_moe.hf_mapping import split_fused_experts
    from hyrl.models.weight_buckets import iter_buckets
    from hyrl.rollout.sglang.server import free_port
    from hyrl.weight_sync.tensor import send_by_cuda_ipc

    urls = [f.url for f in fakes]
    fleet = RolloutFleet(
        functools.partial(make_tensor_engine, urls),
        num_engines=2,
        concurrency_per_engine=4,
        num_cpus_per_engine=0.5,
    )
    engine = SGLangFleet(fleet, "tensor", buffer_bytes=1 << 20, gpus_per_engine=1)
    monkeypatch.setattr(RolloutFleet, "engine_devices", property(lambda self: [[("h", 0)]] * 2))
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        engine.prepare_ipc_sync([("h", 0)])
        buckets = iter_buckets(split_fused_experts(hf_state_dict_with_shift(6.0)), 200)
        send_by_cuda_ipc(buckets, DefaultGroupRanks(), engine, pickle_serializer)
        assert [f.shift for f in fakes] == [6, 6]
        assert engine.last_sync_stats.buckets == 4
        fakes[1].weights = {name: torch.zeros_like(t) for name, t in fakes[1].weights.items()}
        fleet.kill_engine(1)
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 6) for p in PROMPTS]
        fleet.call_all("server_url")  # returns once the replacement has started
        assert fakes[1].shift == 0  # nothing staged: it waits for the next sync
        engine.prepare_ipc_sync([("h", 0)])
        buckets = iter_buckets(split_fused_experts(hf_state_dict_with_shift(2.0)), 200)
        send_by_cuda_ipc(buckets, DefaultGroupRanks(), engine, pickle_serializer)
        assert [f.shift for f in fakes] == [2, 2]
        generations = engine.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 2) for p in PROMPTS]
        with pytest.raises(ValueError, match="engine 0 runs on GPU"):
            engine.prepare_ipc_sync([("other-host", 0)])
    finally:
        dist.destroy_process_group()
        engine.close()


# --- a server that dies under its engine (SGLang's scheduler SIGQUITs it) ----------------------

DYING = os.path.join(os.path.dirname(fake_sglang_server.__file__), "dying_sglang_server.py")


def make_dying_engine(marker, log_dir, engine_index, how="--die-on-generate", timeout_s=30.0):
    """Engine i launches its own server process: tests/helpers/dying_sglang_server.py, which
    ends as SGLang's server does when its scheduler fails (or, with --hang-on-generate, stops
    answering), at its 2nd /generate request, once (engine 0's first server only: `marker`
    holds the engine index that died). timeout_s: the engine's request deadline."""
    from hyrl.rollout.sglang.server import SGLangServerProcess, free_port

    port = free_port()
    once = f"{marker}-{engine_index}"
    fail_on = "2" if engine_index == 0 else "1000000"
    server = SGLangServerProcess(
        "unused", port=port, log_path=f"{log_dir}/server{engine_index}-{port}.log",
        launch_command=[sys.executable, DYING, "--port", str(port), how, fail_on,
                        "--once", once],
    )  # fmt: skip
    return SGLangEngine.launch(
        server, 60.0, concurrency=2, stop_token_ids=[EOS], timeout_s=timeout_s
    )


def test_a_server_that_dies_mid_rollout_is_replaced_and_nothing_is_lost(ray_cluster, tmp_path):
    """Engine 0's server ends (SIGQUIT from its scheduler, then its own SIGKILL) on its second
    request while its engine actor lives on: the request fails, the actor reports EngineDied,
    and the fleet replaces the engine within --rollout-max-restarts and serves the chunk again."""
    fleet = RolloutFleet(
        functools.partial(make_dying_engine, str(tmp_path / "died"), str(tmp_path)),
        num_engines=2,
        concurrency_per_engine=2,
        num_cpus_per_engine=0.5,
        max_restarts=1,
    )
    try:
        generations = fleet.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 0) for p in PROMPTS]
        stats = fleet.stats()
        assert stats["restarts"] == [1, 0] and stats["resubmitted_prompts"] >= 1
        assert (tmp_path / "died-0").exists()
        logs = sorted(tmp_path.glob("server0-*.log"))
        assert any("SIGQUIT to the server" in p.read_text() for p in logs)
    finally:
        fleet.close()


def test_a_server_that_hangs_past_the_request_deadline_is_replaced(ray_cluster, tmp_path):
    """Engine 0's server stops answering (a stuck scheduler: no /generate, no /health) at its
    second request; past the request deadline (--sglang-request-timeout-s, 3 s here) the engine
    counts as dead, is replaced, and its prompts are served again. At c42290d the fleet never
    timed out a live engine stuck inside generate, and the timed-out request stopped the run."""
    make = functools.partial(
        make_dying_engine,
        str(tmp_path / "hung"),
        str(tmp_path),
        how="--hang-on-generate",
        timeout_s=3.0,
    )
    fleet = RolloutFleet(
        make, num_engines=2, concurrency_per_engine=2, num_cpus_per_engine=0.5, max_restarts=1
    )
    try:
        generations = fleet.generate(PROMPTS, PARAMS)
        assert [g.response_ids for g in generations] == [expected_tokens(p, 0) for p in PROMPTS]
        stats = fleet.stats()
        assert stats["restarts"] == [1, 0] and stats["resubmitted_prompts"] >= 1
        assert "did not answer a request within 3 s" in fleet._slots[0].last_error
    finally:
        fleet.close()


def test_the_engine_says_how_its_server_ended(tmp_path):
    """SGLangEngine.dead() after a failed call: the server's end as SGLang's ends (SIGKILL by
    its own SIGQUIT handler), with its log's last lines; None while it serves."""
    engine = make_dying_engine(str(tmp_path / "died"), str(tmp_path), 0)
    try:
        assert engine.dead(grace_s=0.1) is None
        engine.generate(PROMPTS[:1], PARAMS)  # the first request is answered
        with pytest.raises(SGLangError):
            engine.generate(PROMPTS[:1], PARAMS)  # the second ends the server
        why = engine.dead()
        assert why is not None and "was ended by SIGKILL (exit code -9)" in why
        assert "Received sigquit from a child process" in why  # the log's tail
    finally:
        engine.shutdown()
