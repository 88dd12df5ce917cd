"""The model behind `hyrl tune`: from a short run's records, a decode profile and update probes,
the predicted samples, throughput and time to target of every candidate batch (pure: no torch,
no subprocess, no files).

Terms (docs/batch-size.md, "The science it encodes"): B = responses per optimizer step, B0
the recipe's reference batch, N = responses per rollout step (N = k B with k optimizer steps
per rollout; a candidate at multiplier m has B = m B0 and N = m N0, k kept, as `hyrl sweep`
plans it).

1. Noise scale (`noise_estimate`). Every optimizer step the run logs B_simple = tr(Sigma)/|G|^2
   (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", sec. 2.2;
   `hyrl.metrics.noise_scale`) as `actor/noise_scale` (`critic/noise_scale` under PPO), the
   ratio of two moving averages, and the step's own unbiased two-batch estimates of |G|^2 and
   tr(Sigma) (`*/noise_grad_sq_step`, `*/noise_trace_sigma_step`). Over the later part of the
   run (the last `later_fraction` of its steps: the first are the farthest from the regime the
   run trains in) the estimate is the ratio of the means of the one-step estimates,
       B_noise = mean(tr(Sigma)_t) / mean(|G|^2_t)
   (each mean unbiased, as McCandlish et al. average the two before dividing), and its spread
   a 90% moving-block bootstrap interval of that ratio over the window's steps (blocks of
   about n^(1/3) steps keep neighbouring steps' correlation; resamples whose mean |G|^2 is not
   positive count as an unbounded B_noise). Records without the one-step values (older runs)
   fall back to the median of the logged moving average and its interquartile range, which
   measures how the noise scale drifts, not the estimator's error (neighbouring moving-average
   values are correlated).
2. Samples (`samples_ratio`). McCandlish et al. 2018 write S for optimizer steps and E for
   examples; hyrl's S (samples, responses consumed) is their E. Their eq. 2.11 (with B_noise =
   B_simple standing in for B_crit, their sec. 2.3):
       steps     S_their(B) = S_min (1 + B_noise / B)   (falls as B grows; `steps_ratio`)
       examples  E(B)       = E_min (1 + B / B_noise)   (grows with B)
   so hyrl's samples ratio is
       S(B) / S(B0) = E(B) / E(B0) = (1 + B / B_noise) / (1 + B0 / B_noise)   (E_min cancels),
   at least 1 for B >= B0. A B_noise that cannot be bounded above means the gradient is
   mostly signal at every batch tried: samples hardly grow (ratio 1). One of 0 or below means
   pure noise: samples grow with B (ratio B / B0).
3. Throughput (`predict`). R(B) = N(B) / t_step(B) responses per second of the whole loop, with
   the rollout step's time the sum of its stages, each measured in the short run at B0
   (`step_costs`, medians per rollout step over the later part) and scaled to N = m N0:
       generation  t_gen(m) = t_gen(1) x [N(m) / r(C(m))] / [N0 / r(C(1))]
                   r(C): the decode profile's responses/s at concurrency C (`hyrl
                   profile-rollout`), C(m) = min(N(m), the recipe's --rollout-concurrency):
                   the engine decodes at most that many sequences at once (when every
                   candidate has the same C, r cancels and no profile is needed);
       the rest    t(m) = t(1) x m x u(m) / u(1)   (updates, reward, log-probs, weight sync,
                   overhead), u(m): the stage's seconds per response token in the probe at
                   multiplier m (a few rollout steps at that batch, the first, warming up, left
                   out). `hyrl tune` probes in rounds, x1 first in each, and takes u(m) / u(1)
                   as the median over the rounds of that round's own ratio, so a change of
                   the machine's load between rounds cancels; the range of the rounds'
                   predicted R ratios is R's spread. A cost that does not grow with the
                   batch has u(m) = u(1) / m, so t(m) = t(1): the probes tell fixed costs from
                   per-token ones, nothing is assumed;
       a stage the probes did not time: per response (reward, logprob, value, the updates)
                   t(m) = t(1) x m, or fixed per rollout step (weight_sync, offload,
                   overhead) t(m) = t(1).
   Anchoring every stage on the short run's own time at B0 keeps the loop's real costs; the
   profile and the probes give only how each stage changes with the batch.
   Under --async-rollout (K >= 1) a worker generates and scores the next rollout while the
   trainer runs the rest, and the weight sync holds the engines (hyrl.rollout.async_queue):
       t_step = max(t_gen + t_reward, t_rest - t_sync) + t_sync
   with t_gen, t_reward the worker's own (perf/worker_rollout_s, perf/worker_reward_s).
4. Time (`predict`). T = S / R, so T(B) / T(B0) = [S(B)/S(B0)] / [R(B)/R(B0)].
5. Recommendation (`recommend`): the candidate with the least predicted T (ties: the smaller
   B), its lr = scaled_lr(lr0, B, B0, rule) (`hyrl.config.schedules`), its concurrency C(m), the
   same argmin at the low and high ends of the noise-scale spread (the uncertainty), and the
   B_noise interval over which it stays the fastest (`noise_range_of`): where that interval
   ends inside the spread, the recommendation flips there. Under PPO
   the critic's batch is chosen from its own noise scale (`critic_batch`): the divisor of N
   nearest to B_noise,critic (log scale), where McCandlish's optimizer steps S = 2 S_min and
   examples E = 2 E_min (McCandlish et al. 2018, sec. 2.3: B_crit is the compromise between the
   two).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from hyrl.batchsize.runs import finite_or_none as _finite
from hyrl.config.schedules import scaled_lr
from hyrl.metrics.run_dir import number as _num

# perf/<stage>_s timers and how each scales with the batch (module docstring, step 3)
DECODE_STAGES = ("rollout",)
UPDATE_STAGES = ("actor_train", "critic_train")
PER_RESPONSE_STAGES = ("reward", "logprob", "value")
FIXED_STAGES = ("weight_sync", "offload", "overhead")
STAGES = DECODE_STAGES + PER_RESPONSE_STAGES + UPDATE_STAGES + FIXED_STAGES
# --async-rollout: the worker's stages, off the trainer's path (overlapped in `predict`)
WORKER_STAGES = ("rollout", "reward")
LATER_FRACTION = 0.5  # the later half of a run holds the estimate


class TuneModelError(ValueError):
    """Records the model cannot use; the message names the run and what is missing."""


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile), inclusive method; one value gives it thrice."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _later(items: list, fraction: float) -> list:
    """The last ceil(fraction x n) items (at least one when there are any)."""
    return items[len(items) - max(1, math.ceil(fraction * len(items))) :] if items else []


@dataclass
class NoiseEstimate:
    """B_noise from one run's records (module docstring, step 1): `value`, and `low` to `high`
    its spread, named by `spread` (inf: the window cannot bound it from above)."""

    metric: str
    value: float
    low: float
    high: float
    n_values: int
    window_samples: tuple[float, float]
    series: list[tuple[float, float]] = field(default_factory=list)  # (samples, value), all
    spread: str = "interquartile range of the moving average"


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_INTERVAL = (0.05, 0.95)
MIN_STEPS_FOR_BOOTSTRAP = 8  # fewer one-step estimates: the moving average's median instead


def noise_estimate(
    records: Sequence[Mapping], metric: str = "actor/noise_scale", later_fraction=LATER_FRACTION
) -> NoiseEstimate | None:
    """The noise scale of `metric`'s model over the later part of the records (module
    docstring, step 1); None when no record holds a finite value. Negative values are kept as
    measured; the model reads them as 0 (a noise scale is not negative)."""
    series = []
    for rec in records:
        v, s = _finite(rec.get(metric)), _finite(rec.get("samples"))
        if v is not None and s is not None:
            series.append((s, v))
    prefix = metric.rsplit("/", 1)[0]
    steps = []  # (samples, |G|^2_t, tr(Sigma)_t)
    for rec in records:
        s = _finite(rec.get("samples"))
        g = _finite(rec.get(f"{prefix}/noise_grad_sq_step"))
        t = _finite(rec.get(f"{prefix}/noise_trace_sigma_step"))
        if s is not None and g is not None and t is not None:
            steps.append((s, g, t))
    window_steps = _later(steps, later_fraction)
    if len(window_steps) >= MIN_STEPS_FOR_BOOTSTRAP:
        grad_sq = [g for _, g, _ in window_steps]
        trace = [t for _, _, t in window_steps]
        value = _ratio_of_means(grad_sq, trace)
        if math.isfinite(value):
            low, high = _block_bootstrap(grad_sq, trace)
            return NoiseEstimate(
                metric,
                value,
                low,
                high,
                len(window_steps),
                (window_steps[0][0], window_steps[-1][0]),
                series,
                "90% block-bootstrap interval",
            )
    if not series:
        return None
    window = _later(series, later_fraction)
    low, median, high = _quartiles(sorted(v for _, v in window))
    return NoiseEstimate(
        metric, median, low, high, len(window), (window[0][0], window[-1][0]), series
    )


def _ratio_of_means(grad_sq: Sequence[float], trace: Sequence[float]) -> float:
    """mean tr(Sigma) / mean |G|^2; inf when the mean |G|^2 is not positive (no signal)."""
    mean_grad_sq = math.fsum(grad_sq) / len(grad_sq)
    if not mean_grad_sq > 0:
        return math.inf
    return math.fsum(trace) / len(trace) / mean_grad_sq


def _block_bootstrap(grad_sq: Sequence[float], trace: Sequence[float]) -> tuple[float, float]:
    """BOOTSTRAP_INTERVAL percentiles of the ratio of means over moving-block resamples of the
    steps (Kunsch 1989; blocks of round(n^(1/3)) consecutive steps), seeded: the same records
    give the same interval."""
    n = len(grad_sq)
    block = max(1, round(n ** (1 / 3)))
    starts = n - block + 1
    rng = random.Random(0)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        picked: list[int] = []
        while len(picked) < n:
            first = rng.randrange(starts)
            picked.extend(range(first, first + block))
        picked = picked[:n]
        ratios.append(_ratio_of_means([grad_sq[i] for i in picked], [trace[i] for i in picked]))
    ratios.sort()
    low_q, high_q = BOOTSTRAP_INTERVAL
    return ratios[int(low_q * (len(ratios) - 1))], ratios[int(high_q * (len(ratios) - 1))]


def _rollout_steps(records: Sequence[Mapping]) -> list[dict]:
    """One dict per rollout step: its stage times (summed over its records) and the mean
    response length (a rollout step with k optimizer steps logs k records)."""
    steps: dict[int, dict] = {}
    for i, rec in enumerate(records):
        key = rec.get("rollout_step", rec.get("step", i))
        step = steps.setdefault(int(_num(key)) if _finite(key) is not None else i, {})
        for name in (*STAGES, "step"):
            v = _finite(rec.get(f"perf/{name}_s"))
            if v is None and name in WORKER_STAGES:  # --async-rollout: the worker timed it
                v = _finite(rec.get(f"perf/worker_{name}_s"))
            if v is not None:
                step[name] = step.get(name, 0.0) + v
        length = _finite(rec.get("train/response_len_mean"))
        if length is not None:
            step.setdefault("lengths", []).append(length)
    out = []
    for _, step in sorted(steps.items()):
        lengths = step.pop("lengths", [])
        step["response_tokens"] = statistics.mean(lengths) if lengths else None
        out.append(step)
    return out


@dataclass
class StepCosts:
    """A run's median seconds per rollout step, per stage, over its later part."""

    responses_per_rollout: int
    response_tokens: float | None
    seconds: dict[str, float]
    step_s: float | None
    n_steps: int


