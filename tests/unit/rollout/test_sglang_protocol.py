"""Protocol tests for the SGLang rollout backend, against tests/helpers/fake_sglang_server.py.

They pin what hyrl sends and how it reads the answers (routes, JSON fields, order, concurrency),
not what SGLang computes: tests/gpu/test_sglang.py runs the real server.

The fake's toy model: next token = (previous + 1 + shift) % 16, shift = round(sum of weights),
log-prob of token t = -0.1 * (t % 5 + 1). With zero weights a prompt ending in 3 continues 4, 5, 6.
"""

import functools
import sys

import flattened_bucket_cases as cases
import pytest
import torch
from fake_sglang_server import (
    FakeSGLangServer,
    default_weights,
    hf_state_dict_with_shift,
    pickle_serializer,
)

from hyrl.rollout.base import SamplingParams
from hyrl.rollout.sglang.client import SGLangClient, SGLangError, to_sglang_sampling_params
from hyrl.rollout.sglang.engine import SGLangEngine
from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync
from hyrl.rollout.sglang.receive.payload import bucket_named_tensors, checkpoint_named_tensors
from hyrl.rollout.sglang.server import SGLangServerProcess, free_port, strip_sglang_prefix

EOS = 1


@pytest.fixture
def fake():
    with FakeSGLangServer() as server:
        yield server


def engine_for(fake, mode="tensor", **options):
    defaults = {
        "tensor": {"serializer": pickle_serializer},
        "distributed": {
            "backend": "gloo",
            "group_name": f"hyrl_test_{free_port()}",
            "timeout_s": 30.0,
        },
        "disk": {},
    }[mode]
    return SGLangEngine(
        fake.url,
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync=mode,
        buffer_bytes=200,
        weight_sync_options={**defaults, **options},
    )


# ---- /generate ------------------------------------------------------------------------------


def test_generate_request_uses_the_real_route_and_field_names(fake):
    SGLangClient(fake.url).generate_batch(
        [[3]], SamplingParams(4, temperature=0.7, top_p=0.9), stop_token_ids=[EOS], concurrency=1
    )
    [(route, payload)] = fake.calls
    assert route == "/generate"
    assert payload == {
        "input_ids": [3],
        "return_logprob": True,
        "sampling_params": {
            "max_new_tokens": 4,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": -1,
            "stop_token_ids": [EOS],
            "skip_special_tokens": False,
            "no_stop_trim": True,
        },
    }


def test_greedy_is_temperature_zero_as_sglang_reads_it():
    assert (
        to_sglang_sampling_params(SamplingParams(8, temperature=0.0), [EOS])["temperature"] == 0.0
    )


def test_generations_come_back_in_input_order_with_one_log_prob_per_token(fake):
    prompts = [[2, 3], [7], [10, 11, 12]]
    generations = SGLangClient(fake.url).generate_batch(prompts, SamplingParams(3), [EOS], 2)
    assert [g.prompt_ids for g in generations] == prompts
    assert [g.response_ids for g in generations] == [[4, 5, 6], [8, 9, 10], [13, 14, 15]]
    # -0.1 * (t % 5 + 1): 4 -> -0.5, 5 -> -0.1, 6 -> -0.2
    assert generations[0].response_log_probs == pytest.approx([-0.5, -0.1, -0.2])
    assert all(len(g.response_log_probs) == len(g.response_ids) for g in generations)
    assert {g.finish_reason for g in generations} == {"length"}


def test_each_answer_counts_toward_the_heartbeats_responses(fake):
    from hyrl.rollout.base import GENERATION_PROGRESS

    with GENERATION_PROGRESS.counting(5):
        SGLangClient(fake.url).generate_batch([[2], [3], [7]], SamplingParams(2), [EOS], 2)
        assert GENERATION_PROGRESS.snapshot() == (3, 5)


def test_stop_token_ends_the_response_and_maps_to_stop(fake):
    # 14 -> 15 -> 0 -> 1 (= EOS): stops after 3 tokens, the EOS kept as the last response id.
    [gen] = SGLangClient(fake.url).generate_batch([[14]], SamplingParams(10), [EOS], 1)
    assert gen.response_ids == [15, 0, EOS]
    assert gen.finish_reason == "stop"
    assert len(gen.response_log_probs) == 3


