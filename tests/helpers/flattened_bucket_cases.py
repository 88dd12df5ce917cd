"""Flattened buckets that ``/update_weights_from_distributed`` must refuse before it waits for any
broadcast, run against the fake SGLang server (``tests/unit/rollout/test_sglang_protocol.py``)
and against SGLang 0.5.23's own scheduler code
(``tests/contract/test_distributed_flattened_bucket.py``), so the fake cannot accept a bucket
SGLang refuses.

SGLang's receiver (``model_runner_components/weight_updater.py``,
``_receive_bucketed_weights_from_distributed``) allocates ``FlattenedTensorBucket.empty(names,
dtypes, shapes)`` (``weight_sync/tensor_bucket.py``): the tensors back to back without padding,
refusing a tensor whose byte offset is not a multiple of its element size and an empty bucket;
the scheduler answers "Failed to receive weights: <why>".
"""

from __future__ import annotations

from collections.abc import Callable

GROUP_NAME = "hyrl_weight_update"  # the group both tiers join before posting these

# case -> (names, dtypes, shapes, words of the refusal). Written out, not computed.
REFUSED: dict[str, tuple[list[str], list[str], list[list[int]], str]] = {
    # 3 bf16 values are 6 bytes: the fp32 tensor after them would start at byte 6
    "fp32 after an odd number of bf16 values": (
        ["model.norm.weight", "lm_head.weight"],
        ["bfloat16", "float32"],
        [[3], [2, 2]],
        "Unaligned received tensor lm_head.weight: byte offset 6, dtype torch.float32",
    ),
    "no tensors": ([], [], [], "Cannot create empty tensor bucket"),
}


def refusals(post: Callable[[str, dict], tuple[int, str]]) -> dict[str, tuple[int, str]]:
    """Post each case inside its own session (``post(route, body) -> (status, body)``); per
    case the HTTP status and body of the update."""
    answers = {}
    for case, (names, dtypes, shapes, _) in REFUSED.items():
        post("/begin_weight_update", {})
        answers[case] = post(
            "/update_weights_from_distributed",
            {
                "names": names,
                "dtypes": dtypes,
                "shapes": shapes,
                "group_name": GROUP_NAME,
                "flush_cache": False,
                "load_format": "flattened_bucket",
            },
        )
        post("/end_weight_update", {})
    return answers


def check(answers: dict[str, tuple[int, str]]) -> None:
    """Every case refused (HTTP 400) with SGLang's words."""
    for case, (status, body) in answers.items():
        words = REFUSED[case][3]
        assert status == 400 and f"Failed to receive weights: {words}" in body, (case, body)