def step_costs(
    records: Sequence[Mapping], responses_per_rollout: int, later_fraction=LATER_FRACTION
) -> StepCosts:
    """Median per rollout step of every perf/<stage>_s over the later part of the run (the first
    rollout step, which warms up, never counts unless it is the only one). A stage the run
    never timed is absent."""
    steps = _rollout_steps(records)
    if len(steps) > 1:
        steps = steps[1:]
    window = _later(steps, later_fraction)
    if not window:
        raise TuneModelError("no records with stage timers (perf/*_s)")
    seconds = {}
    for name in STAGES:
        values = [s[name] for s in window if name in s]
        if values:
            seconds[name] = statistics.median(values)
    if "rollout" not in seconds:
        raise TuneModelError("no perf/rollout_s in the records: the generation time is needed")
    lengths = [s["response_tokens"] for s in window if s["response_tokens"] is not None]
    steps_s = [s["step"] for s in window if "step" in s]
    return StepCosts(
        responses_per_rollout,
        statistics.median(lengths) if lengths else None,
        seconds,
        statistics.median(steps_s) if steps_s else None,
        len(window),
    )


def seconds_per_token(costs: StepCosts) -> dict[str, float]:
    """Seconds per response token of every stage but the decode: t / (N x tokens)."""
    tokens = costs.response_tokens if costs.response_tokens else 1.0
    return {
        s: t / (costs.responses_per_rollout * tokens)
        for s, t in costs.seconds.items()
        if s not in DECODE_STAGES
    }


