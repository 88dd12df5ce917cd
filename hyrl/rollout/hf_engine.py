"""`--rollout-engine hf`: transformers generation on a Qwen3-MoE copy of the actor (CPU path).

The engine owns its own HF model; after every optimizer step the actor's weights arrive through
the HF<->Megatron mapping table: the CPU form of weight sync, no shared tensors. A stream of
buckets in the checkpoint layout (`update_weights_stream`, what the trainer sends) is copied into
the model bucket by bucket, each expert's tensors into their rows of the fused expert weights,
cast to the engine's dtype; a whole fused state dict (`update_weights`) goes in at once.
With `return_routed_experts` (--use-rollout-routing-replay) forward hooks on the transformers
Qwen3-MoE routers record the top-k expert ids of every token that goes through the model.
"""

from __future__ import annotations

import torch

from hyrl.models.qwen3_moe import hf_mapping
from hyrl.models.qwen3_moe.config import Qwen3MoeArch
from hyrl.models.weight_buckets import NamedTensors
from hyrl.rollout.base import GENERATION_PROGRESS, BucketReceiver, Generation, SamplingParams


class HFRolloutEngine(BucketReceiver):
    def __init__(
        self,
        arch: Qwen3MoeArch,
        concurrency: int,
        pad_id: int,
        eos_id: int,
        device: str | torch.device = "cpu",
        return_routed_experts: bool = False,
    ):
        from transformers import Qwen3MoeForCausalLM

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.pad_id, self.eos_id = pad_id, eos_id
        self.device = torch.device(device)
        # transformers wraps PreTrainedModel.to with functools.wraps, whose typed signature
        # mypy reads as taking the model where the device goes
        model = Qwen3MoeForCausalLM(arch.to_hf_config())
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        self.peak_in_flight = 0  # most sequences decoded at once since construction
        # --use-rollout-routing-replay: each MoE router's top-k ids, one [rows, k] tensor per
        # forward call (prefill, then one per decoded token), recorded by forward hooks.
        self.return_routed_experts = return_routed_experts
        self._routed: list[list[torch.Tensor]] | None = None
        if return_routed_experts:
            routers = [layer.mlp.gate for layer in self.model.model.layers]
            for index, router in enumerate(routers):
                router.register_forward_hook(self._record_router(index))
            self.num_moe_layers = len(routers)

    def _record_router(self, layer: int):
        def hook(module, inputs, outputs):
            if self._routed is not None:
                # kept on the model's device: one copy to the host after generate, not one
                # device sync per layer and decoded token
                self._routed[layer].append(outputs[2].detach())

        return hook

    @torch.no_grad()
    def update_weights(self, hf_state_dict: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(hf_state_dict, strict=True)

    # -- the weight stream (BucketReceiver) --------------------------------------------------
    def begin_weight_update(self) -> None:
        self._targets = self.model.state_dict()  # shares storage with the parameters
        self._pending = {name for name, _ in hf_mapping.split_fused_experts(self._targets)}

    @torch.no_grad()
    def load_weight_bucket(self, bucket: NamedTensors) -> None:
        for name, tensor in bucket:
            target = self._target(name)
            if tuple(tensor.shape) != tuple(target.shape):
                raise ValueError(
                    f"weight update: {name} has shape {tuple(tensor.shape)}, the "
                    f"engine's is {tuple(target.shape)}"
                )
            target.copy_(tensor)
            self._pending.discard(name)

    def end_weight_update(self, succeeded: bool = True) -> None:
        pending, self._targets, self._pending = self._pending, None, set()
        if succeeded and pending:
            raise KeyError(
                f"weight update: {len(pending)} weights never arrived, e.g. "
                f"{sorted(pending)[:3]}; the engine now holds a mix of old and new"
            )

    def _target(self, name: str) -> torch.Tensor:
        """The engine tensor (or fused-expert rows) a checkpoint-layout name loads into."""
        slot = hf_mapping.fused_expert_slot(name)
        if slot is None:
            if name not in self._targets:
                raise KeyError(
                    f"weight update: {name} is not a weight of the engine's Qwen3MoeForCausalLM"
                )
            return self._targets[name]
        fused_name, expert, part = slot
        if fused_name not in self._targets or expert >= self._targets[fused_name].shape[0]:
            raise KeyError(
                f"weight update: {name} is not a weight of the engine's Qwen3MoeForCausalLM"
            )
        rows = self._targets[fused_name][expert]
        ffn = rows.shape[0] // 2
        return {"gate": rows[:ffn], "up": rows[ffn:], "down": rows}[part]

    # Nothing to give back or stop: the model shares the process (and the GPU) with the trainer.
    def release_memory(self) -> None:
        pass

    def resume_memory(self) -> None:
        pass

    def close(self) -> None:
        pass

    def sync_metrics(self) -> dict[str, float]:
        return {}  # the weights are copied in process: the weight sync measures all of it

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        generations: list[Generation] = []
        for start in range(0, len(prompts), self.concurrency):
            generations += self._generate_chunk(prompts[start : start + self.concurrency], params)
            GENERATION_PROGRESS.add(len(generations) - start)
        return generations

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.peak_in_flight = max(self.peak_in_flight, len(prompts))
        width = max(len(p) for p in prompts)
        # left padding: every prompt ends at column width-1 (one tensor from lists: a per-row
        # copy cost about 1 ms a step at 128 rows)
        input_ids = torch.tensor(
            [[self.pad_id] * (width - len(prompt)) + list(prompt) for prompt in prompts],
            dtype=torch.long,
        )
        attention_mask = torch.tensor(
            [[0] * (width - len(prompt)) + [1] * len(prompt) for prompt in prompts],
            dtype=torch.long,
        )
        greedy = params.temperature == 0
        sampling = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": 0,
            }
        )
        self._routed = (
            [[] for _ in range(self.num_moe_layers)] if self.return_routed_experts else None
        )
        # Inference mode, not only no_grad: no autograd bookkeeping on any tensor (the tiny
        # recipe's generate 11.3 -> 10.3 ms, measured alone). What it returns are inference
        # tensors; every one is read below through ops that make ordinary tensors or lists.
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                **sampling,
                max_new_tokens=params.max_new_tokens,
                pad_token_id=self.pad_id,
                eos_token_id=[self.eos_id, *params.stop_token_ids],
                output_logits=True,
                return_dict_in_generate=True,
            )
        new_tokens = out.sequences[:, width:].cpu()
        # Raw logits per step -> log-probs of the sampling distribution softmax(logits / T)
        # (of softmax(logits) when decoding greedily).
        temperature = 1.0 if greedy else params.temperature
        logits = torch.stack(out.logits, dim=1).float().cpu() / temperature
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens[..., None])[..., 0]
        routed = None
        if self._routed is not None:
            # per layer: the prefill's [rows x width, k] then one [rows, k] per decode step,
            # as [rows, width + steps, k]; stacked over layers -> [rows, columns, layers, k]
            rows = len(prompts)
            routed = torch.stack(
                [
                    torch.cat([calls.view(rows, -1, calls.shape[-1]) for calls in per_layer], dim=1)
                    for per_layer in self._routed
                ],
                dim=2,
            ).to("cpu", torch.int32)
            self._routed = None
        stop_ids = {self.eos_id, *params.stop_token_ids}
        generations = []
        for row, (prompt, tokens, row_log_probs) in enumerate(
            zip(prompts, new_tokens.tolist(), log_probs.tolist(), strict=True)
        ):
            stop = next((at + 1 for at, token in enumerate(tokens) if token in stop_ids), None)
            length = stop if stop is not None else len(tokens)
            generations.append(
                Generation(
                    prompt_ids=list(prompt),
                    response_ids=tokens[:length],
                    response_log_probs=row_log_probs[:length],
                    finish_reason="stop" if stop is not None else "length",
                    # the prompt's columns, then every response token but the last (never fed back)
                    routed_experts=None
                    if routed is None
                    else routed[row, width - len(prompt) : width + length - 1].clone(),
                )
            )
        return generations
