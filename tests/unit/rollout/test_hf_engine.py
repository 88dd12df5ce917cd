"""Specification of the `hf` rollout engine (hyrl.rollout.hf_engine) on the tiny Qwen3-MoE.

TINY has a 16-token vocabulary; the engine is told pad_id=0 and eos_id=1. A freshly initialised
tiny model is close to uniform over the vocabulary, so eos (1/16 per step) ends some responses
early and leaves others at max_new_tokens: both finish reasons occur with a few dozen prompts.
"""

from __future__ import annotations

import pytest
import torch

from hyrl.models.qwen3_moe.config import TINY
from hyrl.rollout.base import Generation, SamplingParams
from hyrl.rollout.hf_engine import HFRolloutEngine

PAD_ID, EOS_ID = 0, 1

# Prompts of lengths 1..6, so every chunk of three is left-padded to a different width.
PROMPTS = [
    [2, 3, 13, 4, 14],
    [2, 5],
    [9],
    [2, 7, 13, 8, 14, 11],
    [2, 6, 13],
    [4, 4, 4, 4],
    [2, 15, 12],
    [10],
    [2, 3, 3, 3, 13, 14],
    [2, 9, 13, 9],
]


def make_engine(concurrency: int, seed: int = 0) -> HFRolloutEngine:
    torch.manual_seed(seed)
    return HFRolloutEngine(TINY, concurrency=concurrency, pad_id=PAD_ID, eos_id=EOS_ID)


@pytest.fixture(scope="module")
def engine() -> HFRolloutEngine:
    return make_engine(concurrency=3)


