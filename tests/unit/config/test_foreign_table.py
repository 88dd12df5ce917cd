"""hyrl.config.foreign, the table of slime and Megatron-LM flags hyrl does not declare: every
entry names a flag hyrl does not have, says what to do in one sentence that starts with "use "
or "not supported: ", and every hyrl flag such a sentence names exists."""

import dataclasses
import re

import hyrl.config.names
from hyrl.config import RunConfig, build_parser, flag_name
from hyrl.config.foreign import FOREIGN_FLAGS, MEGATRON, SAME_MEANING, SLIME

# hyrl's renamed flags, old flag -> new flag: the old names stay accepted (aliases), and the
# table names the new ones only.
RENAMED = {flag_name(old): flag_name(new) for old, (new, _) in hyrl.config.names.RENAMED.items()}

# Every flag `train.py` is given in slime's scripts/models/qwen3-30B-A3B.sh and
# scripts/run-qwen3-30B-A3B.sh (THUDM/slime 624b824a), the commented-out ones included.
SLIME_QWEN3_30B_A3B_FLAGS = """
--accumulate-allreduce-grads-in-fp32 --actor-num-gpus-per-node --actor-num-nodes --adam-beta1
--adam-beta2 --advantage-estimator --apply-chat-template --attention-backend --attention-dropout
--attention-softmax-in-fp32 --balance-data --colocate --context-parallel-size
--disable-bias-linear --entropy-coef --eps-clip --eps-clip-high --eval-interval
--eval-max-response-len --eval-prompt-data --eval-top-p --expert-model-parallel-size
--expert-tensor-parallel-size --ffn-hidden-size --global-batch-size --group-query-attention
--hf-checkpoint --hidden-dropout --hidden-size --input-key --kl-loss-coef --kl-loss-type
--kv-channels --label-key --load --lr --lr-decay-style --max-tokens-per-gpu --micro-batch-size
--moe-aux-loss-coeff --moe-ffn-hidden-size --moe-grouped-gemm --moe-layer-freq
--moe-permute-fusion --moe-router-dtype --moe-router-score-function --moe-router-topk
--moe-token-dispatcher-type --moe-token-drop-policy --n-samples-per-eval-prompt
--n-samples-per-prompt --norm-epsilon --normalization --num-attention-heads --num-experts
--num-layers --num-query-groups --num-rollout --optimizer --optimizer-cpu-offload
--overlap-cpu-optimizer-d2h-h2d --pipeline-model-parallel-size --position-embedding-type
--prompt-data --qk-layernorm --recompute-granularity --recompute-method --recompute-num-layers
--ref-load --rm-type --rollout-batch-size --rollout-max-response-len
--rollout-num-gpus-per-engine --rollout-shuffle --rollout-temperature --rotary-base
--rotary-percent --save --save-interval --sequence-parallel --sglang-cuda-graph-bs
--sglang-mem-fraction-static --swiglu --tensor-model-parallel-size
--untie-embeddings-and-output-weights --use-dynamic-batch-size --use-kl-loss
--use-precision-aware-optimizer --use-wandb --vocab-size --wandb-group --wandb-key
--wandb-project --weight-decay
""".split()

FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


def _declared() -> set[str]:
    """Every option string of `hyrl train` (old names included)."""
    parser = build_parser()
    return {s for a in parser._actions for s in a.option_strings}


DECLARED = _declared()


def test_no_entry_is_a_flag_hyrl_declares():
    own = {flag_name(f.name) for f in dataclasses.fields(RunConfig)}
    for flag in [*FOREIGN_FLAGS, *SAME_MEANING]:
        assert flag not in own, f"{flag} is a hyrl flag: it does not belong in the table"
        assert flag not in RENAMED, f"{flag} is an old hyrl name, still accepted as an alias"
    for flag in FOREIGN_FLAGS:  # refused: the parser does not take it
        assert flag not in DECLARED, f"{flag} is declared by the parser"


def test_a_same_meaning_flag_is_accepted_as_its_field():
    parser = build_parser()
    for flag, field in SAME_MEANING.items():
        actions = [a for a in parser._actions if flag in a.option_strings]
        assert [a.dest for a in actions] == [field], flag


def test_a_flag_is_either_the_same_or_foreign_never_both():
    assert not set(FOREIGN_FLAGS) & set(SAME_MEANING)


def test_same_meaning_names_runconfig_fields():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    for flag, field in SAME_MEANING.items():
        assert field in fields, f"{flag} -> {field}: not a RunConfig field"


def test_each_entry_says_what_to_do_in_one_sentence():
    wrong = []
    for flag, (source, what) in FOREIGN_FLAGS.items():
        if not (flag.startswith("--") and flag == flag.lower()):
            wrong.append(f"{flag}: not a lower-case --flag")
        if source not in (MEGATRON, SLIME):
            wrong.append(f"{flag}: source {source!r}")
        if not (what.startswith("use --") or what.startswith("not supported: ")):
            wrong.append(f"{flag}: starts neither 'use --' nor 'not supported: ': {what}")
        if ". " in what or what.endswith("."):
            wrong.append(f"{flag}: more than one sentence, or a full stop: {what}")
    assert wrong == []


def test_every_flag_a_message_names_is_a_hyrl_flag():
    wrong = []
    for flag, (_, what) in FOREIGN_FLAGS.items():
        for named in FLAG.findall(what):
            if named.startswith("--sglang-"):  # hyrl passes an undeclared --sglang-NAME on
                continue
            if named in RENAMED:
                wrong.append(f"{flag}: names the old {named}; write {RENAMED[named]}")
            elif named not in DECLARED:
                wrong.append(f"{flag}: names {named}, which hyrl train does not declare")
    assert wrong == []


def test_entries_are_sorted_by_source_then_flag():
    order = {MEGATRON: 0, SLIME: 1}
    keys = [(order[source], flag) for flag, (source, _) in FOREIGN_FLAGS.items()]
    assert keys == sorted(keys)


def test_every_flag_of_slimes_qwen3_30b_a3b_scripts_is_answered():
    """Declared by hyrl (also under a new name), passed through to SGLang, or in the table."""
    unanswered = [
        flag
        for flag in SLIME_QWEN3_30B_A3B_FLAGS
        if flag not in DECLARED
        and flag not in RENAMED
        and flag not in FOREIGN_FLAGS
        and flag not in SAME_MEANING
        and not flag.startswith("--sglang-")
    ]
    assert unanswered == []
