"""The information contract (``llome_jax.oracle``): every optimizer learns values only through
labels it pays for, pays once per sequence, and counts every constraint query.

The end-to-end tests run the GA, LLOME and LaMBO-2 on a host objective (an Ehrlich instance
behind NumPy, so JAX cannot trace it) whose ``evaluate`` and ``is_feasible`` record every row
they are asked about, and compare the run directories with those records.
"""

from __future__ import annotations

import csv
import json
import pathlib
from typing import Any

import jax
import numpy as np
import pytest

from llome_jax import Objective, ehrlich, ga
from llome_jax.ga import loop as ga_loop
from llome_jax.ga.optimizer import GARunConfig
from llome_jax.ga.optimizer import run as ga_run
from llome_jax.lambo2 import optimizer as lambo2
from llome_jax.llome import loop, presets
from llome_jax.optimizers.contract import Recorder, recording_objective
from llome_jax.oracle import Oracle


def _host_objective(name: str = "Ehr(8,8)-2-2-2", seed: int = 1) -> tuple[Objective, Any, Any]:
    """An Ehrlich function on the host whose evaluate and is_feasible record every row
    (``llome_jax.optimizers.contract.recording_objective``, the registry's checks' own)."""
    return recording_objective(name, seed)


def _evaluated(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with open(path / "evaluated.csv", newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    rounds = np.asarray([int(r[0]) for r in rows], np.int64)
    x = np.asarray([[int(t) for t in r[1].split(",")] for r in rows], np.int32)
    return rounds, x, np.asarray([float(r[2]) for r in rows])


def _records(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------------------
# The oracle on hand-made data
# ---------------------------------------------------------------------------------------------
def _toy(calls: list, feasible_calls: list) -> Objective:
    def evaluate(x):
        calls.append(np.asarray(x).copy())
        x = np.asarray(x)
        return np.where(x[:, 0] == 0, -np.inf, x.sum(1)).astype(np.float32)

    def is_feasible(x):
        feasible_calls.append(np.asarray(x).copy())
        return np.asarray(x)[:, 0] != 0

    return Objective("toy", 4, 3, evaluate, is_feasible=is_feasible, initial_solution=[1, 1, 1])


def test_label_pays_each_distinct_unknown_sequence_once() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls))
    x = np.asarray([[1, 2, 3], [1, 2, 3], [0, 1, 1], [1, 1, 1]])  # a repeat, an infeasible, x0
    result = oracle.label(x)
    np.testing.assert_array_equal(result.values, [6, 6, -np.inf, 3])
    np.testing.assert_array_equal(result.paid, [True, False, True, False])  # x0 is public
    assert oracle.num_paid == 2 and result.num_paid == 2
    # the black box saw x0 once (its public value) and the two new rows once
    assert [c.tolist() for c in calls] == [[[1, 1, 1]], [[1, 2, 3], [0, 1, 1]]]
    again = oracle.label(np.asarray([[0, 1, 1], [3, 3, 3]]))
    np.testing.assert_array_equal(again.paid, [False, True])
    assert oracle.num_paid == 3 and calls[-1].tolist() == [[3, 3, 3]]
    px, pv = oracle.take_paid(3)
    assert px.tolist() == [[1, 2, 3], [0, 1, 1], [3, 3, 3]] and pv.tolist() == [6, -np.inf, 9]
    assert oracle.take_paid(3)[0].shape == (0, 3)
    assert feasible_calls == []


def test_every_evaluation_pays_repeats_as_the_paper_counts() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls), accounting="every_evaluation")
    result = oracle.label(np.asarray([[1, 2, 3], [1, 2, 3], [1, 1, 1]]))
    assert oracle.num_paid == 3 and result.paid.all()
    assert calls[-1].shape == (3, 3)  # every row goes to the black box
    oracle.record_labels(np.asarray([[2, 2, 2]]), np.asarray([6.0]), num_paid=10)
    assert oracle.num_paid == 13


