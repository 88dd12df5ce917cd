"""The flags of `hyrl train` by concern: one module each, owning its flags' declarations, what
those not given stand for, and their checks.

A concern module holds, as far as it has them:

    <Name>Flags       a dataclass of its fields, each declared with `hyrl.config.kinds._opt`
                      (a concern whose fields are not contiguous in the flags' order has two);
                      `hyrl.config.fields.RunConfig` inherits them all (one flat config: callers
                      read cfg.global_batch_size), and the parser and docs/flags.md follow
    POSITIVE_COUNTS   its fields that count or size something: >= 1 when given
    EXCLUSIVE_FLAGS   its flags that exclude each other, as pairs of sides (`hyrl.config.parser`:
                      a recipe's side gives way to the other side appended to it)
    APPLIES_ONLY_WITH its flags that do something only under a condition, as rows
                      (`hyrl.config.kinds.AppliesOnlyWith`): given without it, validation
                      refuses them; `hyrl.config.conditional_flags` gathers the rows in one
                      order, which is the order of the errors and of docs/flags.md (a concern
                      whose rows are not contiguous in that order has two tuples)
    check_given       the ranges of its values as given, before resolution
    resolve           what its flags not given stand for, as the fields to update;
                      `hyrl.config.resolve` calls each concern's in order, each on the values
                      resolved before it (the rate on the resolved B), the critic's last, on
                      the resolved actor
    check_*           its checks on the resolved config, which `hyrl.config.validate.validate`
                      calls in one fixed order (that order is the order of the errors)

A check names its flag, the value and what is allowed (`hyrl.config.errors._fail`).

The concerns form layers, in this order:

Order: model, run, logs, parallel, mismatch, algorithm, data, batch, rollout, evaluation,
       optimizer, critic, autopilot.

A function takes its own concern's Flags first and reads an earlier concern's flags through a
keyword parameter typed by that concern's Flags (`model: ModelFlags`); a later concern's value
comes as a value parameter named like its flag (`eval_interval: int`). A row's condition reads
its own concern's flags or one earlier concern's (`AppliesOnlyWith[AlgorithmFlags]`). The
callers (`hyrl.config.validate`, `resolve`, `fields`) pass the one config for each. So a
signature says what a part depends on, a concern imports only concerns before it, and none
imports the config assembly (`fields`, `resolve`, `validate`), not even for an annotation
(tests/unit/test_architecture.py).
"""