def decode_rates(profile: Mapping) -> dict[int, float]:
    """{concurrency: responses/s} from `hyrl profile-rollout`'s profile.json."""
    rows = profile.get("rows") if isinstance(profile, Mapping) else None
    if not isinstance(rows, list) or not rows:
        raise TuneModelError("the decode profile has no rows (profile.json 'rows')")
    rates = {}
    for row in rows:
        c, r = row.get("c"), _finite(row.get("responses_per_s"))
        if isinstance(c, int) and r is not None and r > 0:
            rates[c] = r
    if not rates:
        raise TuneModelError("the decode profile has no row with a positive responses_per_s")
    return rates


def concurrency(responses_per_rollout: int, cap: int) -> int:
    """C: the sequences the engine decodes at once, at most --rollout-concurrency."""
    return min(responses_per_rollout, cap)


def samples_ratio(B: float, B0: float, b_noise: float) -> float:
    """hyrl's S(B)/S(B0) = McCandlish's E(B)/E(B0) = (1 + B/B_noise) / (1 + B0/B_noise)
    (module docstring, step 2): the limit 1 for an unbounded B_noise, B/B0 for one <= 0."""
    if math.isinf(b_noise):
        return 1.0
    if b_noise <= 0:
        return B / B0
    return (1 + B / b_noise) / (1 + B0 / b_noise)