def test_constraint_queries_off_answers_from_labels_only() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls))
    oracle.label(np.asarray([[0, 2, 2], [2, 2, 2]]))
    x = np.asarray([[0, 2, 2], [2, 2, 2], [0, 3, 3]])  # labelled infeasible, feasible, unknown
    np.testing.assert_array_equal(oracle.feasibility(x), [False, True, True])
    assert feasible_calls == [] and oracle.num_constraint_queries == 0


def test_constraint_queries_free_asks_about_unlabelled_rows_once_and_counts_them() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls), constraint_queries="free")
    oracle.label(np.asarray([[2, 2, 2]]))
    x = np.asarray([[2, 2, 2], [0, 3, 3], [0, 3, 3], [3, 1, 1]])
    np.testing.assert_array_equal(oracle.feasibility(x), [True, False, False, True])
    assert [c.tolist() for c in feasible_calls] == [[[0, 3, 3], [3, 1, 1]]]
    assert oracle.num_constraint_queries == 2
    oracle.feasibility(x)  # answers are kept: not asked again
    assert len(feasible_calls) == 1 and oracle.num_constraint_queries == 2


def test_the_gate_check_is_counted_whatever_the_setting() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls))  # constraint_queries="off"
    view = oracle.constraint_view()
    assert view.ehrlich is None
    np.testing.assert_array_equal(view.feasible(np.asarray([[0, 1, 2], [1, 1, 2]])), [0, 1])
    assert oracle.num_constraint_queries == 2 and len(feasible_calls) == 1
    candidate_view = oracle.candidate_view()  # off: asks nothing
    np.testing.assert_array_equal(candidate_view.feasible(np.asarray([[0, 3, 3]])), [True])
    assert oracle.num_constraint_queries == 2 and len(feasible_calls) == 1


def test_restore_keeps_labels_and_counters() -> None:
    calls, feasible_calls = [], []
    oracle = Oracle(_toy(calls, feasible_calls))
    oracle.restore([[1, 2, 3]], [6.0], num_paid=41, num_constraint_queries=5)
    result = oracle.label(np.asarray([[1, 2, 3], [2, 2, 2]]))
    np.testing.assert_array_equal(result.paid, [False, True])
    assert oracle.num_paid == 42 and oracle.num_constraint_queries == 5


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="accounting must be one of"):
        Oracle(_toy([], []), accounting="paper")
    with pytest.raises(ValueError, match="constraint_queries must be one of"):
        GARunConfig(constraint_queries="yes")


# ---------------------------------------------------------------------------------------------
# Every optimizer, end to end, on a recording host objective
# ---------------------------------------------------------------------------------------------
def _check_paid_once(path: pathlib.Path, evaluate: Recorder, x0: np.ndarray) -> None:
    """evaluated.csv has no sequence twice; num_evaluations counts its rows; the black box was
    asked about each of them once, plus the public start sequence."""
    rounds, x, _ = _evaluated(path)
    records = _records(path)
    assert len(np.unique(x, axis=0)) == len(x) > 0
    assert [r["num_evaluations"] for r in records] == [
        int(np.sum(rounds <= r["round"])) for r in records
    ]
    asked = [row for row in evaluate.rows if row != tuple(x0.tolist())]
    assert sorted(asked) == sorted(map(tuple, x.tolist()))


GA_CFG = GARunConfig(
    function="Ehr(8,8)-2-2-2",
    instance_seed=1,
    seed=3,
    rounds=2,
    round0_generations=3,
    generations_per_round=1,
    round0_ga=ga.GAConfig(num_particles=32, mutation_prob=0.05),
)
LLOME_CFG = presets.preset("smoke", rounds=2, model_overrides=(("num_hidden_layers", 2),))
LAMBO_CFG = lambo2.preset(
    "smoke",
    rounds=2,
    labels_per_round=16,
    round0_ga={"num_particles": 32},
    model_overrides=(("ensemble_size", 1), ("num_blocks", 1)),
    **{"train.epochs": 1, "design.num_steps": 1, "design.guidance_updates": 1},
)


