"""``llome_jax.compat.poli``: an Ehrlich function as a poli-style black box and back, the text
bridge for numpy<2 environments (``llome-jax ehrlich evaluate --alphabet``)."""

from __future__ import annotations

import csv
import io
import pathlib
import string

import jax
import numpy as np
import pytest

from llome_jax import Objective, cli, ehrlich, ga
from llome_jax.compat.poli import (
    AMINO_ACIDS,
    BudgetExhaustedException,
    EhrlichBlackBox,
    decode,
    encode,
    objective_from_black_box,
)
from llome_jax.ga import loop as ga_loop
from llome_jax.ga import optimizer as ga_optimizer
from llome_jax.run import rundir

SPEC, SEED = "Ehr(4,8)-1-2-2", 0
LETTERS = "ARND"  # states 0..3 (the first four of poli's amino acids)


@pytest.fixture(scope="module")
def fn():
    return ehrlich.resolve_function(SPEC, SEED)


def _sequences(fn, n: int = 48) -> np.ndarray:
    """Random sequences plus the optimum: feasible and infeasible ones, values 0, 0.5 and 1."""
    x = np.random.default_rng(1).integers(0, 4, (n, 8))
    return np.concatenate([x, np.asarray(ehrlich.optimal_solution(fn))[None]]).astype(np.int32)


def test_black_box_round_trip_equals_ehrlich_evaluate(fn) -> None:
    black_box = EhrlichBlackBox(fn)
    assert black_box.info.alphabet == list(LETTERS) == list(AMINO_ACIDS[:4])
    assert black_box.info.get_max_sequence_length() == 8 and black_box.info.name == "ehrlich_holo"
    x = _sequences(fn)
    expected = np.asarray(ehrlich.evaluate(fn, x))
    assert np.isneginf(expected).any() and {0.5, 1.0} <= set(expected[np.isfinite(expected)])
    # poli's call: [b, L] single characters in, [b, 1] floats out
    strings = np.array([[LETTERS[s] for s in row] for row in x])
    y = black_box(strings)
    assert y.shape == (len(x), 1) and y.dtype == np.float64
    np.testing.assert_array_equal(y[:, 0], expected)
    # black box -> objective: the same values on the integer states
    objective = objective_from_black_box(black_box)
    assert isinstance(objective, Objective) and not objective.traceable
    assert (objective.num_states, objective.length) == (4, 8)
    np.testing.assert_array_equal(objective(x), expected)
    assert black_box.num_evaluations == 2 * len(x)
    # the start sequence comes from the black box (poli's initial_solution()), as states
    np.testing.assert_array_equal(objective.x0, black_box.objective.x0)
    # strings given as [b] whole strings work as well
    np.testing.assert_array_equal(
        black_box(np.array(["".join(r) for r in strings]))[:, 0], expected
    )


def test_budget_and_observer(fn) -> None:
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Observer:  # poli's AbstractObserver surface
        def observe(self, x, y, context=None):
            seen.append((x, y))

    black_box = EhrlichBlackBox(fn, LETTERS, evaluation_budget=10, batch_size=4)
    black_box.set_observer(Observer())
    x = decode(_sequences(fn)[:6], LETTERS)
    y = black_box(x)
    assert black_box.num_evaluations == 6
    # one observation per batch of at most 4: rows 0-3 and 4-5, with their values
    assert [o[0].shape for o in seen] == [(4, 8), (2, 8)]
    np.testing.assert_array_equal(np.concatenate([o[0] for o in seen]), x)
    np.testing.assert_array_equal(np.concatenate([o[1] for o in seen]), y)
    with pytest.raises(BudgetExhaustedException, match="budget of 10"):
        black_box(x)  # 6 + 6 > 10: nothing is evaluated or counted
    assert black_box.num_evaluations == 6 and len(seen) == 2
    pairs: list[tuple] = []
    black_box.set_observer(lambda x, y: pairs.append((x, y)))  # a plain callable
    black_box(x[:4])
    assert black_box.num_evaluations == 10 and len(pairs) == 1
    black_box.reset_evaluation_budget()
    assert black_box.num_evaluations == 0


