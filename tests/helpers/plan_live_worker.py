"""Run by torchrun from tests/unit/plan/test_plan_live.py: build a model the trainer's way, run one
optimizer step, and count this rank's bytes of weights, gradients and optimizer states from the
live tensors (each storage once).

Usage: torchrun --nproc-per-node N tests/helpers/plan_live_worker.py OUT_DIR FLAGS_JSON

FLAGS_JSON holds RunConfig fields; the model, layout and optimizer come from them through the
trainer's own constructors (Qwen3MoeArch.of, ParallelLayout.of, OptimizerSettings.for_actor) and
build_gpt_model (under --pipeline-model-parallel-size 2 this rank's stage); the step runs the
two stages by hand (send/recv), so Adam states exist.
"""

import json
import sys
from pathlib import Path

import torch

from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings, wrap_for_training
from hyrl.backends.megatron.model import (
    ParallelLayout,
    build_gpt_model,
    causal_attention_mask,
    destroy_distributed,
    init_distributed,
)
from hyrl.config import RunConfig, resolve
from hyrl.models.qwen3_moe.config import Qwen3MoeArch

BATCH, SEQ_LEN = 2, 16


def one_step(model, ddp, optimizer, vocab_size: int) -> None:
    """Forward, backward and one optimizer step on a fixed batch (so Adam states exist)."""
    from megatron.core import parallel_state

    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab_size, (BATCH, SEQ_LEN), generator=generator)
    positions = torch.arange(SEQ_LEN).expand_as(tokens)
    mask = causal_attention_mask(SEQ_LEN, tokens.device)
    ddp.zero_grad_buffer()
    optimizer.zero_grad(set_to_none=True)
    first = parallel_state.is_pipeline_first_stage()
    last = parallel_state.is_pipeline_last_stage()
    pp_group = parallel_state.get_pipeline_model_parallel_group()
    ranks = torch.distributed.get_process_group_ranks(pp_group)
    stage = parallel_state.get_pipeline_model_parallel_rank()
    received = None
    if not first:  # the previous stage's [s, b, h] output (fp32 on the wire: gloo and bf16)
        buffer = torch.empty(SEQ_LEN, BATCH, model.config.hidden_size)
        torch.distributed.recv(buffer, src=ranks[stage - 1])
        received = buffer.to(model.config.params_dtype).requires_grad_()
        model.set_input_tensor(received)
    output = ddp(tokens, positions, mask)
    if last:
        output.float().logsumexp(-1).mean().backward()
    else:
        torch.distributed.send(output.detach().float().contiguous(), dst=ranks[stage + 1])
        grad = torch.empty(output.shape)
        torch.distributed.recv(grad, src=ranks[stage + 1])
        output.backward(grad.to(output.dtype))
    if received is not None:
        torch.distributed.send(received.grad.float().contiguous(), dst=ranks[stage - 1])
    ddp.finish_grad_sync()
    update_successful, _, _ = optimizer.step()
    assert update_successful


def _storages(tensors) -> dict[int, int]:
    """{storage address: bytes} of every tensor's whole storage (views count their base once)."""
    out = {}
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            storage = tensor.untyped_storage()
            out[storage.data_ptr()] = storage.nbytes()
    return out


def live_bytes(model, ddp, optimizer) -> dict:
    """This rank's bytes: weights (the parameters' storages, DDP's param buffer under the
    distributed optimizer), gradients (DDP's grad buffers and any other .grad/.main_grad) and
    optimizer (Adam states and main params of every sub-optimizer, less what is already a weight
    or a gradient: fp32 main params that are views of the weights are weights)."""
    params = list(model.parameters())
    weights = _storages(params)
    buffers = [b for b in list(ddp.buffers) + list(ddp.expert_parallel_buffers)]
    grads = _storages(
        [b.grad_data for b in buffers] + [p.main_grad for p in params] + [p.grad for p in params]
    )
    grads = {k: v for k, v in grads.items() if k not in weights}
    state_tensors = []
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
        for group in sub.optimizer.param_groups:
            for main_param in group["params"]:
                state_tensors += [main_param, main_param.grad]
                state_tensors += list(sub.optimizer.state.get(main_param, {}).values())
    states = {
        k: v for k, v in _storages(state_tensors).items() if k not in weights and k not in grads
    }
    return {
        "weights": sum(weights.values()),
        "gradients": sum(grads.values()),
        "optimizer": sum(states.values()),
        "params": sum(p.numel() for p in params),
        "adam_state_tensors": sum(
            len(sub.optimizer.state)
            for sub in getattr(optimizer, "chained_optimizers", [optimizer])
        ),
    }


def main(out_dir: str, flags_json: str) -> None:
    c = resolve(RunConfig(**json.loads(flags_json)))
    arch, layout = Qwen3MoeArch.of(c.model), ParallelLayout.of(c.parallel, c.model)
    optim = OptimizerSettings.for_actor(c.optimizer, c.batch, c.parallel)
    init_distributed(layout, seed=3)
    torch.manual_seed(0)
    model = build_gpt_model(
        arch,
        layout,
        transformer_impl="local",  # this rank's stage
        params_dtype=optim.params_dtype,
    )
    (ddp,), optimizer = wrap_for_training([model], optim)
    one_step(model, ddp, optimizer, arch.vocab_size)
    rank = torch.distributed.get_rank()
    result = {"rank": rank, **live_bytes(model, ddp, optimizer)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    destroy_distributed()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
