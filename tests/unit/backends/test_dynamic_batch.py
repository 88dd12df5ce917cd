"""--use-dynamic-batch-size --max-tokens-per-gpu: micro-batches packed by tokens, same loss."""

import dataclasses

import pytest
import torch
from testpaths import HELPERS
from torchrun_worker import run_ranks

from hyrl.algorithms.batch import pack, token_budget_ranges
from hyrl.models.qwen3_moe.config import TINY


def test_ranges_are_contiguous_and_each_padded_run_fits_the_budget():
    # costs: rows x longest; [4, 4] = 8 fits 8, adding 6 would be 3 x 6 = 18
    assert token_budget_ranges([4, 4, 6, 2, 2, 2], max_tokens=8) == [(0, 2), (2, 3), (3, 6)]
    # rounded up to a multiple of 4: [3, 3] costs 2 x 4 = 8, a third row 12
    assert token_budget_ranges([3, 3, 3], max_tokens=8, pad_to_multiple_of=4) == [(0, 2), (2, 3)]
    assert token_budget_ranges([], max_tokens=8) == []
    with pytest.raises(ValueError, match="9 tokens.*max-tokens-per-gpu=8"):
        token_budget_ranges([2, 9], max_tokens=8)


def test_packed_ranges_cost_their_summed_lengths_not_rows_times_the_longest():
    # packed (--qkv-format thd): [4, 4] = 8 fits 8; [6, 2] = 8 fits where padded it is 12
    assert token_budget_ranges([4, 4, 6, 2, 2, 2], max_tokens=8, packed=True) == [
        (0, 2),
        (2, 4),
        (4, 6),
    ]
    # summed then rounded up to a multiple of 4: 3 + 3 = 6 -> 8 fits, + 3 = 9 -> 12 does not
    assert token_budget_ranges([3, 3, 3], 8, pad_to_multiple_of=4, packed=True) == [(0, 2), (2, 3)]


def test_sequence_lengths_count_prompt_and_response_and_trim_keeps_them():
    batch = pack([[5, 6, 7], [5]], [[8, 9], [8]], torch.zeros(2), pad_id=0)
    assert batch.tokens.shape[1] == 6 and batch.sequence_lengths() == [5, 2]
    trimmed = batch.trim(5)
    assert trimmed.tokens.shape == (2, 5) and trimmed.loss_mask.sum() == batch.loss_mask.sum()


@pytest.fixture(scope="module")
def actor():
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=3)
    torch.manual_seed(0)
    settings = ActorSettings(
        optim=OptimizerSettings(micro_batch_size=3, clip_grad=0.0, noise_scale_beta=None)
    )
    yield MegatronActor(TINY, ParallelLayout(), settings)
    destroy_distributed()


def test_token_packed_micro_batches_give_the_same_log_probs_loss_and_gradient(actor):
    generator = torch.Generator().manual_seed(4)
    lengths = [(2, 1), (9, 6), (3, 2), (2, 1), (4, 5), (2, 2), (7, 1), (2, 1)]  # prompt, response
    prompts = [torch.randint(3, 15, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(3, 15, (r,), generator=generator).tolist() for _, r in lengths]
    batch = pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0)
    fixed = actor.optim
    dynamic = dataclasses.replace(fixed, max_tokens_per_micro_batch=20)
    try:
        fixed_log_probs, _ = actor.log_probs(batch)
        batch.old_log_probs = fixed_log_probs
        fixed_metrics = actor.train_step(batch, batch.num_response_tokens, lr=0.0)  # lr 0: no move
        actor.optim = dynamic
        shapes = [tuple(mb.tokens.shape) for mb, _ in actor._micro_batches(batch)]
        dynamic_log_probs, _ = actor.log_probs(batch)
        dynamic_metrics = actor.train_step(batch, batch.num_response_tokens, lr=0.0)
    finally:
        actor.optim = fixed
    # lengths 3, 15, 5, 3, 9, 4, 8, 3; runs of <= 20 padded tokens, each trimmed to its longest:
    # [3] (+15: 30), [15] (+5: 30), [5, 3] (+9: 27), [9, 4] (+8: 27), [8, 3]
    assert shapes == [(1, 3), (1, 15), (2, 5), (2, 9), (2, 8)]
    mask = batch.loss_mask.bool()  # positions past a row's end are padding in either mode
    torch.testing.assert_close(dynamic_log_probs[mask], fixed_log_probs[mask], rtol=0, atol=1e-6)
    for key in ("actor/loss", "actor/grad_norm", "actor/pg_loss"):
        assert dynamic_metrics[key] == pytest.approx(fixed_metrics[key], rel=1e-5, abs=1e-8), key


def test_split_to_count_halves_the_widest_range_until_there_are_enough():
    from hyrl.algorithms.batch import split_to_count

    assert split_to_count([(0, 4), (4, 5)], 3) == [(0, 2), (2, 4), (4, 5)]
    assert split_to_count([(0, 4)], 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert split_to_count([(0, 1), (1, 2)], 4) == [(0, 1), (1, 2)]  # single rows stay whole
    assert split_to_count([(0, 3)], 1) == [(0, 3)]


@pytest.mark.slow
@pytest.mark.parametrize("qkv_format", ["bshd", "thd"])
def test_dp_ranks_with_different_micro_batch_counts_under_ep_agree_and_match_one_rank(
    tmp_path, qkv_format
):
    """EP=2 x DP=2: rank 0's short rows pack into one micro-batch, rank 1's long rows need
    four; both run four (the expert dispatch is a collective of every forward pass), and the
    log-probs, loss and gradient norm equal one rank's. Packed (thd), the allgather dispatcher
    also needs equal token counts: rank 0's micro-batches grow to rank 1's packed totals."""
    import json

    worker = HELPERS / "skew_worker.py"
    results = {}
    for nproc in (1, 2):
        out = tmp_path / f"skew{nproc}.json"
        run_ranks(worker, nproc, out, qkv_format, timeout=240)
        results[nproc] = json.loads(out.read_text())
    assert results[2]["micro_batches"] == [4]  # rank 0's one range split to the agreed four
    if qkv_format == "thd":  # rank 1's long rows (17, 17, 17, 17 tokens) set every total
        assert results[2]["packed_totals"] == [17, 17, 17, 17]
        assert all(need < 17 for need in results[2]["own_needs"])
    one, two = results[1], results[2]
    assert torch.allclose(torch.tensor(two["log_probs"]), torch.tensor(one["log_probs"]), atol=1e-5)
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
