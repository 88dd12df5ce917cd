"""One fresh initial model per seed at every layout (megatron's CPU init).

In one process: the draws hyrl derives from the architecture (initial_weights.reference_draws)
are the draws megatron makes when it builds the whole model, and replaying them reproduces
megatron's own init at TP=1, PP=1, EP=1 bit for bit (that layout's initial model is unchanged).
On several gloo ranks (tests/helpers/initial_weights_worker.py): the gathered initial actor,
its reference copy and the critic are bitwise equal at PP=2, EP=2, TP=2 with sequence
parallelism and PP=2 with 2 virtual stages to PP=1, and so are the first step's loss and
gradient norm (to 1e-6).
"""

import dataclasses
import math
import types

import pytest
import torch
from testpaths import HELPERS
from torch.utils._python_dispatch import TorchDispatchMode
from torchrun_worker import run_ranks

from hyrl.backends.megatron import initial_weights
from hyrl.models.qwen3_moe.config import TINY

WORKER = HELPERS / "initial_weights_worker.py"
TIED = dataclasses.replace(TINY, untie_embeddings_and_output_weights=False)


@pytest.fixture(scope="module")
def one_rank_group():
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=1)
    yield
    destroy_distributed()


class RandomDraws(TorchDispatchMode):
    """Every random fill torch runs while active, as (shape, std, dtype)."""

    RANDOM_OPS = ("normal", "uniform", "rand", "bernoulli", "random", "exponential", "cauchy")

    def __init__(self):
        super().__init__()
        self.draws: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(op in func.__name__ for op in self.RANDOM_OPS):
            assert func.__name__.startswith("normal_"), f"megatron drew with {func.__name__}"
            std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
            self.draws.append((tuple(args[0].shape), std, args[0].dtype))
        return func(*args, **kwargs)


def _build(arch, value_head: bool, dtype: torch.dtype):
    from hyrl.backends.megatron.model import ParallelLayout, build_model_chunks

    return build_model_chunks(
        arch, ParallelLayout(), "local", value_head=value_head, params_dtype=dtype
    )


def _expected_draw(draw: initial_weights.Draw, config, arch) -> tuple:
    """(shape, std, dtype) of a derived draw: megatron's init_method_std, scaled by
    1/sqrt(2 layers) for the output projections (TransformerConfig's documented
    output_layer_init_method); an fp32 master except the value head (params_dtype)."""
    std = config.init_method_std
    if draw.init == "output":
        std = config.init_method_std / math.sqrt(2.0 * arch.num_layers)
    dtype = config.params_dtype if draw.init == "value_head" else torch.float32
    return draw.shape, std, dtype


CASES = [
    (TINY, False, torch.float32),
    (TINY, True, torch.float32),
    (TINY, True, torch.bfloat16),
    (TIED, False, torch.float32),
]


@pytest.mark.parametrize(("arch", "value_head", "dtype"), CASES)
def test_the_derived_draws_are_the_draws_megatron_makes_for_the_whole_model(
    one_rank_group, arch, value_head, dtype
):
    with RandomDraws() as recorded:
        (chunk,) = _build(arch, value_head, dtype)
    derived = initial_weights.reference_draws(arch, value_head)
    expected = [_expected_draw(draw, chunk.config, arch) for draw in derived]
    assert len(recorded.draws) == len(expected)
    for got, want in zip(recorded.draws, expected, strict=True):
        assert got[0] == want[0] and got[2] == want[2]
        assert got[1] == pytest.approx(want[1], rel=1e-12)


@pytest.mark.parametrize(("arch", "value_head", "dtype"), CASES)
def test_replay_at_the_reference_layout_equals_megatrons_own_init_bit_for_bit(
    one_rank_group, arch, value_head, dtype
):
    torch.manual_seed(5)
    start = torch.get_rng_state()
    (megatron,) = _build(arch, value_head, dtype)
    after_megatron = torch.get_rng_state()
    torch.manual_seed(6)  # megatron draws other values into the model that is replayed
    (replayed,) = _build(arch, value_head, dtype)
    theirs = dict(megatron.named_parameters())
    assert any(not torch.equal(p, theirs[n]) for n, p in replayed.named_parameters())

    initial_weights.replay_reference_init([replayed], arch, replayed.config, start, value_head)
    for name, param in replayed.named_parameters():
        assert torch.equal(param, theirs[name]), name
    assert torch.equal(torch.get_rng_state(), after_megatron)  # what draws next is the same


def test_a_parameter_no_draw_names_is_refused(one_rank_group):
    """A stale sequence (megatron grew a parameter) fails the build instead of leaving the
    parameter at megatron's shifted values."""
    (chunk,) = _build(TINY, False, torch.float32)
    chunk.register_parameter("extra_weight", torch.nn.Parameter(torch.zeros(2)))
    with pytest.raises(ValueError, match="extra_weight"):
        initial_weights.replay_reference_init(
            [chunk], TINY, chunk.config, torch.get_rng_state(), False
        )


LAYOUTS = {
    "pp1": (1, 1, 1, 1, 0, 0),
    "pp2": (2, 1, 1, 2, 0, 0),
    "ep2": (2, 1, 2, 1, 0, 0),
    "tp2sp": (2, 2, 1, 1, 0, 0),
    # 4 layers: PP=2 with 2 virtual stages of 1 layer per rank, against PP=1 with 4 layers
    "pp1 4 layers": (1, 1, 1, 1, 0, 4),
    "pp2 vp2": (2, 1, 1, 2, 2, 4),
}  # nproc, TP, EP, PP, V (0: none), layers (0: TINY's 2); TP > 1 with sequence parallelism
AGAINST = {"pp2": "pp1", "ep2": "pp1", "tp2sp": "pp1", "pp2 vp2": "pp1 4 layers"}


@pytest.fixture(scope="module")
def fresh_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("initial_weights")
    runs = {}
    for layout, (nproc, *args) in LAYOUTS.items():
        out = tmp / f"{layout.replace(' ', '_')}.pt"
        run_ranks(WORKER, nproc, out, *args)
        runs[layout] = torch.load(out, weights_only=False)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(AGAINST))
@pytest.mark.parametrize("model", ["actor", "reference", "critic"])
def test_gathered_initial_weights_are_bitwise_those_of_pp1(fresh_runs, layout, model):
    reference, got = fresh_runs[AGAINST[layout]][model], fresh_runs[layout][model]
    assert got.keys() == reference.keys()
    assert [name for name in reference if not torch.equal(got[name], reference[name])] == []


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(AGAINST))
def test_the_rng_after_the_builds_and_the_first_step_match_pp1(fresh_runs, layout):
    reference, got = fresh_runs[AGAINST[layout]], fresh_runs[layout]
    assert torch.equal(got["rng_after_builds"], reference["rng_after_builds"])
    assert got["loss"] == pytest.approx(reference["loss"], rel=1e-6)
    assert got["grad_norm"] > 0
    assert got["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-6)


@pytest.mark.parametrize(
    ("cpu_init", "loaded_from", "says"),
    [
        (True, None, "the same at every layout"),
        (False, None, "this layout"),
        (False, "--hf-checkpoint /ckpt", "--hf-checkpoint /ckpt"),
        (True, "--load /run", "--load /run"),
    ],
)
def test_the_startup_line_says_what_the_initial_model_depends_on(cpu_init, loaded_from, says):
    config = types.SimpleNamespace(use_cpu_initialization=cpu_init)
    line = initial_weights.describe(config, loaded_from, seed=3)
    assert says in line
    assert ("seed 3" in line) == (loaded_from is None)