def test_a_calls_stop_ids_join_the_engines_for_that_call_only(fake):
    # 14 -> 15 -> 0 -> 1 (= EOS): this call's stop id 15 ends the response at its first token,
    # kept; the engine's EOS still stops the next call, which names none.
    params = SamplingParams(10, stop_token_ids=(15, EOS))
    sent = to_sglang_sampling_params(params, [EOS])["stop_token_ids"]
    assert sent == [EOS, 15]  # the engine's first, each once
    client = SGLangClient(fake.url)
    [gen] = client.generate_batch([[14]], params, [EOS], 1)
    assert (gen.response_ids, gen.finish_reason) == ([15], "stop")
    [gen] = client.generate_batch([[14]], SamplingParams(10), [EOS], 1)
    assert (gen.response_ids, gen.finish_reason) == ([15, 0, EOS], "stop")


def test_hitting_max_new_tokens_maps_to_length(fake):
    [gen] = SGLangClient(fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    assert (gen.response_ids, gen.finish_reason) == ([4, 5], "length")


def test_at_most_concurrency_requests_are_in_flight():
    with FakeSGLangServer(generate_delay_s=0.05) as fake:
        SGLangClient(fake.url).generate_batch(
            [[i % 16] for i in range(12)], SamplingParams(1), [EOS], concurrency=3
        )
        assert fake.peak_in_flight == 3
        assert fake.routes_called().count("/generate") == 12


def test_an_aborted_request_raises_naming_the_route():
    client = SGLangClient("http://127.0.0.1:1")
    answer = {
        "output_ids": [4],
        "meta_info": {
            "finish_reason": {"type": "abort", "message": "x"},
            "output_token_logprobs": [[-0.5, 4, None]],
        },
    }
    with pytest.raises(SGLangError, match="/generate.*aborted"):
        client.to_generation([3], answer)


def test_http_errors_name_url_route_status_and_body(fake):
    fake.fail("/generate", 400, {"error": {"message": "bad sampling params"}})
    with pytest.raises(SGLangError) as err:
        SGLangClient(fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    message = str(err.value)
    assert f"{fake.url}/generate" in message and "HTTP 400" in message
    assert "bad sampling params" in message


def test_an_unreachable_server_raises_saying_so():
    with pytest.raises(SGLangError, match="failed before any answer"):
        SGLangClient(f"http://127.0.0.1:{free_port()}", timeout_s=2).get_model_info()


# ---- bucketing and checkpoint layout --------------------------------------------------------


def test_buckets_keep_order_and_stay_under_the_buffer():
    named = [
        (f"w{i}", torch.zeros(n, dtype=torch.float32)) for i, n in enumerate([10, 10, 5, 20, 1])
    ]
    # 4 bytes per element: 40, 40, 20, 80, 4 bytes; buffer 100 -> [40+40+20], [80+4]
    buckets = bucket_named_tensors(named, buffer_bytes=100)
    assert [[n for n, _ in b] for b in buckets] == [["w0", "w1", "w2"], ["w3", "w4"]]


def test_a_tensor_larger_than_the_buffer_is_a_bucket_by_itself():
    named = [("small", torch.zeros(2)), ("huge", torch.zeros(100)), ("tail", torch.zeros(2))]
    buckets = bucket_named_tensors(named, buffer_bytes=16)  # 8, 400, 8 bytes
    assert [[n for n, _ in b] for b in buckets] == [["small"], ["huge"], ["tail"]]


def test_checkpoint_names_match_what_save_pretrained_writes(tmp_path):
    from safetensors.torch import load_file
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY

    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(TINY.to_hf_config())
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    ours = dict(checkpoint_named_tensors(model.state_dict()))
    assert sorted(ours) == sorted(saved)
    for name, tensor in saved.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0, msg=name)


# ---- weight sync: each mode changes the generations as the new weights say --------------------


@pytest.mark.parametrize("mode", ["tensor", "distributed", "disk"])
def test_weight_sync_changes_generations_as_the_new_weights_say(fake, mode, tmp_path):
    options = {"directory": tmp_path / "ckpt"} if mode == "disk" else {}
    engine = engine_for(fake, mode, **options)
    assert engine.generate([[3]], SamplingParams(3))[0].response_ids == [4, 5, 6]  # shift 0
    try:
        engine.update_weights(hf_state_dict_with_shift(2.0))
        # shift 2: next = previous + 3
        assert engine.generate([[3]], SamplingParams(3))[0].response_ids == [6, 9, 12]
        stats = engine.last_sync_stats
        # 4 bytes x (64 + 2 experts x (12 + 12 + 12) + 64) = 800 bytes; buckets of <= 200 bytes:
        # [embed 256 alone], [gate0 up0 gate1 up1 = 192], [down0 down1 = 96], [lm_head 256 alone]
        assert (stats.transport, stats.tensor_bytes) == (mode, 800)
        assert stats.buckets == 4 and stats.elapsed_s >= stats.transfer_s > 0
        assert fake.weight_version == "1"
    finally:
        engine.shutdown()


def test_sync_order_is_pause_session_transfer_flush_continue(fake):
    engine_for(fake).update_weights(hf_state_dict_with_shift(1.0))
    routes = fake.routes_called()
    assert routes == (
        ["/pause_generation", "/begin_weight_update"]
        + ["/update_weights_from_tensor"] * 4
        + ["/end_weight_update", "/flush_cache", "/continue_generation"]
    )
    pause, begin, update = fake.calls[0][1], fake.calls[1][1], fake.calls[2][1]
    assert pause == {"mode": "abort"}
    assert begin == {"selector": "all"}
    assert fake.calls[-3][1] == {}  # /end_weight_update
    assert set(update) == {
        "serialized_named_tensors",
        "load_format",
        "flush_cache",
        "weight_version",
    }
    assert update["flush_cache"] is False  # flushed once, after the last bucket


def test_tensor_sync_sends_one_payload_per_tp_rank():
    with FakeSGLangServer(tp_size=2) as fake:
        engine_for(fake, tp_size=2).update_weights(hf_state_dict_with_shift(1.0))
        update = fake.calls[2][1]
        assert len(update["serialized_named_tensors"]) == 2


def test_session_end_and_continue_are_sent_even_when_a_transfer_fails(fake):
    fake.fail("/update_weights_from_tensor")
    engine = engine_for(fake)
    with pytest.raises(SGLangError, match="update_weights_from_tensor.*injected failure"):
        engine.update_weights(hf_state_dict_with_shift(1.0))
    assert fake.routes_called() == [
        "/pause_generation",
        "/begin_weight_update",
        "/update_weights_from_tensor",
        "/end_weight_update",
        "/continue_generation",
    ]
    assert not fake.session_open  # the next sync can open its own
    del fake.failures["/update_weights_from_tensor"]
    engine.update_weights(hf_state_dict_with_shift(1.0))
    assert fake.shift == 1


def test_a_refused_session_leaves_the_server_generating(fake):
    fake.session_open = True  # e.g. a trainer that died mid-sync left it open
    with pytest.raises(SGLangError, match="begin_weight_update.*already open"):
        engine_for(fake).update_weights(hf_state_dict_with_shift(1.0))
    assert fake.routes_called() == [
        "/pause_generation",
        "/begin_weight_update",
        "/continue_generation",
    ]


def test_disk_sync_opens_no_session_and_leaves_the_flush_to_the_end(fake, tmp_path):
    engine = engine_for(fake, "disk", directory=str(tmp_path / "sync"))
    engine.update_weights(hf_state_dict_with_shift(2.0))
    assert fake.shift == 2
    assert fake.routes_called() == [
        "/pause_generation",
        "/update_weights_from_disk",
        "/flush_cache",
        "/continue_generation",
    ]
    assert fake.calls[1][1]["flush_cache"] is False  # SGLang's default would flush twice


def test_distributed_sync_posts_group_and_tensor_metadata(fake):
    engine = engine_for(fake, "distributed")
    try:
        engine.update_weights(hf_state_dict_with_shift(1.0))
        routes = fake.routes_called()
        assert routes[:3] == [
            "/pause_generation",
            "/begin_weight_update",
            "/init_weights_update_group",
        ]
        assert routes[-3:] == ["/end_weight_update", "/flush_cache", "/continue_generation"]
        init = fake.calls[2][1]
        assert (init["rank_offset"], init["world_size"], init["backend"]) == (1, 2, "gloo")
        update = fake.calls[3][1]
        assert update["names"][0] == "model.embed_tokens.weight"
        assert update["dtypes"][0] == "float32" and update["shapes"][0] == [16, 4]
        assert update["flush_cache"] is False
        assert update["load_format"] == "flattened_bucket"  # one broadcast for the bucket
    finally:
        engine.shutdown()
    assert fake.routes_called()[-1] == "/destroy_weights_update_group"


def test_a_failing_distributed_receiver_aborts_the_sync_instead_of_hanging(fake):
    sync = DistributedWeightSync(
        [SGLangClient(fake.url)],
        200,
        backend="gloo",
        group_name=f"hyrl_test_{free_port()}",
        timeout_s=30.0,
    )
    try:
        sync.connect()
        fake.fail("/update_weights_from_distributed")
        with pytest.raises(SGLangError, match="injected failure"):
            sync.sync(checkpoint_named_tensors(hf_state_dict_with_shift(1.0)))
        assert fake.routes_called()[-1] == "/continue_generation"
    finally:
        sync.group = None  # the broken group cannot be destroyed cleanly; drop it


def test_the_fake_refuses_a_flattened_bucket_as_sglang_does(fake):
    # the same cases run against SGLang's own receiver in the contract tier
    sync = DistributedWeightSync(
        [SGLangClient(fake.url)], 200, backend="gloo", group_name=cases.GROUP_NAME, timeout_s=30.0
    )
    sync.connect()
    try:
        cases.check(cases.refusals(functools.partial(SGLangClient(fake.url).request, "POST")))
    finally:
        sync.close()


def test_release_and_resume_memory_flush_first(fake):
    engine = engine_for(fake)
    engine.release_memory()
    engine.resume_memory(tags=["weights"])
    assert fake.routes_called() == [
        "/flush_cache",
        "/release_memory_occupation",
        "/resume_memory_occupation",
    ]
    assert fake.calls[2][1] == {"tags": ["weights"]}


# ---- server process -------------------------------------------------------------------------


def test_server_command_line_is_built_from_the_flags(tmp_path):
    server = SGLangServerProcess(
        "/ckpt/qwen3",
        host="0.0.0.0",
        port=30001,
        tp_size=2,
        base_gpu_id=4,
        mem_fraction_static=0.7,
        max_running_requests=128,
        colocated=True,
        random_seed=7,
        extra_flags=["--sglang-attention-backend", "triton", "--sglang-disable-cuda-graph"],
        server_args=["--log-level", "warning"],
        log_path=tmp_path / "s.log",
        python="python",
    )
    assert server.command() == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/ckpt/qwen3",
        "--host",
        "0.0.0.0",
        "--port",
        "30001",
        "--tp-size",
        "2",
        "--base-gpu-id",
        "4",
        "--dtype",
        "bfloat16",
        "--max-running-requests",
        "128",
        "--skip-tokenizer-init",
        "--skip-server-warmup",
        "--mem-fraction-static",
        "0.7",
        "--enable-memory-saver",
        "--random-seed",
        "7",
        "--attention-backend",
        "triton",
        "--disable-cuda-graph",
        "--log-level",
        "warning",
    ]


