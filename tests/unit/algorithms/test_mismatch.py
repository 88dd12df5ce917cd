"""Train-inference mismatch metrics and the importance-sampling corrections (pure functions),
checked against numbers computed by hand; their place in the loss; packing the engine's
log-probs and routed experts; the flags' checks."""

import math

import pytest
import torch

from hyrl.algorithms.batch import TokenBatch, pack
from hyrl.algorithms.losses import grpo_loss
from hyrl.algorithms.mismatch import (
    Corrections,
    corrections,
    mis_keep,
    mismatch_metrics,
    tis_weights,
)
from hyrl.config import ConfigError, RunConfig, resolve, validate

# Two response tokens in row 0 (log-ratios +0.1 and -0.5), one in row 1 (log-ratio +1.0).
TRAIN = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
ROLLOUT = torch.tensor([[-1.1, -1.5, 7.0], [-1.5, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
R = [math.exp(0.1), math.exp(-0.5), math.exp(1.0)]  # 1.10517, 0.60653, 2.71828


def test_mismatch_metrics_by_hand():
    m = mismatch_metrics(TRAIN, ROLLOUT, MASK)
    assert m["mismatch/logprob_abs_diff_mean"] == pytest.approx((0.1 + 0.5 + 1.0) / 3)
    assert m["mismatch/logprob_abs_diff_max"] == pytest.approx(1.0)
    k3 = [R[0] - 0.1 - 1, R[1] + 0.5 - 1, R[2] - 1.0 - 1]  # r - log r - 1
    assert m["mismatch/kl"] == pytest.approx(sum(k3) / 3)
    assert m["mismatch/is_ratio_max"] == pytest.approx(R[2])
    assert m["mismatch/is_ratio_min"] == pytest.approx(R[1])
    # the value outside the mask (7.0 vs 0.0) takes no part
    assert mismatch_metrics(TRAIN, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_identical_log_probs_have_zero_mismatch():
    m = mismatch_metrics(TRAIN, TRAIN.clone(), MASK)
    assert m["mismatch/logprob_abs_diff_max"] == 0.0 and m["mismatch/kl"] == 0.0
    assert m["mismatch/is_ratio_max"] == m["mismatch/is_ratio_min"] == 1.0


def test_tis_truncates_the_ratio_at_the_clip():
    weights, clipped = tis_weights(TRAIN, ROLLOUT, MASK, clip=1.05)
    expected = torch.tensor([[1.05, R[1], 0.0], [1.05, 0.0, 0.0]])
    assert torch.allclose(weights, expected, atol=1e-6)
    assert clipped == pytest.approx(2 / 3)  # 1.105 and 2.718 exceed 1.05
    weights, clipped = tis_weights(TRAIN, ROLLOUT, MASK, clip=3.0)
    assert torch.allclose(weights, torch.tensor([[R[0], R[1], 0.0], [R[2], 0.0, 0.0]]), atol=1e-6)
    assert clipped == 0.0
    with pytest.raises(ValueError, match="clip must be >= 1"):
        tis_weights(TRAIN, ROLLOUT, MASK, clip=0.5)


def test_mis_token_level_drops_tokens_outside_the_range():
    keep, dropped = mis_keep(TRAIN, ROLLOUT, MASK, low=0.7, high=1.2)
    assert torch.equal(keep, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert dropped == pytest.approx(2 / 3)


def test_mis_sequence_level_judges_a_response_by_its_geometric_mean_ratio():
    # row 0: exp((0.1 - 0.5) / 2) = 0.8187 is inside [0.7, 1.2] although token 2 alone is not
    keep, dropped = mis_keep(TRAIN, ROLLOUT, MASK, low=0.7, high=1.2, level="sequence")
    assert torch.equal(keep, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert dropped == pytest.approx(1 / 3)
    keep, _ = mis_keep(TRAIN, ROLLOUT, MASK, low=0.9, high=1.2, level="sequence")
    assert keep.sum() == 0  # 0.8187 < 0.9: the whole response goes
    with pytest.raises(ValueError, match="low < 1 < high"):
        mis_keep(TRAIN, ROLLOUT, MASK, low=1.0, high=2.0)
    with pytest.raises(ValueError, match="unknown mis level"):
        mis_keep(TRAIN, ROLLOUT, MASK, low=0.5, high=2.0, level="batch")


def test_pg_weights_scale_each_tokens_policy_gradient_term():
    log_probs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    advantages = torch.tensor([1.0, -2.0])
    weights = torch.tensor([[0.5, 0.0, 0.0], [2.0, 0.0, 0.0]])
    loss, stats = grpo_loss(
        log_probs, TRAIN, advantages, MASK, eps_clip=0.2, pg_weights=weights, total_tokens=3
    )
    # ratio 1 everywhere (log_probs == old): pg_t = -A_t, weighted, over 3 tokens
    assert float(loss.detach()) == pytest.approx((-1.0 * 0.5 + 0.0 + 2.0 * 2.0) / 3)
    assert float(stats["pg_loss"]) == pytest.approx(float(loss.detach()))
    loss.backward()
    # d(-w r A)/d log p = -w A r; the zero-weighted token gets no gradient
    assert torch.allclose(log_probs.grad, torch.tensor([[-0.5 / 3, 0.0, 0.0], [4.0 / 3, 0, 0]]))


def test_pack_places_engine_log_probs_and_routed_experts_on_their_positions():
    prompts, responses = [[5, 6, 7], [5, 6]], [[8, 1], [9, 10, 1]]
    routed = [
        torch.arange(4 * 2 * 2, dtype=torch.int32).view(4, 2, 2),  # 3 + 2 - 1 tokens
        torch.full((2, 2, 2), 7, dtype=torch.int32),
    ]  # last 2 of 2 + 3 - 1
    batch = pack(
        prompts,
        responses,
        torch.zeros(2),
        pad_id=0,
        rollout_log_probs=[[-0.1, -0.2], [-0.3, -0.4, -0.5]],
        routed_experts=routed,
    )
    assert torch.equal(batch.loss_mask > 0, batch.rollout_log_probs != 0)
    assert batch.rollout_log_probs[0, 2:4].tolist() == pytest.approx([-0.1, -0.2])
    assert batch.rollout_log_probs[1, 1:4].tolist() == pytest.approx([-0.3, -0.4, -0.5])
    dense = batch.routed_experts.dense()
    assert dense.shape == (2, batch.tokens.shape[1], 2, 2)
    assert dense.dtype == torch.int16  # half the host memory of int32
    assert torch.equal(dense[0, :4], routed[0].to(torch.int16))
    assert (dense[0, 4:] == -1).all()  # the last response token and padding
    assert (dense[1, :2] == -1).all() and (dense[1, 2:4] == 7).all()
    sub = batch.select(slice(1, 2)).trim(3)
    assert sub.routed_experts.shape == (1, 3, 2, 2) and sub.rollout_log_probs.shape == (1, 3)
    assert torch.equal(sub.routed_experts.dense(), dense[1:2, :3])


def test_rows_a_rank_does_not_hold_are_never_used_silently():
    batch = pack(
        [[5, 6], [5, 7]],
        [[8, 1], [9, 1]],
        torch.zeros(2),
        pad_id=0,
        routed_experts=[torch.zeros(3, 2, 2, dtype=torch.int32), None],
    )
    assert batch.select(slice(0, 1)).routed_experts.dense().shape == (
        1,
        batch.tokens.shape[1],
        2,
        2,
    )
    with pytest.raises(RuntimeError, match="routing of row 0 of this micro-batch was not sent"):
        batch.select(slice(1, 2)).routed_experts.dense()


def test_pack_refuses_routing_or_log_probs_that_do_not_fit_the_sequence():
    with pytest.raises(ValueError, match="row 0: 1 rollout log-probs for 2 response tokens"):
        pack([[5, 6]], [[8, 1]], torch.zeros(1), pad_id=0, rollout_log_probs=[[-0.1]])
    with pytest.raises(ValueError, match="routed experts for 4 tokens, but only 3 went through"):
        pack(
            [[5, 6]],
            [[8, 1]],
            torch.zeros(1),
            pad_id=0,
            routed_experts=[torch.zeros(4, 2, 2, dtype=torch.int32)],
        )


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("tis_clip", 0.9, "--tis-clip"),
        ("mis_low", 1.0, "--mis-low"),
        ("mis_high", 1.0, "--mis-high"),
    ],
)
def test_out_of_range_importance_sampling_bounds_are_refused_naming_the_flag(
    tmp_path, flag, value, fragment
):
    cfg = RunConfig(run_dir=str(tmp_path / "run"), **{flag: value})
    with pytest.raises(ConfigError, match=fragment):
        validate(cfg, 1)


@pytest.mark.parametrize(
    "flags, fragment",
    [
        ({"tis_clip": 3.0}, "--tis-clip.*only used with --use-tis"),
        ({"mis_high": 3.0}, "--mis-high.*only used with --use-mis"),
        ({"mis_level": "sequence", "use_tis": True}, "--mis-level.*only used with --use-mis"),
    ],
)
def test_a_correction_bound_without_its_switch_is_refused_not_ignored(tmp_path, flags, fragment):
    with pytest.raises(ConfigError, match=fragment):
        validate(RunConfig(run_dir=str(tmp_path / "run"), **flags), 1)
    switch = "use_mis" if "mis" in fragment.split(".*")[0] else "use_tis"
    validate(RunConfig(run_dir=str(tmp_path / "run"), **{**flags, switch: True}), 1)


def test_non_finite_engine_log_probs_are_counted_and_dropped_not_propagated():
    rollout = ROLLOUT.clone()
    rollout[0, 1] = float("-inf")  # an engine's log-prob of a token it should not have sampled
    m = mismatch_metrics(TRAIN, rollout, MASK)
    assert m["mismatch/nonfinite_tokens"] == 1
    assert m["mismatch/logprob_abs_diff_mean"] == pytest.approx((0.1 + 1.0) / 2)
    assert all(math.isfinite(v) for v in m.values())
    weights, _ = tis_weights(TRAIN, rollout, MASK, clip=3.0)
    assert torch.isfinite(weights).all() and weights[0, 1] == 0.0 and weights[0, 0] > 0
    keep, dropped = mis_keep(TRAIN, rollout, MASK, low=0.5, high=3.0)
    assert keep[0].tolist() == [1.0, 0.0, 0.0] and dropped == pytest.approx(1 / 3)
    keep, dropped = mis_keep(TRAIN, rollout, MASK, low=0.5, high=3.0, level="sequence")
    assert keep[0].sum() == 0 and dropped == pytest.approx(2 / 3)  # its whole response goes


@pytest.mark.parametrize(
    "server_args",
    ["--enable-eplb", "--ep-num-redundant-experts 32", "--ep-num-redundant-experts=8"],
)
def test_routing_replay_refuses_sglang_flags_that_make_expert_ids_physical(tmp_path, server_args):
    cfg = RunConfig(
        run_dir=str(tmp_path / "run"),
        rollout_engine="sglang",
        rollout_num_gpus=1,
        use_rollout_routing_replay=True,
        sglang_server_args=server_args,
    )
    with pytest.raises(ConfigError, match="--use-rollout-routing-replay.*physical slots"):
        validate(cfg, 1)
    validate(
        RunConfig(
            run_dir=str(tmp_path / "run"),
            rollout_engine="sglang",
            rollout_num_gpus=1,
            use_rollout_routing_replay=True,
            sglang_server_args="--ep-num-redundant-experts 0",
        ),
        1,
    )


def test_measuring_routing_on_sglang_refuses_physical_expert_ids_too(tmp_path):
    cfg = RunConfig(
        run_dir=str(tmp_path / "run"),
        rollout_engine="sglang",
        rollout_num_gpus=1,
        measure_routing_mismatch=True,
        sglang_server_args="--enable-eplb",
    )
    with pytest.raises(ConfigError, match="--measure-routing-mismatch.*physical slots"):
        validate(cfg, 1)


def test_corrections_multiply_the_tis_weights_by_the_mis_keep_mask():
    # one response of two tokens: ratios exp(0) = 1 (kept, weight 1) and exp(2) ~ 7.4
    # (TIS clips it to 2; MIS with high = 5 drops it)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    train = torch.tensor([[0.0, -1.0, -1.0]])
    rollout = torch.tensor([[0.0, -1.0, -3.0]])
    options = dict(tis_clip=2.0, mis_low=0.5, mis_high=5.0, mis_level="token")
    metrics, weights = corrections(train, rollout, mask, use_tis=True, use_mis=True, **options)
    assert weights[0, 1:].tolist() == pytest.approx([1.0, 0.0])
    assert metrics["mismatch/tis_clipped_frac"] == 0.5
    assert metrics["mismatch/mis_masked_frac"] == 0.5
    metrics, weights = corrections(train, rollout, mask, use_tis=False, use_mis=False, **options)
    assert weights is None and "mismatch/tis_clipped_frac" not in metrics


def test_corrections_without_metrics_give_the_same_weights_and_no_batch_metrics():
    # the same response as above: weights [1, 0] either way; without the whole-batch metrics
    # (the on-policy update's micro-batches) only the two fractions the weights come with
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    train = torch.tensor([[0.0, -1.0, -1.0]])
    rollout = torch.tensor([[0.0, -1.0, -3.0]])
    options = dict(tis_clip=2.0, mis_low=0.5, mis_high=5.0, mis_level="token", use_tis=True)
    full, weights = corrections(train, rollout, mask, use_mis=True, **options)
    lean, lean_weights = corrections(
        train, rollout, mask, use_mis=True, with_metrics=False, **options
    )
    assert torch.equal(weights, lean_weights)
    assert set(lean) == {"mismatch/tis_clipped_frac", "mismatch/mis_masked_frac"} < set(full)


def test_the_flags_corrections_set_the_batchs_weights_and_report_its_entropy():
    # the response above: TIS clips exp(2) to 2, MIS (high 5) drops it, so weights [1, 0];
    # entropy 0.5 and 1.5 on the two response tokens (4.0 off the mask takes no part): 1.0
    cfg = RunConfig(use_tis=True, tis_clip=2.0, use_mis=True, mis_high=5.0, mis_level="token")
    fixes = Corrections.of(resolve(cfg).mismatch)
    assert fixes.weighs and not Corrections.of(resolve(RunConfig()).mismatch).weighs
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    batch = TokenBatch(
        tokens=torch.zeros(1, 3, dtype=torch.long),
        targets=torch.zeros(1, 3, dtype=torch.long),
        loss_mask=mask,
        advantages=torch.zeros(1),
        old_log_probs=torch.tensor([[0.0, -1.0, -1.0]]),
        rollout_log_probs=torch.tensor([[0.0, -1.0, -3.0]]),
    )
    metrics = fixes.of_old_log_probs(batch, torch.tensor([[4.0, 0.5, 1.5]]))
    assert metrics["train/entropy"] == pytest.approx(1.0)
    assert metrics["mismatch/mis_masked_frac"] == 0.5
    assert batch.pg_weights[0, 1:].tolist() == pytest.approx([1.0, 0.0])
