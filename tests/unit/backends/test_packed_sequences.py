"""--qkv-format thd: a micro-batch's rows packed into one sequence give what padded rows give."""

import dataclasses

import pytest
import torch

from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.model import causal_attention_mask
from hyrl.backends.megatron.packing import PackedRows, block_causal_mask
from hyrl.models.qwen3_moe.config import TINY


def test_a_layout_packs_rows_end_to_end_and_pads_to_the_multiple():
    layout = PackedRows.of([3, 1, 2], width=4, multiple=4)  # 6 tokens -> 8
    assert layout.total == 8 and layout.segments == [3, 1, 2, 2]
    assert layout.cu_seqlens(torch.device("cpu")).tolist() == [0, 3, 4, 6, 8]
    assert layout.positions(torch.device("cpu")).tolist() == [[0, 1, 2, 0, 0, 1, 0, 1]]
    padded = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0], [5, 6, 0, 0]])
    assert layout.pack(padded, fill=-1).tolist() == [[1, 2, 3, 4, 5, 6, -1, -1]]
    restored = layout.unpack(layout.pack(padded, fill=9))
    assert restored.tolist() == padded.tolist()  # zero past each row's length


def test_a_layout_takes_an_agreed_total_and_refuses_one_too_small():
    assert PackedRows.of([3, 2], width=3, total=7).segments == [3, 2, 2]
    assert PackedRows.of([0, 5], width=3).lengths == (1, 3)  # at least 1, at most the width
    with pytest.raises(ValueError, match="at least 6"):
        PackedRows.of([3, 3], width=3, total=5)
    with pytest.raises(ValueError, match="multiple of 4"):
        PackedRows.of([3, 3], width=3, multiple=4, total=10)


def test_unpack_passes_gradients_to_the_packed_tokens_only():
    layout = PackedRows.of([2, 1], width=3, total=4)
    packed = torch.arange(4.0).reshape(1, 4).requires_grad_()
    layout.unpack(packed).sum().backward()
    assert packed.grad.tolist() == [[1.0, 1.0, 1.0, 0.0]]  # the padding token gets nothing


def test_the_block_causal_mask_keeps_each_segment_to_itself():
    mask = block_causal_mask(torch.tensor([0, 2, 3], dtype=torch.int32), 3)[0, 0]
    may_attend = (~mask).int().tolist()
    assert may_attend == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]


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


def _skewed_batch(seed: int = 4):
    generator = torch.Generator().manual_seed(seed)
    lengths = [(2, 1), (9, 6), (3, 2), (2, 1), (4, 5), (2, 2), (7, 1), (2, 1)]  # prompt, response
    prompts = [torch.randint(3, 15, (p,), generator=generator).tolist() for p, _ in lengths]
    responses = [torch.randint(3, 15, (r,), generator=generator).tolist() for _, r in lengths]
    return pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0)


@pytest.mark.parametrize("dynamic", [False, True], ids=["micro-batch-size", "dynamic"])
def test_packed_micro_batches_give_the_padded_log_probs_loss_and_gradient(actor, dynamic):
    batch = _skewed_batch()
    padded = dataclasses.replace(actor.optim, max_tokens_per_micro_batch=20 if dynamic else None)
    packed = dataclasses.replace(padded, packed_sequences=True)
    original = actor.optim
    try:
        actor.optim = padded
        padded_log_probs, padded_entropy = actor.log_probs(batch)
        batch.old_log_probs = padded_log_probs
        padded_metrics = actor.train_step(batch, batch.num_response_tokens, lr=0.0)
        actor.optim = packed
        layouts = [mb.packing for mb, _ in actor._micro_batches(batch)]
        packed_log_probs, packed_entropy = actor.log_probs(batch)
        packed_metrics = actor.train_step(batch, batch.num_response_tokens, lr=0.0)
    finally:
        actor.optim = original
    # sequence lengths 3, 15, 5, 3, 9, 4, 8, 3: packed, a micro-batch is their sum, not
    # rows x the longest (micro-batches of 3 rows: 23, 16, 11 tokens against 45, 27, 16)
    if not dynamic:
        assert [layout.total for layout in layouts] == [23, 16, 11]
    assert all(layout is not None for layout in layouts)
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(packed_log_probs[mask], padded_log_probs[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(packed_entropy[mask], padded_entropy[mask], rtol=0, atol=1e-5)
    for key in ("actor/loss", "actor/grad_norm", "actor/pg_loss"):
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-8), key


def test_packing_is_not_a_no_op_the_model_sees_one_sequence(actor):
    """Guard for the test above: the packed forward really runs [1, T] tokens with segments
    (a forward over the same tokens without the segments attends across rows and differs)."""
    batch = _skewed_batch().select(slice(0, 3))
    layout = PackedRows.of(batch.sequence_lengths(), batch.tokens.shape[1])
    seen = {}

    def record_shape(module, inputs, output):
        seen.setdefault("shape", tuple(output.shape))  # returns None: the output stays

    hook = actor.model.embedding.register_forward_hook(record_shape)
    try:
        with torch.no_grad():
            logits = actor._outputs(actor.model, dataclasses.replace(batch, packing=layout))
            tokens = layout.pack(batch.tokens)
            causal = causal_attention_mask(tokens.shape[1], torch.device("cpu"))
            unsegmented = actor.model(tokens, torch.arange(tokens.shape[1])[None], causal)
    finally:
        hook.remove()
    assert seen["shape"][:2] == (layout.total, 1)  # [s, b, h]: one packed sequence
    later_rows = slice(batch.sequence_lengths()[0], layout.real_tokens)
    assert (logits[0, later_rows] - unsegmented[0, later_rows]).abs().max() > 1e-3
