"""holo-bench's Ehrlich tests against ``llome_jax.compat.holo.Ehrlich``, and its torch contract.

The first tests restate, in our own words, what prescient-design/holo-bench (commit a58d03e)
checks in ``tests/test_functions/closed_form/test_ehrlich.py`` and in the Ehrlich test of
``tests/optim/test_discrete_evolution.py``. Those tests call holo's own torch helpers
(``sample_dmp``, ``dmp_stationary_dist``, ``DiscreteEvolution``); pytorch-holo is not a dependency,
so minimal torch equivalents of them live here (same torch operations, seeded generators). The
holo-bench files themselves, with only their ``Ehrlich`` import changed, also pass against the
facade (run in a scratch environment with pytorch-holo 0.0.5 installed for their helpers).

The contract tests pin holo's dtypes and shapes as pytorch-holo 0.0.5 produces them (read from its
source and checked on the real package: float32 tables, ``stationary_dist`` ``[v, 1]``, a tuple of
int64 motifs, float64 ``bounds`` ``[2, L]``, int64 solutions, float32 values), values against
holo's recorded golden values and against the JAX evaluator, and the NumPy backend without torch.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import llome_jax.ehrlich as eh  # noqa: E402
from llome_jax.compat import holo as holo_facade  # noqa: E402
from llome_jax.compat.holo import Ehrlich, HoloSeedWarning  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::llome_jax.compat.holo.HoloSeedWarning")


# ------------------------------------------------------------------ holo's helpers, restated
def _stationary(matrix: torch.Tensor) -> torch.Tensor:
    """The law ``pi`` with ``pi P = pi``, ``sum(pi) = 1``, as holo's ``dmp_stationary_dist``:
    least squares on ``[(I - P)^T; 1^T] pi = [0; 1]``. float ``[v, 1]``."""
    v = matrix.shape[0]
    a = torch.cat([(torch.eye(v) - matrix).T, torch.ones(1, v)], dim=0)
    b = torch.zeros(v + 1, 1)
    b[-1] = 1.0
    return torch.linalg.lstsq(a, b).solution


def _sample_chain(
    initial: torch.Tensor, matrix: torch.Tensor, steps: int, n: int, generator: torch.Generator
) -> torch.Tensor:
    """``n`` Markov chains as holo's ``sample_dmp`` draws them (``torch.multinomial`` on the
    rows of the transition matrix, which must therefore be a float tensor): int64 ``[n, steps]``."""
    samples = torch.zeros(n, steps, dtype=torch.int64)
    samples[:, 0] = torch.multinomial(initial, n, replacement=True, generator=generator)
    for t in range(1, steps):
        rows = matrix[samples[:, t - 1]]
        samples[:, t] = torch.multinomial(rows, 1, generator=generator).squeeze(-1)
    return samples


def _evolve(
    closure,
    x0: torch.Tensor,
    *,
    vocab_size: int,
    mutation_prob: float,
    recombine_prob: float,
    survival_quantile: float,
    num_particles: int,
    steps: int,
    generator: torch.Generator,
) -> float:
    """holo's ``DiscreteEvolution.step`` for one parameter, ``steps`` times: float particles
    ``[num_particles, L]`` scored by ``closure`` (minimised: ``torch.argmin``,
    ``torch.quantile``), survivors at the quantile, uniform crossover of two survivors drawn
    with replacement refills the rest, then every particle mutates. Returns the best loss seen
    (stops early once it is -1, the optimum of a negated Ehrlich function)."""
    particles = x0.clone().repeat(num_particles, 1)
    best = float("inf")
    for _ in range(steps):
        loss = closure(particles)
        best = min(best, loss[torch.argmin(loss)].item())
        if best == -1.0:
            break
        threshold = torch.quantile(loss, survival_quantile)
        if threshold < float("inf"):
            surviving = loss <= threshold
        else:
            surviving = torch.ones_like(loss, dtype=torch.bool)
        survivors = particles[surviving]
        missing = num_particles - survivors.shape[0]
        parent_1 = torch.randint(0, survivors.shape[0], (missing,), generator=generator)
        parent_2 = torch.randint(0, survivors.shape[0], (missing,), generator=generator)
        crossover = torch.rand(missing, x0.shape[-1], generator=generator) < recombine_prob
        particles[~surviving] = torch.where(crossover, survivors[parent_1], survivors[parent_2])
        mutate = torch.rand(particles.shape, generator=generator) < mutation_prob
        tokens = torch.randint(vocab_size, particles.shape, generator=generator).to(particles.dtype)
        particles = torch.where(mutate, tokens, particles)
    return best


# ------------------------------------------------------------------ holo-bench's tests
@pytest.mark.parametrize("num_motifs", [1, 4])
def test_chain_samples_score_in_unit_interval_uniform_ones_are_infeasible(num_motifs):
    """holo-bench ``test_ehrlich_single_motif`` / ``test_ehrlich_multi_motif``: Ehr(32,256)-c-8
    chains drawn with torch from the facade's own tables score in [0, 1]; uniform sequences
    are infeasible (-inf)."""
    f = Ehrlich(
        num_states=32, dim=256, num_motifs=num_motifs, motif_length=8, noise_std=0.0, random_seed=0
    )
    generator = torch.Generator().manual_seed(0)
    chains = _sample_chain(
        _stationary(f.transition_matrix).squeeze(), f.transition_matrix, f.dim, 4, generator
    )
    values = f.evaluate_true(chains)
    assert isinstance(values, torch.Tensor) and values.dtype == torch.float32
    assert values.shape == (4,)
    assert torch.all(values >= 0.0) and torch.all(values <= 1.0)

    uniform = torch.randint(0, 32, (4, 256), generator=generator)
    values = f.evaluate_true(uniform)
    assert torch.equal(values, torch.full((4,), -float("inf")))


def test_impossible_configurations_raise():
    """holo-bench ``test_invalid_ehrlich``: motifs that cannot fit in ``dim``."""
    with pytest.raises(ValueError):
        Ehrlich(num_states=32, dim=2, num_motifs=1, motif_length=8)
    with pytest.raises(ValueError):
        Ehrlich(num_states=32, dim=16, num_motifs=4, motif_length=8, random_seed=0)


def test_discrete_evolution_from_the_initial_solution_finds_the_optimum():
    """holo-bench ``test_ehrlich_optimization``: holo's optimizer, started from
    ``initial_solution().float()`` with float particles, reaches the optimum -1 of the negated
    Ehr(32,128)-1-4 (holo's settings; seeded here, holo's test uses the global RNG)."""
    f = Ehrlich(num_states=32, dim=128, num_motifs=1, motif_length=4, negate=True, random_seed=0)
    x0 = f.initial_solution().float()
    assert x0.shape == (128,) and f(x0[None]).item() > -1.0  # the optimum is still to be found
    best = _evolve(
        lambda particles: f(particles),
        x0,
        vocab_size=32,
        mutation_prob=1 / 128,
        recombine_prob=1 / 128,
        survival_quantile=0.01,
        num_particles=4096,
        steps=256,
        generator=torch.Generator().manual_seed(0),
    )
    assert best == -1.0


# ------------------------------------------------------------------ the torch contract
def test_attributes_have_holos_types_dtypes_and_shapes():
    """As pytorch-holo 0.0.5 (with BoTorch 0.18.1) builds them; values from the JAX instance."""
    v, length, c, k = 8, 16, 2, 4
    with pytest.warns(HoloSeedWarning):
        f = Ehrlich(num_states=v, dim=length, num_motifs=c, motif_length=k, random_seed=3)
    core = eh.make(
        jax.random.key(3), eh.EhrlichConfig(num_states=v, dim=length, num_motifs=c, motif_length=k)
    )

    assert f.transition_matrix.dtype == torch.float32 and f.transition_matrix.shape == (v, v)
    np.testing.assert_array_equal(f.transition_matrix.numpy(), np.asarray(core.transition_matrix))
    assert f.stationary_dist.dtype == torch.float32 and f.stationary_dist.shape == (v, 1)
    np.testing.assert_array_equal(f.stationary_dist.numpy()[:, 0], np.asarray(core.stationary_dist))
    assert f.initial_dist.dtype == torch.float32 and f.initial_dist.shape == (v,)
    assert torch.equal(f.initial_dist, torch.full((v,), 0.125))

    assert type(f.motifs) is tuple and len(f.motifs) == c
    assert all(m.dtype == torch.int64 and m.shape == (k,) for m in f.motifs)
    assert [m.tolist() for m in f.motifs] == np.asarray(core.motifs).tolist()
    assert type(f.spacings) is list
    assert all(s.dtype == torch.int64 and s.shape == (k - 1,) for s in f.spacings)
    assert [s.tolist() for s in f.spacings] == np.diff(np.asarray(core.offsets)).tolist()

    assert f.bounds.dtype == torch.float64 and f.bounds.shape == (2, length)
    assert f.bounds[0].tolist() == [0.0] * length and f.bounds[1].tolist() == [7.0] * length
    assert f.categorical_inds == list(range(length))
    assert f.continuous_inds == [] and f.discrete_inds == []
    assert (f.num_states, f.dim, f.num_objectives, f.noise_std, f.negate) == (
        v,
        length,
        1,
        0.0,
        False,
    )
    assert f.optimal_value == 1.0 and f._quantization is None and f._motif_length == k

    for solution, shape in [
        (f.initial_solution(), (length,)),
        (f.initial_solution(3), (3, length)),
        (f.random_solution(), (length,)),
        (f.random_solution(5), (5, length)),
        (f.optimal_solution(), (length,)),
    ]:
        assert isinstance(solution, torch.Tensor)
        assert solution.dtype == torch.int64 and solution.shape == shape
    assert torch.equal(f.initial_solution(3), f.initial_solution(3))  # holo resets the seed
    key = jax.random.key(3)
    np.testing.assert_array_equal(
        f.initial_solution(3).numpy(), np.asarray(eh.initial_solution(key, core, 3))
    )
    assert f.evaluate_true(f.optimal_solution()[None]).tolist() == [1.0]
    assert repr(f).startswith("Ehrlich(num_states=8, dim=16, num_motifs=2, motifs=[motif_0: ")


def test_values_are_holos_golden_values_for_int_and_float_tensors(fixtures_dir):
    """An exact holo instance wrapped with ``from_instance(from_holo(...))`` scores holo's
    recorded sequences bit for bit, given as int64, float32 or float64 tensors (holo's
    ``forward`` casts to float); ``forward`` negates; the optimum is holo's."""
    record = json.loads(
        (fixtures_dir / "holo_ehrlich" / "quirk_v32_L32_c4_k4_q3__seed0.json").read_text()
    )
    cfg = record["config"]
    fn = eh.from_holo(
        record["transition_matrix"],
        record["motifs"],
        record["spacings_holo"],
        quantization=cfg["quantization"],
        epistasis_factor=cfg["epistasis_factor"],
        dim=cfg["dim"],
    )
    expected = np.array(
        [-np.inf if v == "-inf" else v for v in record["tests"]["values"]], np.float32
    )
    assert np.isinf(expected).any() and (expected > 0).any() and (expected < 1).any()
    x = torch.tensor(record["tests"]["sequences"])
    assert x.dtype == torch.int64
    f = Ehrlich.from_instance(fn)
    g = Ehrlich.from_instance(fn, negate=True)
    for tokens in (x, x.float(), x.double()):
        values = f.evaluate_true(tokens)
        assert values.dtype == torch.float32
        np.testing.assert_array_equal(values.numpy().view(np.uint32), expected.view(np.uint32))
        np.testing.assert_array_equal(f(tokens).numpy(), expected)
        np.testing.assert_array_equal(g(tokens).numpy(), -expected)
    assert f.optimal_solution().tolist() == record["optimal_solution"]
    assert g.optimal_value == -1.0


