"""--recompute-granularity: Megatron recomputes activations in the backward pass, same gradients."""

import pytest
import torch

from hyrl.models.qwen3_moe.config import TINY


@pytest.fixture(scope="module")
def megatron():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=5)
    yield
    destroy_distributed()


def forward_calls_and_grads(granularity):
    """(forward calls of layer 0's MLP in one forward+backward, gradient of every parameter)."""
    from hyrl.backends.megatron.model import ParallelLayout, build_gpt_model, causal_attention_mask

    torch.manual_seed(0)
    model = build_gpt_model(
        TINY, ParallelLayout(recompute_granularity=granularity), transformer_impl="local"
    )
    calls = []
    model.decoder.layers[0].mlp.register_forward_hook(lambda *args: calls.append(1))
    tokens = torch.randint(0, TINY.vocab_size, (2, 7))
    positions = torch.arange(7).expand(2, 7)
    model.train()
    logits = model(tokens, positions, causal_attention_mask(7, torch.device("cpu")))
    logits.float().pow(2).mean().backward()
    return len(calls), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


def test_full_recomputation_runs_each_layer_twice_and_gives_the_same_gradients(megatron):
    plain_calls, plain_grads = forward_calls_and_grads(None)
    full_calls, full_grads = forward_calls_and_grads("full")
    assert (plain_calls, full_calls) == (1, 2)  # the backward pass re-ran the layer's forward
    assert plain_grads.keys() == full_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(full_grads[name], plain_grads[name], rtol=0, atol=0, msg=name)


def test_selective_recomputation_keeps_the_mlp_and_the_gradients(megatron):
    plain_calls, plain_grads = forward_calls_and_grads(None)
    selective_calls, selective_grads = forward_calls_and_grads("selective")
    assert selective_calls == plain_calls == 1  # only the attention core is recomputed
    for name in plain_grads:
        torch.testing.assert_close(
            selective_grads[name], plain_grads[name], rtol=0, atol=0, msg=name
        )
