"""The streamed weight export (hyrl/backends/megatron/weights.iter_hf_buckets) and what the
engines do with a stream.

Multi-rank cases run tests/helpers/weight_stream_worker.py under torchrun on gloo ranks: the
stream's buckets, put together, are the old full state dict bit for bit; no rank holds more than
about two buckets at once although the model is many buckets big.
"""

import json
import weakref
from pathlib import Path

import pytest
import torch
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import TINY
from hyrl.models.weight_buckets import LiveBytes, iter_buckets

WORKER = HELPERS / "weight_stream_worker.py"
BUFFER = 128 * 1024  # bytes; the worker's 8-layer model is ~2 MB of fp32
LAYOUTS = {"tp1": (1, 1, 1), "tp2": (2, 2, 1), "ep2": (2, 1, 2)}


def run_worker(tmp_path: Path, layout: str, dtype: str = "float32") -> list[dict]:
    nproc, tp, ep = LAYOUTS[layout]
    out = tmp_path / f"{layout}-{dtype}"
    run_ranks(WORKER, nproc, out, tp, ep, BUFFER, dtype)
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    return {layout: run_worker(tmp, layout) for layout in LAYOUTS}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_streamed_buckets_put_together_are_the_full_state_dict_bit_for_bit(streamed, layout):
    for rank_result in streamed[layout]:
        assert rank_result["names_equal"] and rank_result["no_duplicates"]
        assert rank_result["bit_exact"]
        assert rank_result["dtypes"] == ["torch.float32"]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_buckets_stay_under_the_buffer_and_peak_memory_under_two_buckets(streamed, layout):
    for r in streamed[layout]:
        assert r["model_bytes"] >= 10 * BUFFER  # the model is many buckets big
        assert r["largest_tensor_bytes"] <= BUFFER
        assert all(size <= BUFFER for size in r["bucket_bytes"])
        # what a sync holds at once: one bucket + what overflowed it + one parameter's (or
        # under EP one expert group's, at most half a bucket) gather: 2 buckets + the largest
        assert r["peak_bytes"] <= 2 * BUFFER + r["largest_tensor_bytes"]
        assert r["peak_bytes"] < r["model_bytes"] / 5
        assert r["live_after"] == 0
        assert r["previous_bucket_freed_while_building_next"]  # else two buckets at once


@pytest.mark.parametrize("layout", ["tp2", "ep2"])
@pytest.mark.parametrize("scale", [1, 4])
def test_the_stream_peak_is_at_most_two_buckets_plus_the_largest_tensor(streamed, layout, scale):
    # the bound, at the test's bucket and at a 4x bigger one (there whole layers of
    # experts share one EP gather), each bucket small enough that the model is several
    bucket = scale * BUFFER
    for r in streamed[layout]:
        s = r["streams"][str(bucket)]
        assert s["num_buckets"] >= 3
        assert s["peak_bytes"] <= 2 * bucket + s["largest_tensor_bytes"]
        assert s["live_after"] == 0


def test_ep_gathers_go_per_layer_and_give_what_one_gather_per_weight_gives(streamed):
    for r in streamed["ep2"]:
        assert r["per_layer_equals_one_at_a_time"]  # names, order and values, bit for bit
        # one gather per local expert weight before; one per layer grouped
        assert r["gathers_one_at_a_time"] == r["local_expert_weights"] > r["layers"]
        assert r["gathers_per_layer"] == r["layers"]
        # the bucketed stream groups too: at 4x the bucket (a layer's experts fit in half)
        # one gather per layer, at the test's bucket fewer than one per weight at most
        streams = r["streams"]
        assert streams[str(4 * BUFFER)]["gathers"] == r["layers"]
        assert streams[str(BUFFER)]["gathers"] <= r["gathers_one_at_a_time"]


@pytest.mark.parametrize("layout", ["tp2", "ep2"])
def test_every_gathered_tensor_owns_its_storage_so_a_bucket_keeps_only_what_it_counts(
    streamed, layout
):
    # a view into a layer's shared EP gather buffer would keep the whole buffer alive from
    # whichever bucket holds it, beyond what LiveBytes counts for that bucket
    for r in streamed[layout]:
        assert r["gathered_tensors_own_their_storage"]


@pytest.mark.parametrize("layout", ["tp2", "ep2"])
def test_every_rank_cuts_the_same_buckets_and_keeps_only_its_own(streamed, layout):
    rank0, rank1 = streamed[layout]
    assert rank0["bucket_bytes"] == rank1["bucket_bytes"]
    assert (rank0["buckets_kept_on_rank0_only"], rank1["buckets_kept_on_rank0_only"]) == (
        rank0["num_buckets"],
        0,
    )
    # keep=k % world == rank: disk mode's split, every bucket on exactly one rank
    assert rank0["buckets_owned"] + rank1["buckets_owned"] == rank0["num_buckets"]


