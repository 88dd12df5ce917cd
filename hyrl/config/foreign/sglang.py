"""What hyrl needs to know of SGLang's own server flags to pass `--sglang-NAME VALUE...` through
to `sglang.launch_server` as `--NAME VALUE...` without SGLang installed: which flags take
several values, and which older names SGLang has since renamed.

Read at SGLang 0.5.23 (requirements.txt's pin) from `ServerArgs.add_cli_args`; the contract tier
(tests/contract/test_sglang_flag_arity.py) checks both tables against that parser itself.
"""

from __future__ import annotations

SGLANG_VERSION = "0.5.23"

# Every flag of SGLang 0.5.23's launch_server whose argparse action takes a list of values
# (nargs '+' or '*'). A pass-through flag not listed here takes at most one value.
MULTI_VALUE_FLAGS: frozenset[str] = frozenset(
    {
        "--allowed-media-domains",
        "--bucket-e2e-request-latency",
        "--bucket-inter-token-latency",
        "--bucket-time-to-first-token",
        "--cuda-graph-bs-decode",
        "--cuda-graph-bs-prefill",
        "--custom-weight-loader",
        "--debug-tensor-dump-layers",
        "--encoder-register-urls",
        "--encoder-urls",
        "--flashinfer-autotune-skip-ops",
        "--gc-threshold",
        "--generation-tokens-buckets",
        "--log-requests-target",
        "--lora-paths",
        "--lora-target-modules",
        "--numa-node",
        "--prefill-delayer-forward-passes-buckets",
        "--prefill-delayer-wait-seconds-buckets",
        "--prompt-tokens-buckets",
        "--return-aux-hidden-state-layer-ids",
        "--tokenizer-metrics-allowed-custom-labels",
        "--uvicorn-access-log-exclude-prefixes",
    }
)

# Older SGLang names that slime's scripts still use -> SGLang 0.5.23's name for the same
# setting. 0.5.23 refuses the old name (--cuda-graph-bs is an ambiguous prefix of
# --cuda-graph-bs-decode and --cuda-graph-bs-prefill there): hyrl passes the new one, with a note.
RENAMED_FLAGS: dict[str, tuple[str, str]] = {
    "--cuda-graph-bs": (
        "--cuda-graph-bs-decode",
        "the batch sizes captured as CUDA graphs, which older SGLang captured for decoding only",
    ),
}
