"""hyrl.algorithms.actor_loss.ActorLoss: the run's loss terms from its flags, and a micro-batch
fed to losses.grpo_loss with each term only where its coefficient asks for it."""

from __future__ import annotations

import pytest
import torch

from hyrl.algorithms.actor_loss import ActorLoss
from hyrl.algorithms.batch import pack
from hyrl.algorithms.losses import grpo_loss
from hyrl.config import load


def _loss_of(*flags: str) -> ActorLoss:
    return ActorLoss.of(load(["--run-dir", "/tmp/unused", *flags], 1, check_files=False).algorithm)


def test_the_clip_range_is_the_policy_losss_own():
    ppo = _loss_of("--eps-clip", "0.1", "--eps-clip-high", "0.3")
    assert (ppo.policy_loss, ppo.eps_clip, ppo.eps_clip_high) == ("ppo", 0.1, 0.3)
    assert _loss_of("--eps-clip", "0.15").eps_clip_high == 0.15  # none: the lower one
    flags = ("--policy-loss", "gspo", "--gspo-eps-clip", "0.003", "--gspo-eps-clip-high", "0.004")
    gspo = _loss_of(*flags)
    assert (gspo.policy_loss, gspo.eps_clip, gspo.eps_clip_high) == ("gspo", 0.003, 0.004)
    kl = _loss_of("--use-kl-loss", "--kl-loss-coef", "0.05", "--entropy-coef", "0.01")
    assert (kl.kl_loss_coef, kl.entropy_coef, kl.needs_entropy) == (0.05, 0.01, True)
    assert not ActorLoss().needs_entropy


def _micro_batch():
    mb = pack([[2, 3], [4]], [[5, 6], [7]], torch.tensor([1.0, -0.5]), pad_id=0)
    shape = mb.loss_mask.shape
    mb.ref_log_probs = torch.full(shape, -1.5)
    return mb, torch.full(shape, -1.0), torch.full(shape, -1.2), torch.full(shape, 0.7)


def test_a_term_is_fed_only_when_its_coefficient_asks_for_it():
    mb, log_probs, old, entropy = _micro_batch()
    plain = ActorLoss(eps_clip=0.2, eps_clip_high=0.28)
    loss, _ = plain(mb, log_probs, old, entropy, total_tokens=3.0, pg_weights=None)
    # no KL, no entropy: the reference and the entropy given are left out
    alone, _ = grpo_loss(log_probs, old, mb.advantages, mb.loss_mask, eps_clip=0.2,
                         eps_clip_high=0.28, total_tokens=3.0)  # fmt: skip
    assert loss.item() == pytest.approx(alone.item())
    both = ActorLoss(kl_loss_coef=0.1, entropy_coef=0.01)
    loss, stats = both(mb, log_probs, old, entropy, total_tokens=3.0, pg_weights=None)
    full, _ = grpo_loss(log_probs, old, mb.advantages, mb.loss_mask, eps_clip=0.2,
                        eps_clip_high=0.2, ref_log_probs=mb.ref_log_probs, kl_loss_coef=0.1,
                        entropy=entropy, entropy_coef=0.01, total_tokens=3.0)  # fmt: skip
    assert loss.item() == pytest.approx(full.item()) and loss.item() != pytest.approx(alone.item())
