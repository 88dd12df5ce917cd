"""The batch-size autopilot of a resolved config with --batch-schedule auto, assembled as the
Trainer assembles it (hyrl.train.trainer): the views it reads and the batch sizes
hyrl.config allows."""

from functools import partial

from hyrl.config import ResolvedConfig, autopilot_batches, critic_autopilot_batches
from hyrl.train.autopilot import RunAutopilot


def run_autopilot(cfg: ResolvedConfig, world_size: int) -> RunAutopilot:
    allowed = autopilot_batches(cfg, world_size, batch=cfg, parallel=cfg)
    critic_allowed = partial(critic_autopilot_batches, cfg, world_size, parallel=cfg, critic=cfg)
    return RunAutopilot.of(
        cfg.autopilot, cfg.batch, cfg.critic, cfg.rollout, cfg.run, allowed, critic_allowed
    )