def test_not_colocated_and_default_memory_fraction_leave_those_flags_out():
    command = SGLangServerProcess("/m", python="python").command()
    assert "--enable-memory-saver" not in command and "--mem-fraction-static" not in command


def test_pass_through_flags_need_the_prefix_and_cannot_override_hyrl():
    assert strip_sglang_prefix(["--sglang-foo", "bar"]) == ["--foo", "bar"]
    with pytest.raises(ValueError, match="--sglang-foo"):
        strip_sglang_prefix(["--foo", "bar"])
    with pytest.raises(ValueError, match="--port is set by hyrl"):
        strip_sglang_prefix(["--sglang-port", "1"])


def test_a_server_that_dies_at_startup_raises_with_exit_code_and_log_tail(tmp_path):
    script = "import sys\nfor i in range(50): print(f'log line {i}')\nsys.exit(1)"
    server = SGLangServerProcess(
        "/m",
        port=free_port(),
        log_path=tmp_path / "s.log",
        launch_command=[sys.executable, "-c", script],
    )
    with pytest.raises(SGLangError) as err:
        server.start(startup_timeout_s=30, poll_interval_s=0.1)
    message = str(err.value)
    assert "exited with code 1" in message
    assert "log line 49" in message and "log line 10" in message
    assert "log line 9\n" not in message  # only the last 40 lines


