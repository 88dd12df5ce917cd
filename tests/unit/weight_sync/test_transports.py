"""The weight transports are named once (hyrl.config.weight_transport), and every table that
picks by transport keys on those names: the flag's choices, the trainer's modes, the SGLang
engine's receivers, the plan's time model and the rules of the rollout layout."""

import dataclasses

import pytest

from hyrl.config import ConfigError, RunConfig, parse_args, resolve
from hyrl.config.names import VALUE_ALIASES
from hyrl.config.rollout_layout import rollout_layout
from hyrl.config.weight_transport import LOAD_STATE_DICT, NAMES, TRANSPORTS
from hyrl.plan.sync import TRANSFERS
from hyrl.rollout.sglang.engine import RECEIVERS
from hyrl.weight_sync import MODES


def test_the_flags_choices_are_the_transports():
    (field,) = [f for f in dataclasses.fields(RunConfig) if f.name == "update_weight_transport"]
    assert field.metadata["choices"] == NAMES == ("tensor", "distributed", "disk")
    assert set(VALUE_ALIASES.values()) <= set(NAMES)  # nccl = distributed


def test_every_transport_has_a_trainer_mode_and_the_hf_copy_too():
    assert set(MODES) == {*NAMES, LOAD_STATE_DICT}


def test_every_transport_has_an_engine_receiver_named_for_it():
    assert set(RECEIVERS) == set(NAMES)
    assert {name: receiver.transport for name, receiver in RECEIVERS.items()} == {
        name: name for name in NAMES
    }
    # an engine actor on Ray loads its own server by a receiver it has (never by broadcast)
    assert {t.engine_actor for t in TRANSPORTS.values()} == {"tensor", "disk"}


def test_the_plan_models_every_placement_the_layout_allows_and_no_other():
    # engines on GPUs of their own take every transport; on the training GPUs, those that
    # reach colocated engines; the hf engines (never colocated) their own copy
    allowed = {(name, False) for name in NAMES} | {(LOAD_STATE_DICT, False)}
    allowed |= {(name, True) for name, t in TRANSPORTS.items() if t.colocated}
    assert set(TRANSFERS) == allowed
    assert {(name, True) for name in NAMES} - allowed == {("distributed", True)}


SGLANG = ["--rollout-engine", "sglang"]


def _layout(argv: list[str]):
    return rollout_layout(resolve(parse_args([*SGLANG, *argv])), world_size=2)


@pytest.mark.parametrize("name", NAMES)
def test_the_layout_takes_a_transport_exactly_where_its_facts_say(name):
    flag = ["--update-weight-transport", name]
    assert _layout(["--rollout-num-gpus", "2", *flag]).update_weight_transport == name
    for where, argv in (
        ("colocated", ["--colocate"]),
        ("attached", ["--sglang-router-url", "http://10.0.0.5:30000"]),
    ):
        if getattr(TRANSPORTS[name], where):
            assert _layout([*argv, *flag]).update_weight_transport == name
        else:
            with pytest.raises(ConfigError, match=TRANSPORTS[name].refused):
                _layout([*argv, *flag])


def test_without_the_flag_colocated_engines_take_tensor_and_the_others_distributed():
    assert _layout(["--colocate"]).update_weight_transport == "tensor"
    assert _layout(["--rollout-num-gpus", "2"]).update_weight_transport == "distributed"
    router = ["--sglang-router-url", "http://10.0.0.5:30000"]
    assert _layout(router).update_weight_transport == "distributed"
