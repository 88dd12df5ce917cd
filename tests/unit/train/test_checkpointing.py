"""The loop's side of a training checkpoint (hyrl.train.checkpointing): when one is due."""

from types import SimpleNamespace

from hyrl.train.checkpointing import due


def test_a_checkpoint_is_due_every_save_interval_after_the_last_step_and_on_an_early_stop():
    run = SimpleNamespace(num_steps=10)
    checkpoint = SimpleNamespace(save="ckpt", save_interval=4)
    assert [s for s in range(1, 11) if due(checkpoint, run, s, stops=False)] == [4, 8, 10]
    assert due(checkpoint, run, 3, stops=True)  # a preemption or --stop-at-target after step 3
    no_interval = SimpleNamespace(save="ckpt", save_interval=0)
    assert [s for s in range(1, 11) if due(no_interval, run, s, stops=False)] == [10]
    no_save = SimpleNamespace(save=None, save_interval=4)  # without --save: never
    assert not any(due(no_save, run, s, stops=True) for s in range(1, 11))