def steps_ratio(B: float, B0: float, b_noise: float) -> float:
    """McCandlish's S(B)/S(B0), optimizer steps = samples / B: (1 + B_noise/B) / (1 +
    B_noise/B0), for the same limits as `samples_ratio`."""
    return samples_ratio(B, B0, b_noise) * B0 / B


@dataclass
class Candidate:
    """One candidate batch, predicted."""

    mult: int
    responses_per_step: int
    responses_per_rollout: int
    concurrency: int
    lr: float
    stage_s: dict[str, float]
    step_s: float
    responses_per_s: float
    throughput_ratio: float = 1.0
    samples_ratio: float = 1.0
    time_ratio: float = 1.0
    samples_ratio_low: float = 1.0  # at the low end of the noise-scale spread
    time_ratio_low: float = 1.0
    samples_ratio_high: float = 1.0
    time_ratio_high: float = 1.0
    # over the probe rounds (min, max), at the point noise scale: R's spread and T's from it
    throughput_ratio_range: list[float] = field(default_factory=lambda: [1.0, 1.0])
    time_ratio_range: list[float] = field(default_factory=lambda: [1.0, 1.0])


def predict(
    mults: Sequence[int],
    B0: int,
    lr0: float,
    rule: str,
    reference: StepCosts,
    probes: Mapping[int, Mapping[str, float]],
    rates: Mapping[int, float] | None,
    concurrency_cap: int,
    noise: NoiseEstimate,
    overlapped: bool = False,
) -> list[Candidate]:
    """Every candidate's stage times, R, and S, R, T ratios to m = 1 (module docstring, steps 2
    to 4). `reference`: the short run's costs at B0; `probes[m]`: seconds per response token
    of each stage at multiplier m (`seconds_per_token`), m = 1 included; `rates`: decode
    responses/s per concurrency (None when every candidate has the same C: r cancels);
    overlapped: --async-rollout with K >= 1 (generation and scoring overlap the trainer)."""
    if 1 not in mults:
        raise TuneModelError("the candidates must include multiplier 1 (the reference)")
    N0 = reference.responses_per_rollout
    c0 = concurrency(N0, concurrency_cap)
    out = []
    for m in sorted(mults):
        N = m * N0
        c = concurrency(N, concurrency_cap)
        decode = 1.0  # r(C(1)) / r(C(m))
        if c != c0:
            missing = [need for need in (c, c0) if need not in (rates or {})]
            if missing:
                raise TuneModelError(
                    f"the decode profile has no row at concurrency {missing[0]} (candidate "
                    f"x{m}); rows: {', '.join(map(str, sorted(rates or {}))) or 'none'}"
                )
            assert rates is not None
            decode = rates[c0] / rates[c]
        if m not in probes or 1 not in probes:
            raise TuneModelError(f"no update probe at multiplier {m if 1 in probes else 1}")
        stage_s = {}
        for name, t1 in reference.seconds.items():
            u1, um = probes[1].get(name), probes[m].get(name)
            if name in DECODE_STAGES:
                stage_s[name] = t1 * m * decode
            elif u1 and um is not None:
                stage_s[name] = t1 * m * um / u1
            elif name in FIXED_STAGES:
                stage_s[name] = t1
            else:
                stage_s[name] = t1 * m
        step_s = step_seconds(stage_s, overlapped)
        out.append(
            Candidate(
                mult=m,
                responses_per_step=m * B0,
                responses_per_rollout=N,
                concurrency=c,
                lr=scaled_lr(lr0, m * B0, B0, rule),
                stage_s=stage_s,
                step_s=step_s,
                responses_per_s=N / step_s if step_s > 0 else math.inf,
            )
        )
    ref = out[0]
    for cand in out:
        B = cand.responses_per_step
        cand.throughput_ratio = cand.responses_per_s / ref.responses_per_s
        for suffix, b_noise in (("", noise.value), ("_low", noise.low), ("_high", noise.high)):
            s = samples_ratio(B, B0, b_noise)
            setattr(cand, f"samples_ratio{suffix}", s)
            setattr(cand, f"time_ratio{suffix}", s / cand.throughput_ratio)
    return out


