"""Rollout routing replay over SGLang: the engine asks each /generate for the experts it routed
every token to and hands them back as Generation.routed_experts, int16 [tokens, layers, top-k]
(SGLang sends int32; hyrl halves them before they leave the engine actor).

Protocol tests against tests/helpers/fake_sglang_server.py. Its toy model: next token = previous + 1
(zero weights); its routing: the expert of token t in layer l, slot k is (t + l + k) % num_experts.
"""

import base64

import pytest
import torch
from fake_sglang_server import FakeSGLangServer, routed_expert_ids

from hyrl.config import parse_args, resolve
from hyrl.config.rollout_layout import rollout_layout
from hyrl.models.qwen3_moe.config import TINY
from hyrl.rollout.base import SamplingParams
from hyrl.rollout.sglang.client import SGLangClient, SGLangError
from hyrl.rollout.sglang.engine import SGLangEngine
from hyrl.rollout.sglang.server import SGLangServerProcess, strip_sglang_prefix

EOS = 1


@pytest.fixture
def routing_fake():
    """A server started with --enable-return-routed-experts: 2 MoE layers, top-2 of 4 experts."""
    with FakeSGLangServer(
        enable_return_routed_experts=True, num_moe_layers=2, moe_top_k=2, num_experts=4
    ) as server:
        yield server


def routing_client(url: str) -> SGLangClient:
    return SGLangClient(url, return_routed_experts=True, num_moe_layers=2, moe_top_k=2)


def answer_with(routed_experts: bytes, prompt_tokens: int, completion_tokens: int) -> dict:
    """A /generate answer of `completion_tokens` tokens 4, 5, ... carrying these id bytes."""
    tokens = list(range(4, 4 + completion_tokens))
    return {
        "output_ids": tokens,
        "meta_info": {
            "finish_reason": {"type": "length", "length": completion_tokens},
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "output_token_logprobs": [[-0.5, t, None] for t in tokens],
            "routed_experts": base64.b64encode(routed_experts).decode(),
        },
    }


# ---- the request ----------------------------------------------------------------------------