def _run(kind: str, out: pathlib.Path, objective: Objective, **overrides) -> None:
    if kind == "ga":
        ga_run(GA_CFG.replace(**overrides), out, objective=objective, progress=False)
    elif kind == "llome":
        loop.run(LLOME_CFG.replace(**overrides), out, objective=objective, progress=False)
    else:
        lambo2.run(LAMBO_CFG.replace(**overrides), out, objective=objective, progress=False)


# Each label paid once and no constraint query under the defaults, for every registered
# optimizer: tests/test_registry_contract.py (llome_jax.optimizers.contract.check_pays_once).


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llome", "lambo2"])
def test_free_constraint_queries_are_counted_exactly(kind: str, tmp_path: pathlib.Path) -> None:
    objective, _, is_feasible = _host_objective()
    _run(kind, tmp_path / kind, objective, constraint_queries="free")
    start = tuple(objective.x0.tolist())
    is_feasible.rows = [row for row in is_feasible.rows if row != start]  # construction's check
    records = _records(tmp_path / kind)
    per_round = [r["num_constraint_queries"] for r in records]
    assert sum(per_round) == records[-1]["cum_constraint_queries"] == len(is_feasible.rows) > 0
    # each distinct sequence is asked about once, and never one that was labelled before
    assert len(set(is_feasible.rows)) == len(is_feasible.rows)
    _, x, _ = _evaluated(tmp_path / kind)
    rounds, _, _ = _evaluated(tmp_path / kind)
    round0 = set(map(tuple, x[rounds == 0].tolist()))
    assert not round0 & set(is_feasible.rows)


@pytest.mark.slow
def test_the_checkpoint_gate_check_is_counted_under_the_defaults(tmp_path: pathlib.Path) -> None:
    objective, _, is_feasible = _host_objective()
    gated = {  # the paper preset's gate (MargE rounds), on the smoke model
        "schedule": (("marge", 1),),
        "finetune.select_checkpoint": True,
        "finetune.selection_num_prompts": 8,
    }
    _run("llome", tmp_path / "gate", objective, **gated)
    start = tuple(objective.x0.tolist())
    is_feasible.rows = [row for row in is_feasible.rows if row != start]  # construction's check
    records = _records(tmp_path / "gate")
    assert records[-1]["cum_constraint_queries"] == len(set(is_feasible.rows)) > 0
    assert sum(r["num_constraint_queries"] for r in records) == len(is_feasible.rows)
    assert [r.get("gate_feasible") is not None for r in records[1:]] == [True, True]


def test_a_round0_ga_label_is_paid_once_for_llome_and_lambo2_alike() -> None:
    """Round 0 of LLOME and LaMBO-2 pays the GA archive's distinct sequences (f2: hand-checked
    against the archive, the start sequence excluded)."""
    fn = ehrlich.paper_function("f2")
    x0 = ehrlich.resolve_initial_solution("f2", None)
    oracle = Oracle(Objective.from_ehrlich(fn, x0))
    cfg = ga.GAConfig(num_particles=100)
    archive = ga_loop.run_archive(jax.random.key(0), fn, x0, 3, cfg)
    x, v, _ = archive.to_numpy()
    new = oracle.record_labels(x, v, num_paid=300)
    expected = len(x) - int((x == x0).all(axis=1).any())
    assert oracle.num_paid == int(new.sum()) == expected < 300


@pytest.mark.parametrize("name", ["smoke", "cpu", "paper"])
def test_every_preset_runs_under_the_contract_by_default(name: str) -> None:
    """No preset turns the free constraint check on or pays a label twice: the defaults are
    the contract's for LLOME, LaMBO-2 and the GA (a preset that changed them would be a bug)."""
    llome = presets.preset(name)
    lambo = lambo2.preset(name)
    for cfg in (llome, lambo, GARunConfig()):
        assert (cfg.accounting, cfg.constraint_queries) == ("pay_once", "off")
    # the paper preset's gate is the one constraint check the defaults make (counted, tested
    # above); the smoke and cpu presets have none
    assert llome.finetune.select_checkpoint is (name == "paper")