def step_seconds(stage_s: Mapping[str, float], overlapped: bool = False) -> float:
    """A rollout step's time from its stages: their sum, or overlapped (--async-rollout) the
    worker's generation and scoring against the trainer's stages, the weight sync (which holds
    the engines) on neither side: max(gen + reward, rest - sync) + sync."""
    if not overlapped:
        return sum(stage_s.values())
    worker = sum(stage_s.get(name, 0.0) for name in WORKER_STAGES)
    sync = stage_s.get("weight_sync", 0.0)
    trainer = sum(t for name, t in stage_s.items() if name not in WORKER_STAGES) - sync
    return max(worker, trainer) + sync


def _argmin(candidates: Sequence[Candidate], key: str) -> Candidate:
    return min(candidates, key=lambda c: (getattr(c, key), c.responses_per_step))


def critic_batch(b_noise: float, responses_per_rollout: int, unit: int) -> int:
    """The critic's batch: among the divisors d of N that are multiples of `unit` (its
    micro-batch x data-parallel ranks), the one nearest to B_noise,critic on a log scale
    (module docstring, step 5); ties go to the larger. N itself when no smaller one fits."""
    N = responses_per_rollout
    choices = [d for d in range(unit, N + 1, unit) if N % d == 0] or [N]
    target = max(b_noise, 1.0)
    return min(choices, key=lambda d: (abs(math.log(d / target)), -d))