def test_through_rank_0_the_experts_are_gathered_to_rank_0_only(streamed):
    # the stream as weight sync through rank 0 runs it (keep=rank == 0) under EP 2, no TP:
    # every gather is an expert gather. Rank 0 receives each expert once (its own included) and
    # keeps the full state dict bit for bit; rank 1 only sends (before: it all-gathered every
    # expert too, and cut buckets it then dropped)
    rank0, rank1 = (r["to_rank_0"] for r in streamed["ep2"])
    assert rank0["bit_exact"] and rank0["kept_tensors"] > 0 and rank1["kept_tensors"] == 0
    assert rank0["received_bytes"] == streamed["ep2"][0]["expert_bytes"]
    assert rank1["received_bytes"] == 0
    # rank 1 holds at most one expert group's send buffer (half a bucket over EP 2; none where
    # the group is one weight, sent as itself), no bucket
    assert rank1["peak_bytes"] <= BUFFER // 4
    assert rank0["live_after"] == rank1["live_after"] == 0


# 4 ranks, EP 2 (megatron's rank order: EP groups {0, 1} and {2, 3}), with (ep2pp2) 2 pipeline
# stages (pipeline groups {0, 2} and {1, 3}) or (ep2dp2) 2 expert-data-parallel replicas: the
# expert holders, which receive the experts, are rank 0 and the ranks that feed it
HOLDERS = {"ep2pp2": (1, 2, 2, {0, 2}), "ep2dp2": (1, 2, 1, {0})}  # tp, ep, pp, holders


@pytest.mark.parametrize("layout", list(HOLDERS))
def test_through_rank_0_every_expert_reaches_one_holder_once(tmp_path, layout):
    tp, ep, pp, holders = HOLDERS[layout]
    out = tmp_path / layout
    run_ranks(WORKER, 4, out, tp, ep, BUFFER, "float32", pp)
    ranks = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(4)]
    synced = [r["to_rank_0"] for r in ranks]
    assert synced[0]["bit_exact"]  # with ep2pp2 the second stage's experts came from rank 2
    assert [s["kept_tensors"] > 0 for s in synced] == [True, False, False, False]
    # no TP: every gather is an expert gather; each expert is received once, by a holder
    assert {r for r, s in enumerate(synced) if s["received_bytes"]} == holders
    assert sum(s["received_bytes"] for s in synced) == ranks[0]["expert_bytes"]


@pytest.mark.parametrize("layout", ["tp1", "ep2"])
def test_bfloat16_parameters_stream_as_bfloat16(tmp_path, layout):
    for result in run_worker(tmp_path, layout, "bfloat16"):
        assert result["dtypes"] == ["torch.bfloat16"] and result["bit_exact"]


def test_per_parameter_mapping_equals_the_whole_dict_table():
    torch.manual_seed(0)
    full = {name: torch.randn(shape) for name, shape in _tiny_megatron_shapes().items()}
    whole = dict(hf_mapping.split_fused_experts(hf_mapping.megatron_to_hf(full, TINY)))
    one_at_a_time = dict(
        pair
        for name, tensor in full.items()
        for pair in hf_mapping.megatron_to_hf_checkpoint(name, tensor, TINY)
    )
    assert sorted(one_at_a_time) == sorted(whole)
    assert all(torch.equal(one_at_a_time[n], whole[n]) for n in whole)


def test_an_unknown_megatron_parameter_is_named():
    with pytest.raises(KeyError, match="decoder.layers.0.mlp.shared_expert.weight"):
        list(
            hf_mapping.megatron_to_hf_checkpoint(
                "decoder.layers.0.mlp.shared_expert.weight", torch.zeros(1), TINY
            )
        )


def _tiny_megatron_shapes() -> dict[str, tuple[int, ...]]:
    from transformers import Qwen3MoeForCausalLM

    hf = Qwen3MoeForCausalLM(TINY.to_hf_config()).state_dict()
    return {name: tuple(t.shape) for name, t in hf_mapping.hf_to_megatron(hf, TINY).items()}


# ---- the bucketing rule ----------------------------------------------------------------------


def test_buckets_are_cut_lazily_so_the_producer_never_runs_ahead():
    pulled = []

    def producer():
        for i in range(6):
            pulled.append(i)
            yield f"w{i}", torch.zeros(10)  # 40 bytes each; buffer 100 -> two per bucket

    for k, bucket in enumerate(iter_buckets(producer(), buffer_bytes=100)):
        assert [n for n, _ in bucket] == [f"w{2 * k}", f"w{2 * k + 1}"]
        # the tensor that overflowed bucket k is the only one read beyond it
        assert len(pulled) == min(2 * k + 3, 6)


