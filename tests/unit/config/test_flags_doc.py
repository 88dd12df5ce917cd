"""docs/flags.md is generated from the flag declarations and stays in step with them."""

from __future__ import annotations

import dataclasses

from hyrl.config import EXCLUSIVE_FLAGS, GROUP_TITLES, RunConfig, flag_name
from hyrl.config.conditional_flags import APPLIES_ONLY_WITH
from hyrl.config.docs import FLAGS_MD, RECIPES_MD, REGENERATE, recipes_with_foreign, render
from hyrl.config.foreign import FOREIGN_FLAGS, SAME_MEANING


def test_flags_md_is_what_the_generator_writes():
    assert FLAGS_MD.read_text(encoding="utf-8") == render(), (
        f"docs/flags.md is stale: regenerate it with `{REGENERATE}`"
    )


def test_the_reference_lists_every_flag_group_rule_and_exclusive_pair():
    text = render()
    for f in dataclasses.fields(RunConfig):
        assert f"| `{flag_name(f.name)}`" in text, f.name
    for title in GROUP_TITLES.values():
        assert f"## {title}\n" in text
    for rule in APPLIES_ONLY_WITH:
        assert f"| {rule.condition} |" in text
    for side_a, side_b in EXCLUSIVE_FLAGS:
        assert f"| `{flag_name(side_a[0])}`" in text and f"`{flag_name(side_b[0])}`" in text


def test_recipes_md_holds_the_generated_slime_and_megatron_table():
    text = RECIPES_MD.read_text(encoding="utf-8")
    assert recipes_with_foreign(text) == text, (
        f"docs/recipes.md's flag table is stale: regenerate it with `{REGENERATE}`"
    )
    for flag in [*FOREIGN_FLAGS, *SAME_MEANING]:
        assert f"| `{flag}` |" in text
