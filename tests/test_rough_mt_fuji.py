"""Rough Mt. Fuji against pytorch-holo 0.0.5's values, bit for bit, and under every optimizer.

``tests/fixtures/rough_mt_fuji_holo.json`` (``scripts/make_rough_mt_fuji_fixtures.py``, run with
holo and torch 2.14.1 on an AVX512 CPU; the float32 sums agree under torch's AVX2 and default
dispatch too) holds five holo instances (the shipped ``RMF(256)``, ``dim`` 2, 7 (the scalar
path of torch's sum), 33 with ``additive_term=0.1`` (``-a d`` inexact in float32) and 520 (the
cascade's carries)), each with test sequences and holo's float32 ``evaluate_true`` and
``forward(negate=True)``. No torch is needed.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax import rough_mt_fuji as rmf
from llome_jax.cli import main
from llome_jax.compat.holo import HoloSeedWarning, RoughMtFuji
from llome_jax.objective import rmf_objective

FIXTURE = pathlib.Path(__file__).with_name("fixtures") / "rough_mt_fuji_holo.json"
INSTANCES = json.loads(FIXTURE.read_text())["instances"]


def _bits(text: str) -> np.ndarray:
    return np.asarray([int(b) for b in text], np.int32)


def _instance(record: dict) -> rmf.RoughMtFuji:
    return rmf.from_holo(
        _bits(record["centroid"]),
        np.asarray(record["random_term"], np.float32),
        record["additive_term"],
        record["random_term_std"],
    )


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.all(a.view(np.uint32) == b.view(np.uint32)))


@pytest.mark.parametrize("record", INSTANCES, ids=lambda r: f"dim{r['dim']}_a{r['additive_term']}")
def test_values_are_holos_bit_for_bit(record):
    fn = _instance(record)
    x = np.stack([_bits(s) for s in record["sequences"]])
    values = rmf.evaluate(fn, x)
    assert values.dtype == jnp.float32
    assert _same_bits(values, record["evaluate_true"])
    assert _same_bits(-np.asarray(values), record["forward_negated"])
    assert "".join(map(str, np.asarray(rmf.optimal_solution(fn)))) == record["optimal_solution"]
    assert rmf.optimal_value(fn) == record["optimal_value"]
    # the optimum is the largest value and the minimiser the smallest of every test sequence
    assert rmf.worst_value(fn) <= float(np.min(values)) <= float(np.max(values))
    assert float(np.max(values)) <= rmf.optimal_value(fn)


def test_the_shipped_reference_is_the_fixtures_holo_instance():
    (record,) = [r for r in INSTANCES if r["dim"] == 256]
    fn = rmf.reference_function()
    assert fn.config == rmf.RMFConfig(256) and fn.name == "RMF(256)"
    np.testing.assert_array_equal(np.asarray(fn.centroid), _bits(record["centroid"]))
    assert _same_bits(fn.random_term, record["random_term"])
    # holo-bench's start: torch.manual_seed(0), then a global randint: the centroid's own bits
    x0 = rmf.resolve_initial_solution("RMF(256)")
    np.testing.assert_array_equal(x0, _bits(record["initial_solution"]))
    np.testing.assert_array_equal(x0, np.asarray(fn.centroid))


def test_torch_sum_adds_in_torchs_order():
    # 16 = two 8-lane vectors: the lanes are v0 + v8, ..., then added left to right: lane 0 is
    # 2**24 - 2**24 = 0 and lanes 1-7 are 1 + 1 = 2, so 14 (a left-to-right sum loses each 1
    # added to 2**24 and gives 7)
    p = np.ones(16, np.float32)
    p[0], p[8] = 2.0**24, -(2.0**24)
    assert float(rmf.torch_sum(jnp.asarray(p))) == 14.0
    # 4 < 8 elements: the scalar path, ((p0 + p1) + p2) + p3
    q = np.asarray([2.0**24, 1.0, 1.0, -(2.0**24)], np.float32)
    assert float(rmf.torch_sum(jnp.asarray(q))) == 0.0


def test_batches_traces_and_bad_input():
    fn = rmf.reference_function()
    x = np.asarray(jax.random.randint(jax.random.key(0), (2, 3, 256), 0, 2), np.int32)
    flat = np.asarray(rmf.evaluate(fn, x.reshape(6, 256)))
    assert np.asarray(rmf.evaluate(fn, x)).shape == (2, 3)
    assert _same_bits(np.asarray(rmf.evaluate(fn, x)).reshape(6), flat)
    assert _same_bits(jax.jit(lambda y: rmf.evaluate(fn, y))(x.reshape(6, 256)), flat)
    assert _same_bits(jax.vmap(lambda y: rmf.evaluate(fn, y))(x.reshape(6, 256)), flat)
    assert _same_bits(rmf.evaluate(fn, x[0, 0]), flat[:1].reshape(()))
    with pytest.raises(ValueError, match="integer token ids"):
        rmf.evaluate(fn, x.astype(np.float32))
    with pytest.raises(ValueError, match=r"shape \[\.\.\., 256\]"):
        rmf.evaluate(fn, x[..., :10])
    with pytest.raises(ValueError, match="token 2 outside"):
        rmf.evaluate(fn, x + 1)


def test_names_seeds_and_errors():
    assert rmf.RMFConfig.from_name(" rmf( 64 ) ") == rmf.RMFConfig(64)
    assert rmf.RMFConfig.from_name("RMF(33,0.1,0.7)").name == "RMF(33,0.1,0.7)"
    assert rmf.resolve_function("rmf") is rmf.reference_function()
    sampled = rmf.resolve_function("RMF(256)", 0)  # JAX's instance, not holo's
    assert not np.array_equal(
        np.asarray(sampled.random_term), np.asarray(rmf.reference_function().random_term)
    )
    again = rmf.make(jax.random.key(0), rmf.RMFConfig(256))
    assert _same_bits(again.random_term, sampled.random_term)
    with pytest.raises(ValueError, match=r"not a shipped Rough Mt\. Fuji instance"):
        rmf.resolve_function("RMF(64)")
    with pytest.raises(ValueError, match="expected 'RMF\\(L\\)'"):
        rmf.resolve_function("RMF(64")
    with pytest.raises(ValueError, match="finite and >= 0"):
        rmf.RMFConfig.from_name("RMF(8,-1,1)")
    with pytest.raises(ValueError, match="outside"):
        rmf.resolve_function("RMF(8)", -1)


def test_the_objective_declares_its_regret_range():
    objective = rmf_objective("RMF(256)")
    assert (objective.num_states, objective.length, objective.traceable) == (2, 256, True)
    assert objective.optimal_value == INSTANCES[0]["optimal_value"] == 90.46662902832031
    # worst value: per position the smaller contribution, summed by hand in float64
    r = np.asarray(rmf.reference_function().random_term, np.float64)
    c = np.asarray(rmf.reference_function().centroid)
    by_hand = np.where(c == 1, np.minimum(r, -0.25), np.minimum(r - 0.25, 0.0)).sum()
    assert objective.worst_value == pytest.approx(by_hand, abs=1e-3)
    assert objective.validate() == pytest.approx(90.46662902832031 - 88.1914, abs=1e-3)


def test_compat_facade_is_a_drop_in():
    (record,) = [r for r in INSTANCES if r["dim"] == 256]
    holo = RoughMtFuji(dim=256, negate=True, backend="numpy")
    x = np.stack([_bits(s) for s in record["sequences"]])
    assert _same_bits(holo(x.astype(np.float32)), record["forward_negated"])
    assert _same_bits(holo.evaluate_true(x), record["evaluate_true"])
    assert holo.optimal_value == -record["optimal_value"]
    assert holo.optimal_solution().shape == (1, 256)
    assert holo.bounds.shape == (2, 256) and holo.centroids.shape == (1, 256)
    with pytest.raises(ValueError, match="integral"):
        holo(np.full((1, 256), 0.5))


def test_compat_facade_draws_holos_instance_with_torch():
    torch = pytest.importorskip("torch")
    (record,) = [r for r in INSTANCES if r["dim"] == 33]
    holo = RoughMtFuji(dim=33, additive_term=0.1, random_term_std=0.7, random_seed=1, negate=True)
    assert isinstance(holo.centroids, torch.Tensor)
    assert "".join(map(str, holo.centroids[0].tolist())) == record["centroid"]
    x = torch.tensor(np.stack([_bits(s) for s in record["sequences"]])).float()
    assert _same_bits(holo(x).numpy(), record["forward_negated"])


def test_compat_facade_without_torch_says_the_instance_is_not_holos(monkeypatch):
    import llome_jax.compat.holo as compat

    monkeypatch.setattr(compat, "_find_torch", lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        holo = RoughMtFuji(dim=33, random_seed=1, backend="numpy")
    assert any(issubclass(w.category, HoloSeedWarning) for w in caught)
    assert holo.evaluate_true(np.zeros((1, 33), np.int32)).dtype == np.float32


def test_the_ga_round_mode_runs_and_refuses_an_unshipped_name(tmp_path, capsys):
    out = tmp_path / "ga"
    flags = ["--particles", "40", "--initial-generations", "2", "--labels-per-round", "60"]
    args = ["ga", "--rounds", "1", "--function", "RMF(16)", "--instance-seed", "3", *flags]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["function"] == "RMF(16)" and config["function_digest"].startswith("sha256:")
    record = json.loads((out / "rounds.jsonl").read_text().splitlines()[-1])
    assert record["min_regret"] >= 0 and record["num_evaluations"] >= 60
    # compare reads it, with an automatic y range (the regret is in the function's units)
    assert (
        main(["compare", str(out), "--metric", "cumulative-regret", "--out", str(out / "c")]) == 0
    )
    assert "cumulative regret on RMF(16) (instance seed 3)" in capsys.readouterr().out
    assert main(["ga", "--rounds", "1", "--function", "RMF(16)", "--out", str(tmp_path / "x")]) == 2
    assert "pass --instance-seed" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["llome", "lambo2"])
def test_llome_and_lambo2_smoke_runs(command, tmp_path):
    """The smoke presets on ``RMF(12)`` (instance seed 1): one round each (about 60 s and 20 s on 2
    cores)."""
    out = tmp_path / command
    args = [command, "--preset", "smoke", "--function", "RMF(12)", "--instance-seed", "1"]
    assert main([*args, "--rounds", "1", "--out", str(out), "--quiet"]) == 0
    records = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1]
    assert json.loads((out / "config.json").read_text())["function"] == "RMF(12)"
    # every label is RMF(12)'s own value of its sequence, and the records' regret is f* - f
    from llome_jax.run.rundir import RunDirectory

    rounds, x, y = RunDirectory(out).evaluated()
    fn = rmf.resolve_function("RMF(12)", 1)
    assert (rounds == 1).any()
    np.testing.assert_array_equal(y, np.asarray(rmf.evaluate(fn, x), np.float64))
    best = y[rounds <= 1].max()
    assert records[1]["min_regret"] == pytest.approx(rmf.optimal_value(fn) - best)


def test_the_ehrlich_only_commands_refuse_an_rmf_name(tmp_path, capsys):
    # the GA's many-seeds mode reads regret as 1 - f and `ehrlich` describes Ehrlich instances:
    # both refuse in one line (exit 2) and write nothing
    out = tmp_path / "many"
    assert main(["ga", "--function", "RMF(256)", "--seeds", "2", "--out", str(out)]) == 2
    assert not out.exists()
    assert "pass --rounds" in capsys.readouterr().err
    assert main(["ehrlich", "describe", "RMF(256)"]) == 2
    assert "a Rough Mt. Fuji function, not an Ehrlich one" in capsys.readouterr().err