def test_live_bytes_count_a_bucket_until_the_next_is_asked_for():
    live = LiveBytes()
    named = [(f"w{i}", torch.zeros(10)) for i in range(5)]  # 40 bytes each
    seen = []
    for _bucket in iter_buckets(named, buffer_bytes=100, live=live):
        seen.append(live.current)
    # the bucket handed out: [w0 w1], [w2 w3], [w4]; the tensor that overflowed a bucket counts
    # once it joins the next (its producer counts it until then, if it allocated it)
    assert seen == [80, 80, 40]
    assert (live.peak, live.current) == (80, 0)


# ---- engines: a stream goes in bucket by bucket and nothing is kept ----------------------------


def fresh_buckets(hf_state, buffer_bytes):
    """The stream as the trainer makes it: every tensor a fresh copy that nobody else holds."""
    named = ((name, tensor.clone()) for name, tensor in hf_mapping.split_fused_experts(hf_state))
    return iter_buckets(named, buffer_bytes)


def released_before_next(buckets):
    """Pass the buckets on; whenever the consumer has taken the next one, the previous one's
    tensors must be gone (an engine that kept a reference would keep them alive)."""
    previous = []
    for bucket in buckets:
        assert all(ref() is None for ref in previous), "an engine kept a bucket"
        previous = [weakref.ref(tensor) for _, tensor in bucket]
        yield bucket
        del bucket


def test_hf_engine_loads_a_stream_bucket_by_bucket_into_its_fused_experts():
    from hyrl.rollout.hf_engine import HFRolloutEngine

    torch.manual_seed(0)
    source = HFRolloutEngine(TINY, concurrency=2, pad_id=0, eos_id=1).model.state_dict()
    engine = HFRolloutEngine(TINY, concurrency=2, pad_id=0, eos_id=1)
    engine.update_weights_stream(released_before_next(fresh_buckets(source, 2048)))
    got = engine.model.state_dict()
    assert all(torch.equal(got[name], source[name]) for name in source)


def test_hf_engine_names_a_weight_it_does_not_have_and_weights_that_never_came():
    from hyrl.rollout.hf_engine import HFRolloutEngine

    engine = HFRolloutEngine(TINY, concurrency=2, pad_id=0, eos_id=1)
    with pytest.raises(KeyError, match="model.layers.0.mlp.experts.9.up_proj.weight"):
        engine.update_weights_stream(
            [[("model.layers.0.mlp.experts.9.up_proj.weight", torch.zeros(64, 64))]]
        )
    with pytest.raises(KeyError, match="never arrived"):
        engine.update_weights_stream([[("model.norm.weight", torch.ones(64))]])


@pytest.mark.parametrize("mode", ["tensor", "distributed"])
def test_sglang_sync_frees_each_bucket_before_taking_the_next(mode, monkeypatch):
    from fake_sglang_server import FakeSGLangServer, pickle_serializer

    from hyrl.rollout.sglang.engine import SGLangEngine
    from hyrl.rollout.sglang.server import free_port

    weights = {
        "model.embed_tokens.weight": torch.zeros(16, 4),
        "model.layers.0.mlp.experts.gate_up_proj": torch.full((2, 6, 4), 0.25),
        "model.layers.0.mlp.experts.down_proj": torch.zeros(2, 4, 3),
        "lm_head.weight": torch.zeros(16, 4),
    }
    options = (
        {"serializer": pickle_serializer}
        if mode == "tensor"
        else {
            "backend": "gloo",
            "group_name": f"hyrl_test_{free_port()}",
            "timeout_s": 30.0,
            "device": "cpu",
        }
    )
    with FakeSGLangServer() as fake:
        engine = SGLangEngine(
            fake.url,
            concurrency=1,
            stop_token_ids=[1],
            weight_sync=mode,
            buffer_bytes=200,
            weight_sync_options=options,
        )
        # distributed waits once per bucket on the servers' answers: no sleep-poll per tensor
        monkeypatch.setattr("time.sleep", lambda s: pytest.fail(f"sleep({s}) in a weight sync"))
        try:
            engine.update_weights_stream(released_before_next(fresh_buckets(weights, 200)))
        finally:
            monkeypatch.undo()
            engine.shutdown()
        assert fake.shift == round(0.25 * 2 * 6 * 4)
        # buckets: the embedding (256 bytes, over the buffer, alone), 4 and 2 expert weights of
        # 48 bytes, lm_head (alone). distributed broadcasts a bucket of several tensors as one
        # flat copy (the 192 bytes of the four expert weights at most); a lone tensor as itself
        assert engine.last_sync_stats.buckets == 4
        assert engine.last_sync_stats.peak_bytes == {"tensor": 0, "distributed": 4 * 48}[mode]