def noise_range_of(candidates: Sequence[Candidate], mult: int) -> tuple[float, float]:
    """The B_noise interval over which candidate `mult` has the least predicted T (its
    throughput fixed), from where each other candidate's T crosses its own.

    T_c / T_r = [(1 + B_c/b) / (1 + B_r/b)] x R_r / R_c at B_noise = b, equal to 1 at
        b* = (B_r R_c - B_c R_r) / (R_r - R_c).
    A smaller batch (B_c < B_r) wins below its b*, a larger one with R_c > R_r above its b*
    (one with R_c <= R_r never). The interval is (max b* of the smaller, min b* of the larger):
    0 and inf where nothing bounds it, and empty (low > high) where `mult` wins nowhere."""
    rec = next(c for c in candidates if c.mult == mult)
    B_r, R_r = rec.responses_per_step, rec.responses_per_s
    low, high = 0.0, math.inf
    for c in candidates:
        B_c, R_c = c.responses_per_step, c.responses_per_s
        if c.mult == mult:
            continue
        if B_c < B_r:
            # T_c / T_r < 1 for b below b*; when R_c >= R_r the smaller batch wins everywhere
            crossing = math.inf if R_c >= R_r else (B_r * R_c - B_c * R_r) / (R_r - R_c)
            low = max(low, crossing)
        elif R_c > R_r:
            high = min(high, max(0.0, (B_r * R_c - B_c * R_r) / (R_r - R_c)))
    return low, high


@dataclass
class Recommendation:
    mult: int
    responses_per_step: int
    prompts_per_step: int
    lr: float
    concurrency: int
    time_ratio: float
    mult_low: int  # the argmin at the low end of the noise-scale spread
    time_ratio_low: float
    mult_high: int
    time_ratio_high: float
    # the B_noise interval over which this candidate stays the fastest (`noise_range_of`)
    holds_from_noise: float = 0.0
    holds_to_noise: float = math.inf
    critic_batch: int | None = None
    critic_lr: float | None = None
    critic_noise_scale: float | None = None
    # candidates whose T ratio range over the probe rounds overlaps this one's: the verdict
    # between them lies inside the spread of the measured throughput
    within_throughput_spread: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def recommend(
    candidates: Sequence[Candidate],
    prompts_per_step0: int,
    critic: Mapping | None = None,
) -> Recommendation:
    """The candidate of least predicted T, and the argmins at the spread's two ends. `critic`
    (PPO): {"noise": NoiseEstimate, "B0": its reference batch, "lr0": its lr, "rule": the lr
    rule, "unit": micro-batch x DP}."""
    best = _argmin(candidates, "time_ratio")
    low, high = _argmin(candidates, "time_ratio_low"), _argmin(candidates, "time_ratio_high")
    rec = Recommendation(
        mult=best.mult,
        responses_per_step=best.responses_per_step,
        prompts_per_step=prompts_per_step0 * best.mult,
        lr=best.lr,
        concurrency=best.concurrency,
        time_ratio=best.time_ratio,
        mult_low=low.mult,
        time_ratio_low=low.time_ratio_low,
        mult_high=high.mult,
        time_ratio_high=high.time_ratio_high,
    )
    rec.holds_from_noise, rec.holds_to_noise = noise_range_of(candidates, best.mult)
    if critic is not None:
        noise: NoiseEstimate = critic["noise"]
        rec.critic_noise_scale = noise.value
        rec.critic_batch = critic_batch(noise.value, best.responses_per_rollout, critic["unit"])
        rec.critic_lr = scaled_lr(critic["lr0"], rec.critic_batch, critic["B0"], critic["rule"])
    return rec
