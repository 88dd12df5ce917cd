"""The flags of slime and Megatron-LM that `hyrl train` does not declare under the same name,
and what hyrl does instead: a table, data only (the parser turns an unknown flag found here into
its hyrl equivalent or a "not supported" error with the reason).

One file per source, each naming the commit it was read at: `megatron_lm` (Megatron-LM's
flags) and `slime` (slime's own); `reasons` holds the reasons both give. A flag both projects
take is listed under Megatron-LM, its owner. Flags hyrl declares under the same name are not
here, even where their meaning differs; neither are the old names of flags hyrl renamed (it
still accepts them).

Every `--name` in a message is a `hyrl train` flag, or an `--sglang-NAME` that hyrl passes
through to SGLang. Where hyrl has a flag's effect built in, the reason says "hyrl always ..."
(--swiglu, --disable-bias-linear, --rollout-shuffle): `built_in` accepts such a flag, with a
note, where its value asks for what hyrl does (--attention-dropout 0.0), and this table's answer
refuses any other (--attention-dropout 0.1). `sglang` holds what hyrl needs of SGLang's own
server flags to pass them through (which take a list, which were renamed).
Standard library only: data for `hyrl.config.parser` and its tests.
"""

from __future__ import annotations

from hyrl.config.foreign import megatron_lm, slime

MEGATRON = "Megatron-LM"
SLIME = "slime"

# A foreign flag with exactly hyrl's meaning (the same unit and value syntax; store_true is
# hyrl's --flag form of an on/off flag): hyrl accepts it as another name of that field.
# foreign flag -> hyrl field name. Both default to the same when absent, except --num-rollout
# (slime: required unless --num-epoch; hyrl's --num-steps: 1000).
SAME_MEANING: dict[str, str] = {
    # Megatron-LM
    "--lr-warmup-iters": "lr_warmup_steps",
    # slime
    "--num-rollout": "num_steps",
    "--use-wandb": "log_wandb",
    "--wandb-team": "wandb_entity",
}

# Every other flag of slime or Megatron-LM that hyrl does not declare under the same name:
# flag -> (source, what to do), the two tables of `megatron_lm` and `slime` together.
FOREIGN_FLAGS: dict[str, tuple[str, str]] = {
    **{flag: (MEGATRON, what) for flag, what in megatron_lm.FLAGS.items()},
    **{flag: (SLIME, what) for flag, what in slime.FLAGS.items()},
}
