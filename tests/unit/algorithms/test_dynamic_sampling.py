"""hyrl.algorithms.dynamic_sampling: DAPO's group filter and which groups a step trains on."""

import pytest

from hyrl.algorithms.dynamic_sampling import DynamicSampling, has_signal, load_group_filter


def test_a_group_has_a_signal_unless_its_rewards_are_all_equal():
    assert has_signal([0.0, 1.0, 0.0])
    assert not has_signal([1.0, 1.0, 1.0])
    assert not has_signal([0.0, 0.0])
    assert has_signal([0.5, 0.25])


def test_the_first_kept_groups_are_taken_in_generation_order():
    # two rounds of P = 3 groups of G = 2: kept = 1, 3, 4, 5; the first 3 kept are taken
    keep = [False, True, False, True, True, True]
    rewards = [0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0]  # 12 responses, mean 0.5
    ds = DynamicSampling.of(keep, needed=3, rounds=2, rewards=rewards)
    assert ds.groups == [1, 3, 4]
    assert (ds.generated_groups, ds.filtered_groups, ds.filled_groups) == (6, 2, 0)
    assert ds.responses_generated == 12
    assert ds.metrics() == {
        "train/filtered_groups_frac": 2 / 6,
        "train/dynamic_sampling_rounds": 2,
        "train/dynamic_sampling_filled_groups": 0,
        "train/reward_mean_generated": 0.5,
    }


def test_a_short_step_fills_with_the_earliest_filtered_groups():
    keep = [False, True, False, False]  # 1 kept of 4, 3 needed
    ds = DynamicSampling.of(keep, needed=3, rounds=2, rewards=[0.0] * 8)
    assert ds.groups == [0, 1, 2]  # kept 1, filled by 0 and 2
    assert ds.filled_groups == 2 and ds.filtered_groups == 3
    with pytest.raises(ValueError, match="fewer than the 5 needed"):
        DynamicSampling.of(keep, needed=5, rounds=1, rewards=[0.0] * 8)


def test_a_custom_filter_is_imported_by_module_and_function(tmp_path, monkeypatch):
    (tmp_path / "my_filters.py").write_text(
        "def keep_long(rewards, finish_reasons):\n"
        "    return any(r == 'length' for r in finish_reasons)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    keep_long = load_group_filter("my_filters:keep_long")
    assert keep_long([1.0, 1.0], ["stop", "length"]) and not keep_long([0.0], ["stop"])
    assert load_group_filter(None) is has_signal
    with pytest.raises(ValueError, match="--dynamic-sampling-filter-path .*no attribute"):
        load_group_filter("my_filters:missing")