def test_float_input_must_hold_exact_integers():
    f = Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3)
    x = torch.cat([f.initial_solution(6), f.optimal_solution()[None]])
    expected = f.evaluate_true(x)
    assert expected[-1] == 1.0
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert torch.equal(f.evaluate_true(x.to(dtype)), expected)
    assert torch.equal(f(x.numpy().astype(np.float32)), expected)  # NumPy floats too

    for bad, match in [(0.5, "exact integer, got 0.5"), (float("nan"), "got nan")]:
        y = x.double()
        y[2, 5] = bad
        with pytest.raises(ValueError, match=match):
            f(y)
    y = x.double()
    y[0, 0] = 1e30
    with pytest.raises(ValueError, match="outside"):
        f.evaluate_true(y)
    with pytest.raises(ValueError, match="outside"):
        f.evaluate_true(x.double() + 8.0)  # integral but not a state
    with pytest.raises(ValueError, match="shape"):
        f.evaluate_true(x[:, :-1].float())


def test_values_equal_the_jax_evaluator_and_follow_the_input_device():
    """The facade's values are the JAX evaluator's, bit for bit (feasible and infeasible
    rows), whatever the input container; results go where a tensor input lives."""
    f = Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3)
    x = torch.cat([f.initial_solution(40), f.random_solution(24), f.optimal_solution()[None]])
    core = np.asarray(eh.evaluate(f.fn, x.numpy()))
    assert np.isinf(core).any() and np.isfinite(core).any()
    np.testing.assert_array_equal(f.evaluate_true(x).numpy().view(np.uint32), core.view(np.uint32))
    np.testing.assert_array_equal(f.evaluate_true(x.numpy()).numpy(), core)  # NumPy in: torch out
    assert f.evaluate_true(x).device == x.device
    assert torch.equal(f.forward(x, noise=False), f.evaluate_true(x))
    noisy = Ehrlich.from_instance(f.fn, noise_std=0.1)(x[:40])
    finite = torch.tensor(core[:40])
    assert noisy.dtype == torch.float32 and not torch.equal(noisy, finite)
    assert torch.allclose(noisy, finite, atol=0.5)