def test_every_label_of_an_optimizer_is_one_black_box_call(fn, tmp_path: pathlib.Path) -> None:
    """The GA on a black box: it asks the black box about each sequence once (the paper's
    accounting: n sequences per generation)."""
    black_box = EhrlichBlackBox(fn)
    objective = objective_from_black_box(black_box, optimal_value=1.0, worst_value=0.0)
    cfg = ga_optimizer.GARunConfig().replace(
        rounds=1, round0_generations=2, generations_per_round=1, round0_ga={"num_particles": 32}
    )
    result = ga_optimizer.run(cfg, tmp_path / "ga", objective=objective, progress=False)
    rounds, x, y = rundir.RunDirectory(result.path).evaluated()
    # 1 check of x0 + f(x0) (the public start) + one call per paid label, each sequence once
    assert black_box.num_evaluations == 1 + 1 + len(x) and len(np.unique(x, axis=0)) == len(x)
    assert len(x) == rundir.RunDirectory(result.path).rounds()[-1]["num_evaluations"]
    paper_box = EhrlichBlackBox(fn)
    paper = objective_from_black_box(paper_box, optimal_value=1.0, worst_value=0.0)
    ga_optimizer.run(
        cfg.replace(accounting="every_evaluation"),
        tmp_path / "paper",
        objective=paper,
        progress=False,
    )
    # 1 check of x0 + f(x0) at the GA start + 32 per generation (2 + 1 generations)
    assert paper_box.num_evaluations == 1 + 1 + 3 * 32
    np.testing.assert_array_equal(y, np.asarray(ehrlich.evaluate(fn, x), np.float64))
    # and the run equals the GA on the Ehrlich function itself (same keys, same values)
    direct = ga_optimizer.run(
        cfg.replace(function=SPEC, instance_seed=SEED), tmp_path / "direct", progress=False
    )
    assert (
        objective.x0.tolist() == np.asarray(ehrlich.resolve_initial_solution(SPEC, SEED)).tolist()
    )
    for a, b in zip(rundir.RunDirectory(direct.path).evaluated(), (rounds, x, y), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_plain_poli_style_callable_as_objective() -> None:
    calls: list[np.ndarray] = []

    def count_c(x: np.ndarray) -> np.ndarray:  # poli style: strings [b, L] -> ints [b, 1]
        calls.append(x)
        return (x == "C").sum(axis=1, keepdims=True)

    objective = objective_from_black_box(
        count_c, "ABC", length=4, name="count-c", initial_solution="ABCA", optimal_value=4.0
    )
    np.testing.assert_array_equal(objective.x0, [0, 1, 2, 0])
    np.testing.assert_array_equal(objective(np.array([[2, 2, 2, 2], [0, 1, 2, 0]])), [4.0, 1.0])
    assert calls[-1].tolist() == [list("CCCC"), list("ABCA")]
    with pytest.raises(ValueError, match="pass length=L"):
        objective_from_black_box(count_c, "ABC")
    with pytest.raises(ValueError, match="'Z' is not in the alphabet 'ABC'"):
        encode(np.array([["A", "Z"]]), "ABC")
    with pytest.raises(ValueError, match="repeats a character"):
        objective_from_black_box(count_c, "ABA", length=4)


def test_text_bridge_for_numpy1_environments(
    fn, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``llome-jax ehrlich evaluate SPEC --alphabet LETTERS --input - --output -``: the values
    are those of the black box (what a poli user in a numpy<2 environment calls through a
    subprocess, llome_jax.compat.poli's docstring)."""
    x = _sequences(fn)
    alphabet = string.ascii_letters[:4]
    lines = "".join("".join(alphabet[s] for s in row) + "\n" for row in x)
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    argv = ["ehrlich", "evaluate", SPEC, "--instance-seed", str(SEED), "--alphabet", alphabet]
    assert cli.main([*argv, "--input", "-", "--output", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["sequence"] for r in rows] == lines.split()
    values = np.array([float(r["value"]) for r in rows])
    black_box = EhrlichBlackBox(fn, alphabet)
    np.testing.assert_array_equal(values, black_box(np.array(lines.split()))[:, 0])
    # a character outside the alphabet: one clear error, exit code 2
    monkeypatch.setattr("sys.stdin", io.StringIO("abcZabcd\n"))
    assert cli.main([*argv, "--input", "-"]) == 2
    assert "not a string of the --alphabet 'abcd'" in capsys.readouterr().err
    # without --alphabet the command reads comma-separated states, as before
    monkeypatch.setattr("sys.stdin", io.StringIO(",".join(map(str, x[-1])) + "\n"))
    assert cli.main(["ehrlich", "evaluate", SPEC, "--instance-seed", "0", "--input", "-"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(",1.0")


def test_black_box_of_a_custom_objective_and_the_ga_on_it() -> None:
    objective = Objective(
        "threes", 4, 8, lambda x: (x == 3).sum(1).astype(np.float32), initial_solution=[0] * 8
    )
    black_box = EhrlichBlackBox(objective, "wxyz")
    assert black_box.info.name == "threes"
    np.testing.assert_array_equal(black_box(np.array(["zzzzwwww"]))[:, 0], [4.0])
    back = objective_from_black_box(black_box)
    assert back.name == "threes" and back.x0.tolist() == [0] * 8
    config = ga.GAConfig(num_particles=8, survival_quantile=0.3)
    ga_loop.run(jax.random.key(0), back, back.x0, 2, config)
    assert black_box.num_evaluations == 1 + 1 + 2 * 8  # the call above, f(x0), 2 generations