def test_a_server_that_never_gets_healthy_is_killed_at_the_deadline(tmp_path):
    script = "import time\nprint('loading', flush=True)\ntime.sleep(60)"
    server = SGLangServerProcess(
        "/m",
        port=free_port(),
        log_path=tmp_path / "s.log",
        launch_command=[sys.executable, "-c", script],
    )
    with pytest.raises(
        SGLangError, match=r"did not answer .*/health_generate within 1 s(.|\n)*loading"
    ):
        server.start(startup_timeout_s=1, poll_interval_s=0.1)
    assert server.process.poll() is not None


def test_launch_returns_an_engine_once_healthy(tmp_path):
    with FakeSGLangServer() as fake:
        port = int(fake.url.rsplit(":", 1)[1])
        script = "import time\ntime.sleep(60)"  # stands in for the server: the fake answers
        server = SGLangServerProcess(
            "/m",
            port=port,
            log_path=tmp_path / "s.log",
            launch_command=[sys.executable, "-c", script],
        )
        engine = SGLangEngine.launch(
            server,
            startup_timeout_s=30,
            concurrency=2,
            stop_token_ids=[EOS],
            weight_sync_options={"serializer": pickle_serializer},
        )
        assert engine.generate([[3]], SamplingParams(1))[0].response_ids == [4]
        engine.shutdown()
        assert server.process.poll() is not None


