"""Specification of hyrl.train.data_parallel: the rollout rows of each data-parallel rank."""

from hyrl.train.data_parallel import DataParallelRows


def test_no_grad_share_is_contiguous_per_dp_rank():
    rows = DataParallelRows(dp_rank=1, dp_size=2, optimizer_steps_per_rollout=2)
    assert rows.share(8) == slice(4, 8)
    assert rows.share(8, dp_rank=0) == slice(0, 4)


def test_each_optimizer_step_splits_its_global_batch_over_dp_ranks():
    rows = DataParallelRows(dp_rank=1, dp_size=2, optimizer_steps_per_rollout=2)
    # B = 4 responses per step: step 0 is rows 0..3 (rank 1: 2, 3), step 1 rows 4..7 (6, 7)
    assert rows.of_step(0, 4) == slice(2, 4)
    assert rows.of_step(1, 4) == slice(6, 8)
    assert rows.of_step(1, 4, dp_rank=0) == slice(4, 6)


def test_rows_needed_join_the_share_and_every_step():
    rows = DataParallelRows(dp_rank=0, dp_size=2, optimizer_steps_per_rollout=2)
    # rank 1: share 4..7, steps {2, 3} and {6, 7}
    assert rows.needed(1, 8, 4) == {2, 3, 4, 5, 6, 7}
    assert rows.needed(0, 8, 4) == {0, 1, 2, 3, 4, 5}
