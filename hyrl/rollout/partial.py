"""--inflight-weight-updates: generation in segments that a weight sync may land between, and the
per-token policy versions it leaves behind.

`generate_in_segments` asks for at most `segment_tokens` new tokens per engine call and feeds
each unfinished response back as prompt + tokens so far, so the caller (the rollout manager) can
release the engine lock between calls; a weight sync that arrives then lands between two
segments and the next segment continues the same responses with the new weights. Each token
keeps the engine's log-prob and the policy version of the call that sampled it. Sampling is
the one-piece generation's: each token is drawn from softmax(logits / T) under top-p given the
tokens before it, a response that samples the end-of-sequence token leaves the batch
("stop"), and the segments of the others add up to max_new_tokens ("length").

The engine is any RolloutEngine (the in-process hf engine, a Ray fleet of them): no engine
state survives between segments, so nothing but the prompt and the tokens so far is assumed.
Routing ids are not kept (validation refuses --inflight-weight-updates with routing replay).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hyrl.rollout.base import Generation, SamplingParams

# (prompts, sampling) -> (one Generation per prompt, the policy version that generated them)
SegmentFn = Callable[[list[list[int]], SamplingParams], tuple[list[Generation], int]]


def generate_in_segments(
    generate_segment: SegmentFn,
    prompts: list[list[int]],
    params: SamplingParams,
    segment_tokens: int,
) -> list[Generation]:
    """One Generation per prompt, in order, decoded `segment_tokens` at a time; each carries
    `response_versions`, the version of the segment that sampled each token."""
    if segment_tokens < 1:
        raise ValueError(f"segment_tokens must be >= 1, got {segment_tokens}")
    responses: list[list[int]] = [[] for _ in prompts]
    log_probs: list[list[float]] = [[] for _ in prompts]
    versions: list[list[int]] = [[] for _ in prompts]
    finish = ["length"] * len(prompts)
    active = list(range(len(prompts)))
    decoded = 0  # tokens so far of every active response: a segment stops none short but at eos
    while active and decoded < params.max_new_tokens:
        asked = min(segment_tokens, params.max_new_tokens - decoded)
        segment, version = generate_segment(
            [prompts[i] + responses[i] for i in active], replace(params, max_new_tokens=asked)
        )
        if len(segment) != len(active):
            raise RuntimeError(
                f"partial rollout: the engine returned {len(segment)} generations for "
                f"{len(active)} prompts"
            )
        still_active = []
        for i, piece in zip(active, segment):
            if piece.finish_reason == "length" and len(piece.response_ids) != asked:
                raise RuntimeError(
                    f"partial rollout: the engine stopped a response at "
                    f"{len(piece.response_ids)} of {asked} tokens without an end-of-sequence "
                    "token, so the next segment cannot continue it"
                )
            responses[i] += piece.response_ids
            log_probs[i] += piece.response_log_probs
            versions[i] += [version] * len(piece.response_ids)
            if piece.finish_reason == "stop":
                finish[i] = "stop"
            else:
                still_active.append(i)
        active, decoded = still_active, decoded + asked
    return [
        Generation(
            prompt_ids=list(prompt),
            response_ids=responses[i],
            response_log_probs=log_probs[i],
            finish_reason=finish[i],
            response_versions=versions[i],
        )
        for i, prompt in enumerate(prompts)
    ]


def version_metrics(response_versions: Sequence[Sequence[int]]) -> dict[str, float]:
    """rollout/partial_frac: the responses whose tokens were sampled by more than one policy
    version; rollout/partial_tokens_frac: the tokens sampled by newer weights than their
    response's oldest token (0.0 for responses of no tokens)."""
    responses = [v for v in response_versions if v]
    tokens = sum(len(v) for v in responses)
    partial = sum(min(v) != max(v) for v in responses)
    newer = sum(sum(x > min(v) for x in v) for v in responses)
    return {
        "rollout/partial_frac": partial / len(response_versions) if response_versions else 0.0,
        "rollout/partial_tokens_frac": newer / tokens if tokens else 0.0,
    }