def test_the_payload_asks_for_routed_experts_only_when_the_client_does(routing_fake):
    SGLangClient(routing_fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    routing_client(routing_fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    (_, plain), (_, routed) = routing_fake.calls
    assert "return_routed_experts" not in plain
    assert routed.pop("return_routed_experts") is True
    assert routed == plain  # nothing else changes


def test_without_routing_replay_generations_carry_no_experts(routing_fake):
    [gen] = SGLangClient(routing_fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    assert gen.routed_experts is None


def test_routing_replay_needs_the_layer_count_and_top_k():
    with pytest.raises(ValueError, match="num_moe_layers and moe_top_k"):
        SGLangClient("http://127.0.0.1:1", return_routed_experts=True, num_moe_layers=2)


# ---- decoding -------------------------------------------------------------------------------


def test_routed_experts_have_one_row_per_token_the_model_ran(routing_fake, tmp_path):
    # prompt [2, 3] continues 4, 5, 6; the model ran 2, 3, 4, 5 (2 + 3 - 1 tokens), not 6.
    engine = SGLangEngine(
        routing_fake.url,
        concurrency=2,
        stop_token_ids=[EOS],
        weight_sync="disk",
        weight_sync_options={"directory": tmp_path},
        return_routed_experts=True,
        num_moe_layers=2,
        moe_top_k=2,
    )
    [gen] = engine.generate([[2, 3]], SamplingParams(3))
    assert gen.response_ids == [4, 5, 6]
    experts = gen.routed_experts
    assert experts.dtype == torch.int16 and experts.is_contiguous()
    # (t + l + k) % 4 for token t, layer l, slot k
    assert experts.tolist() == [
        [[2, 3], [3, 0]],  # token 2
        [[3, 0], [0, 1]],  # token 3
        [[0, 1], [1, 2]],  # token 4
        [[1, 2], [2, 3]],
    ]  # token 5
    experts += 1  # a writable tensor of its own, not a view of the decoded bytes


def test_every_generation_of_a_batch_gets_its_own_rows(routing_fake):
    prompts = [[2, 3], [7], [10, 11, 12]]
    generations = routing_client(routing_fake.url).generate_batch(
        prompts, SamplingParams(2), [EOS], concurrency=2
    )
    for prompt, gen in zip(prompts, generations):
        ran = prompt + gen.response_ids[:-1]
        assert gen.routed_experts.shape == (len(ran), 2, 2)
        assert torch.equal(gen.routed_experts, routed_expert_ids(ran, 2, 2, 4))


def test_a_server_without_the_flag_omits_the_ids_and_the_error_says_how_to_start_it():
    with FakeSGLangServer() as fake:  # not started with --enable-return-routed-experts
        with pytest.raises(SGLangError) as err:
            routing_client(fake.url).generate_batch([[3]], SamplingParams(2), [EOS], 1)
    message = str(err.value)
    assert "no meta_info.routed_experts" in message
    assert "--enable-return-routed-experts" in message and "router" in message


def test_bytes_that_are_not_whole_rows_are_refused_naming_the_sizes():
    # 2 layers x top-2 int32 = 16 bytes a row; 20 bytes is a row and a quarter
    with pytest.raises(SGLangError, match="has 20 bytes.*2 MoE layers x top-2.*16 bytes"):
        routing_client("http://127.0.0.1:1").to_generation(
            [2, 3], answer_with(bytes(20), prompt_tokens=2, completion_tokens=3)
        )


def test_an_expert_id_beyond_int16_is_refused_naming_the_ids():
    # 4 rows of 2 layers x top-2; one id of 40000 cannot be kept as int16
    ids = torch.zeros(4, 2, 2, dtype=torch.int32)
    ids[1, 0, 1] = 40000
    with pytest.raises(SGLangError, match="expert ids 0..40000: hyrl keeps them as int16"):
        routing_client("http://127.0.0.1:1").to_generation(
            [2, 3], answer_with(ids.numpy().tobytes(), prompt_tokens=2, completion_tokens=3)
        )


def test_a_row_count_other_than_the_tokens_the_model_ran_is_refused_naming_both():
    # prompt 2 + completion 3 - 1 = 4 tokens ran; the answer holds 3 rows of 16 bytes
    with pytest.raises(SGLangError, match="has 3 rows.*completion_tokens - 1 = 4"):
        routing_client("http://127.0.0.1:1").to_generation(
            [2, 3], answer_with(bytes(48), prompt_tokens=2, completion_tokens=3)
        )


def test_a_server_count_that_disagrees_with_the_tokens_sent_and_returned_is_refused():
    # the server says prompt 3 (+ completion 3 - 1 = 5 rows, 5 rows sent), hyrl sent 2 tokens
    with pytest.raises(
        SGLangError, match="has 5 rows, but the prompt sent and the response returned make 4 tokens"
    ):
        routing_client("http://127.0.0.1:1").to_generation(
            [2, 3], answer_with(bytes(80), prompt_tokens=3, completion_tokens=3)
        )


def test_the_error_preview_shows_the_answer_without_the_encoded_ids():
    answer = answer_with(bytes(48), prompt_tokens=2, completion_tokens=3)
    with pytest.raises(SGLangError) as err:
        routing_client("http://127.0.0.1:1").to_generation([2, 3], answer)
    assert answer["meta_info"]["routed_experts"] not in str(err.value)
    assert "<64 characters>" in str(err.value)  # base64 of 48 bytes


# ---- the server ---------------------------------------------------------------------------


def test_the_launch_command_enables_routed_experts_only_when_asked():
    assert (
        "--enable-return-routed-experts"
        in SGLangServerProcess("/m", python="python", return_routed_experts=True).command()
    )
    assert (
        "--enable-return-routed-experts" not in SGLangServerProcess("/m", python="python").command()
    )


def test_the_flag_is_hyrls_to_set_not_a_pass_through():
    with pytest.raises(ValueError, match="--enable-return-routed-experts is set by hyrl"):
        strip_sglang_prefix(["--sglang-enable-return-routed-experts"])


# ---- build_engine ---------------------------------------------------------------------------


@pytest.mark.parametrize("replay", [True, False])
def test_build_engine_through_a_router_returns_experts_with_use_routing_replay(tmp_path, replay):
    from hyrl.rollout.build import build_engine

    with FakeSGLangServer(
        enable_return_routed_experts=True,
        num_moe_layers=TINY.num_layers,
        moe_top_k=TINY.moe_router_topk,
        num_experts=TINY.num_experts,
    ) as fake:
        fake.router_workers = [fake.url]  # the fake plays a router in front of itself
        cfg = resolve(
            parse_args(
                [
                    "--run-dir",
                    str(tmp_path / "run"),
                    "--rollout-engine",
                    "sglang",
                    "--sglang-router-url",
                    fake.url,
                    "--update-weight-transport",
                    "disk",
                    *(["--use-rollout-routing-replay"] if replay else []),
                ]
            )
        )
        engine = build_engine(
            cfg.rollout,
            rollout_layout(cfg, world_size=1),
            TINY,
            pad_id=0,
            eos_id=EOS,
            device=torch.device("cpu"),
            run_dir=tmp_path / "run",
            seed=cfg.seed,
            hf_checkpoint=cfg.hf_checkpoint,
            return_routed_experts=cfg.mismatch.engine_returns_routing,
        )
        [gen] = engine.generate([[2, 3]], SamplingParams(3))
    if not replay:
        assert gen.routed_experts is None
        return
    # TINY: 2 layers, top-2 of 4 experts; the model ran 2, 3, 4, 5
    assert torch.equal(gen.routed_experts, routed_expert_ids([2, 3, 4, 5], 2, 2, 4))


def test_the_fleet_path_launches_every_engine_with_routed_experts(tmp_path, monkeypatch):
    """build_sglang_engine's engine factory, as a Ray actor would call it (launch is faked:
    starting SGLang needs a GPU)."""
    pytest.importorskip("ray")
    import hyrl.rollout.fleet
    from hyrl.rollout.build import build_engine

    factories, launched = [], {}

    class CapturingFleet:
        def __init__(self, factory, **options):
            factories.append(factory)

    def fake_launch(cls, server, startup_timeout_s, **options):
        launched.update(command=server.command(), options=options)
        return "engine"

    monkeypatch.setattr(hyrl.rollout.fleet, "RolloutFleet", CapturingFleet)
    monkeypatch.setattr(SGLangEngine, "launch", classmethod(fake_launch))
    cfg = resolve(
        parse_args(
            [
                "--run-dir",
                str(tmp_path / "run"),
                "--rollout-engine",
                "sglang",
                "--rollout-num-engines",
                "1",
                "--update-weight-transport",
                "disk",
                "--use-rollout-routing-replay",
            ]
        )
    )
    build_engine(
        cfg.rollout,
        rollout_layout(cfg, world_size=1),
        TINY,
        pad_id=0,
        eos_id=EOS,
        device=torch.device("cpu"),
        run_dir=tmp_path / "run",
        seed=cfg.seed,
        hf_checkpoint=cfg.hf_checkpoint,
        return_routed_experts=cfg.mismatch.engine_returns_routing,
    )
    assert factories[0](0) == "engine"  # what engine actor 0 runs
    assert "--enable-return-routed-experts" in launched["command"]
    options = launched["options"]
    assert (options["return_routed_experts"], options["num_moe_layers"], options["moe_top_k"]) == (
        True,
        TINY.num_layers,
        TINY.moe_router_topk,
    )


@pytest.mark.slow
@pytest.mark.parametrize("fake_experts", [4, 8])
def test_the_trainer_replays_what_the_server_returns_and_refuses_ids_beyond_the_model(
    tmp_path, fake_experts
):
    """The trainer through --sglang-router-url with --use-rollout-routing-replay (the fake plays
    router and server; it is not SGLang). Ids of a server with more experts than the model (8 > 4)
    stop the run naming the range instead of indexing out of bounds."""
    from recipe_runs import records, run_recipe
    from transformers import Qwen3MoeForCausalLM

    from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors

    hf_names = checkpoint_named_tensors(Qwen3MoeForCausalLM(TINY.to_hf_config()).state_dict())
    with FakeSGLangServer(
        weights={n: torch.zeros_like(t) for n, t in hf_names},
        enable_return_routed_experts=True,
        num_moe_layers=TINY.num_layers,
        moe_top_k=TINY.moe_router_topk,
        num_experts=fake_experts,
    ) as fake:
        fake.router_workers = [fake.url]
        run_dir = tmp_path / "run"
        proc = run_recipe(
            run_dir,
            "--num-steps",
            "2",
            "--rollout-engine",
            "sglang",
            "--sglang-router-url",
            fake.url,
            "--update-weight-transport",
            "disk",
            "--rollout-concurrency",
            "16",
            "--use-rollout-routing-replay",
            "--use-tis",
        )
    if fake_experts > TINY.num_experts:
        assert proc.returncode != 0
        assert "routed to experts 0..7, outside the model's 0..3 (--num-experts)" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert len(rows) == 2
    for row in rows:
        assert row["mismatch/routing_compared"] > 0
        assert row["mismatch/routing_replay_errors"] == 0  # megatron used the server's ids
        assert row["mismatch/routing_diff_frac"] > 0  # the fake's ids are not the model's choice