def test_to_converts_the_tables_like_holo_and_keeps_values():
    f = Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3)
    x = f.initial_solution(5)
    before = f.evaluate_true(x)
    matrix = f.transition_matrix.clone()
    assert f.to("cpu", torch.float64) is f
    assert f.transition_matrix.dtype == torch.float64
    assert torch.equal(f.transition_matrix, matrix.double())
    assert f.stationary_dist.dtype == torch.float64 and f.stationary_dist.shape == (8, 1)
    assert f.initial_dist.dtype == torch.float64
    assert type(f.motifs) is list and all(m.dtype == torch.int64 for m in f.motifs)  # as holo
    assert f.bounds.dtype == torch.float64
    assert torch.equal(f.evaluate_true(x), before) and f.evaluate_true(x).dtype == torch.float32
    assert f.initial_solution().dtype == torch.int64


# ------------------------------------------------------------------ without torch
def test_numpy_backend_when_torch_is_not_importable(monkeypatch):
    """With torch undetectable the facade keeps its NumPy interface (int32 solutions,
    ``stationary_dist`` ``[v]``) and computes the same values as the torch backend."""
    torch_facade = Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3)
    monkeypatch.setattr(holo_facade, "_find_torch", lambda: None)
    f = Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3)
    with pytest.raises(ValueError, match="needs torch"):
        Ehrlich(num_states=8, dim=16, num_motifs=2, motif_length=4, backend="torch")

    assert isinstance(f.transition_matrix, np.ndarray) and f.transition_matrix.dtype == np.float32
    assert f.stationary_dist.shape == (8,) and f.initial_dist.dtype == np.float32
    assert isinstance(f.motifs, list) and f.motifs[0].dtype == np.int32
    assert isinstance(f.bounds, np.ndarray) and f.bounds.shape == (2, 16)
    assert f.categorical_inds == list(range(16))
    x = f.initial_solution(6)
    assert isinstance(x, np.ndarray) and x.dtype == np.int32 and x.shape == (6, 16)
    assert f.optimal_solution().dtype == np.int32 and f.initial_solution().shape == (16,)
    np.testing.assert_array_equal(x, torch_facade.initial_solution(6).numpy())

    values = f.evaluate_true(x)
    assert isinstance(values, np.ndarray) and values.dtype == np.float32
    np.testing.assert_array_equal(values, torch_facade.evaluate_true(torch.tensor(x)).numpy())
    np.testing.assert_array_equal(f(x.astype(np.float64)), values)  # integral floats accepted
    with pytest.raises(ValueError, match="exact integer"):
        f(x + 0.25)
    assert isinstance(f.evaluate_true(torch.tensor(x)), torch.Tensor)  # a tensor in: one out
    assert f.to("cpu", np.float64) is f and f.transition_matrix.dtype == np.float64
    with pytest.raises(ValueError, match="CPU"):
        f.to("cuda")