def teacher_forced_log_probs(model, generation: Generation, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[response token] from one unpadded forward pass of this sequence."""
    prompt, response = generation.prompt_ids, generation.response_ids
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    # position t predicts token t+1: the response is predicted from len(prompt)-1 on
    predicting = logits[len(prompt) - 1 : len(prompt) - 1 + len(response)] / temperature
    return torch.log_softmax(predicting, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


# --- concurrency and order ------------------------------------------------------------------


def test_never_decodes_more_than_concurrency_sequences_at_once():
    engine = make_engine(concurrency=3)
    batch_sizes = []
    original_generate = engine.model.generate

    def recording_generate(*args, **kwargs):
        batch_sizes.append(kwargs["input_ids"].shape[0])
        return original_generate(*args, **kwargs)

    engine.model.generate = recording_generate
    torch.manual_seed(1)
    generations = engine.generate(PROMPTS, SamplingParams(max_new_tokens=4))

    assert engine.peak_in_flight == 3
    assert batch_sizes == [3, 3, 3, 1]  # 10 prompts in chunks of at most 3
    assert len(generations) == 10


def test_the_heartbeats_count_grows_by_each_chunk_while_a_call_is_counted():
    from hyrl.rollout.base import GENERATION_PROGRESS

    engine = make_engine(concurrency=4)
    seen = []
    original_generate = engine.model.generate

    def recording_generate(*args, **kwargs):
        seen.append(GENERATION_PROGRESS.snapshot())
        return original_generate(*args, **kwargs)

    engine.model.generate = recording_generate
    with GENERATION_PROGRESS.counting(len(PROMPTS)):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))
        assert GENERATION_PROGRESS.snapshot() == (10, 10)
    assert seen == [(0, 10), (4, 10), (8, 10)]  # read as each chunk starts
    assert GENERATION_PROGRESS.snapshot() is None  # between calls
    engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=2))  # an uncounted call
    assert GENERATION_PROGRESS.snapshot() is None


def test_generations_come_back_in_prompt_order(engine):
    torch.manual_seed(2)
    generations = engine.generate(PROMPTS, SamplingParams(max_new_tokens=4))
    assert [g.prompt_ids for g in generations] == PROMPTS


def test_peak_in_flight_is_the_largest_chunk_when_fewer_prompts_than_concurrency():
    engine = make_engine(concurrency=8)
    assert engine.peak_in_flight == 0  # nothing decoded yet
    torch.manual_seed(3)
    engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=2))
    assert engine.peak_in_flight == 2


def test_concurrency_below_one_is_rejected():
    with pytest.raises(ValueError):
        HFRolloutEngine(TINY, concurrency=0, pad_id=PAD_ID, eos_id=EOS_ID)


# --- log-probs ------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_equal_a_teacher_forced_forward_pass_of_each_unpadded_sequence(
    engine, temperature
):
    torch.manual_seed(4)
    generations = engine.generate(
        PROMPTS, SamplingParams(max_new_tokens=6, temperature=temperature)
    )
    for g in generations:
        assert len(g.response_log_probs) == len(g.response_ids)
        expected = teacher_forced_log_probs(engine.model, g, temperature)
        got = torch.tensor(g.response_log_probs)
        assert torch.allclose(got, expected, atol=1e-5, rtol=0), (g.prompt_ids, got - expected)


def test_temperature_changes_the_reported_log_probs(engine):
    # Same sequence scored under T=1 and T=0.7 differs: the engine divides logits by T.
    torch.manual_seed(5)
    g = engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=3, temperature=0.7))[0]
    at_07 = teacher_forced_log_probs(engine.model, g, 0.7)
    at_1 = teacher_forced_log_probs(engine.model, g, 1.0)
    assert torch.allclose(torch.tensor(g.response_log_probs), at_07, atol=1e-5, rtol=0)
    assert not torch.allclose(at_07, at_1, atol=1e-3)


# --- finish reasons -------------------------------------------------------------------------


def test_stop_iff_response_ends_with_eos_and_length_responses_have_max_new_tokens(engine):
    max_new_tokens = 8
    torch.manual_seed(6)
    generations = engine.generate(PROMPTS * 4, SamplingParams(max_new_tokens=max_new_tokens))
    reasons = {g.finish_reason for g in generations}
    assert reasons == {"stop", "length"}  # 40 near-uniform responses of 8 tokens: both occur
    for g in generations:
        assert 1 <= len(g.response_ids) <= max_new_tokens
        if g.finish_reason == "stop":
            assert g.response_ids[-1] == EOS_ID
            assert EOS_ID not in g.response_ids[:-1]
        else:
            assert g.finish_reason == "length"
            assert EOS_ID not in g.response_ids
            assert len(g.response_ids) == max_new_tokens


def test_a_calls_stop_ids_end_its_responses_there_and_the_next_call_has_none(engine):
    # Greedy decoding of one prompt, then the same with the first response token as this
    # call's stop id: the response is that token alone, kept as the last token ("stop"); a call
    # without stop ids decodes as before (eos only).
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    frees = engine.generate(PROMPTS, greedy)
    # a prompt whose greedy response does not begin with eos (else the stop id proves nothing)
    prompt, free = next((p, g) for p, g in zip(PROMPTS, frees) if g.response_ids[0] != EOS_ID)
    prompt, first = [prompt], free.response_ids[0]
    alone = engine.generate(prompt, greedy)[0]  # the same batch shape as the calls below
    stopped = engine.generate(
        prompt, SamplingParams(max_new_tokens=6, temperature=0, stop_token_ids=(first,))
    )[0]
    assert stopped.response_ids == [first] and stopped.finish_reason == "stop"
    assert stopped.response_log_probs == pytest.approx(alone.response_log_probs[:1], abs=1e-6)
    again = engine.generate(prompt, greedy)[0]
    assert again.response_ids == alone.response_ids and len(alone.response_ids) > 1


# --- update_weights -------------------------------------------------------------------------


def state_dict_where_token_always_wins(model, token_id: int) -> dict[str, torch.Tensor]:
    """Every layer adds nothing to the residual, every embedding is all ones, and only
    lm_head's row `token_id` is nonzero: the final hidden state is RMSNorm(ones) = ones(64), so
    logit[token_id] = 64 and every other logit is 0 (p(other) ~ e^-64), whatever the context."""
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    for name in state:
        if name.endswith(("o_proj.weight", "experts.down_proj")):
            state[name].zero_()
    state["model.embed_tokens.weight"].fill_(1.0)
    state["model.norm.weight"].fill_(1.0)
    state["lm_head.weight"].zero_()
    state["lm_head.weight"][token_id] = 1.0
    return state


def test_update_weights_changes_what_is_sampled():
    engine = make_engine(concurrency=3)
    engine.update_weights(state_dict_where_token_always_wins(engine.model, token_id=5))
    assert torch.equal(engine.model.lm_head.weight[5], torch.ones(64))

    torch.manual_seed(7)
    generations = engine.generate(PROMPTS[:5], SamplingParams(max_new_tokens=4))
    for g in generations:
        assert g.response_ids == [5, 5, 5, 5]
        assert g.finish_reason == "length"
        # p(5) = 1 / (1 + 15 e^-64): log-prob 0 to float precision
        assert g.response_log_probs == pytest.approx([0.0] * 4, abs=1e-6)


def test_update_weights_with_an_unknown_key_raises():
    engine = make_engine(concurrency=3)
    state = dict(engine.model.state_dict())
    state["model.lm_head.weight"] = state.pop("lm_head.weight")  # misnamed key
    with pytest.raises(RuntimeError):
        engine.update_weights(state)


def test_update_weights_with_a_missing_key_raises():
    engine = make_engine(concurrency=3)
    state = dict(engine.model.state_dict())
    del state["model.norm.weight"]
    with pytest.raises(RuntimeError):
        engine.update_weights(state)


def test_temperature_zero_decodes_greedily_and_repeatably():
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.hf_engine import HFRolloutEngine

    torch.manual_seed(0)
    engine = HFRolloutEngine(TINY, concurrency=4, pad_id=0, eos_id=1)
    prompts = [[2, 3, 13, 4, 14], [2, 9, 13, 9, 14]]
    first = engine.generate(prompts, SamplingParams(max_new_tokens=3, temperature=0.0))
    second = engine.generate(prompts, SamplingParams(max_new_tokens=3, temperature=0.0))
    assert [g.response_ids for g in first] == [g.response_ids for g in second]
    with torch.no_grad():  # the first token is the argmax of the next-token logits
        logits = engine.model(torch.tensor(prompts)).logits[:, -1]
    assert [g.response_ids[0] for g in first] == logits.argmax(-1).tolist()


def test_the_model_runs_in_inference_mode_and_what_comes_back_is_ordinary():
    """generate runs the model under torch.inference_mode (no autograd bookkeeping); the
    routing it records leaves as ordinary tensors, which training may modify and save."""
    engine = HFRolloutEngine(TINY, 4, pad_id=PAD_ID, eos_id=EOS_ID, return_routed_experts=True)
    modes = []
    forward = engine.model.forward
    engine.model.forward = lambda *a, **k: (
        modes.append(torch.is_inference_mode_enabled()) or (forward(*a, **k))
    )
    generations = engine.generate(PROMPTS[:4], SamplingParams(max_new_tokens=3))
    assert modes and all(modes)
    for generation in generations:
        routed = generation.routed_experts
        assert routed is not None and not routed.is_inference()
        routed.add_(0)  # an inference tensor refuses in-place ops outside inference mode