def test_default_weights_have_zero_shift():
    assert FakeSGLangServer(weights=default_weights()).shift == 0


def test_a_server_launched_to_die_with_its_parent_does_not_outlive_it(tmp_path):
    """A Ray engine actor killed with SIGKILL cannot stop its server; the server must go too,
    or it keeps the GPU memory the replacement needs."""
    import os
    import subprocess
    import time

    parent = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys\n"
                "from hyrl.rollout.sglang.server import _die_with_parent\n"
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
                "                         preexec_fn=_die_with_parent, start_new_session=True)\n"
                "print(child.pid, flush=True)\n"
            ),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    child_pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return  # gone with its parent
        try:
            with open(f"/proc/{child_pid}/stat") as stat:  # a zombie awaiting its reaper is gone
                if stat.read().split()[2] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(child_pid, 9)
    pytest.fail(f"the child {child_pid} outlived its parent by 10 s")


def test_partial_rollout_segments_continue_on_sglang_with_the_weights_synced_between(fake):
    """--inflight-weight-updates with SGLang: each segment is a /generate of the prompt plus the
    tokens so far with max_new_tokens = the segment, so a sync between two segments changes the rest
    of the response and nothing has to survive inside the server (no paused request)."""
    from hyrl.rollout.partial import generate_in_segments

    engine = engine_for(fake)
    calls = []

    def segment(prompts, params):
        if calls:  # the weight sync lands between the first and the second segment
            engine.update_weights(hf_state_dict_with_shift(2.0))
        calls.append([list(p) for p in prompts])
        return engine.generate(prompts, params), len(calls) - 1

    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    try:
        [got] = generate_in_segments(segment, [[3]], greedy, segment_tokens=2)
    finally:
        engine.shutdown()
    # shift 0: 3 -> 4, 5; then shift 2 (next = previous + 3): 5 -> 8, 11
    assert got.response_ids == [4, 5, 8, 11] and got.finish_reason == "length"
    assert got.response_versions == [0, 0, 1, 1]
    assert calls == [[[3]], [[3, 4, 5]]]  # the second segment re-reads prompt + tokens so far
    generated = [p for route, p in fake.calls if route == "/generate"]
    assert [p["sampling_params"]["max_new_tokens"] for p in generated] == [2, 2]
