"""The information contract as checks any registered optimizer can be put through.

``tests/test_registry_contract.py`` runs every check on every name of the registry
(:func:`llome_jax.optimizers.names`), so a newly registered optimizer is held to the contract
with no test edited; a researcher can run them on their own optimizer the same way::

    from llome_jax.optimizers import contract
    contract.check_all("my_package.hill:HillClimber", tmp_dir)

Each check runs the optimizer's ``test_config()`` (a few seconds) and raises ``AssertionError``
naming what broke:

* :func:`check_pays_once`: on a recording host objective, every label is paid once (no sequence
  twice in ``evaluated.csv``, ``num_evaluations`` counts its rows), the black box is asked about
  exactly the paid sequences (plus the public start sequence), and no constraint query is made
  under the defaults. An optimizer that evaluates the objective itself fails here; one whose
  ``ask`` re-proposes a labelled sequence is stopped by the base (``ContractError``).
* :func:`check_budget`: ``budget=5`` ends the run at exactly 5 labels after round 0, each paid
  once, with no stop reason (or earlier, only because a label reached the optimum).
* :func:`check_resume`: a run interrupted after one round and resumed writes the same
  ``evaluated.csv`` and ``rounds.jsonl`` (but the timings) as one made in one go.
* :func:`check_config_version`: ``config.json`` records ``config_version`` = the number of the
  optimizer's migrations, and reading it back through them changes nothing.
"""

from __future__ import annotations

import csv
import filecmp
import json
import pathlib
from typing import Any

import numpy as np

from llome_jax import ehrlich
from llome_jax.objective import Objective
from llome_jax.optimizers.registry import OptimizerEntry, get, run
from llome_jax.run.migrations import CONFIG_VERSION

__all__ = [
    "CHECKS",
    "Recorder",
    "check_all",
    "check_budget",
    "check_config_version",
    "check_pays_once",
    "check_resume",
    "recording_objective",
]


class Recorder:
    """Wraps a NumPy function of ``x [n, L]`` and keeps every row it was called on."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.rows = fn, []

    def __call__(self, x: Any) -> Any:
        x = np.asarray(x)
        self.rows.extend(map(tuple, x.tolist()))
        return self.fn(x)


def recording_objective(
    name: str = "Ehr(8,8)-2-2-2", instance_seed: int = 1
) -> tuple[Objective, Recorder, Recorder]:
    """An Ehrlich function as a host :class:`~llome_jax.objective.Objective` whose
    ``evaluate`` and ``is_feasible`` record every row asked about."""
    fn = ehrlich.resolve_function(name, instance_seed)
    x0 = ehrlich.resolve_initial_solution(name, instance_seed)
    evaluate = Recorder(lambda x: np.asarray(ehrlich.evaluate(fn, x), np.float32))
    is_feasible = Recorder(lambda x: np.asarray(ehrlich.is_feasible(fn, x), bool))
    objective = Objective(
        "ehrlich-on-host",
        fn.config.num_states,
        fn.config.dim,
        evaluate,
        is_feasible=is_feasible,
        initial_solution=x0,
        optimal_value=1.0,
        worst_value=0.0,
        traceable=False,
    )
    return objective, evaluate, is_feasible


def _entry(optimizer: str | OptimizerEntry) -> OptimizerEntry:
    return get(optimizer) if isinstance(optimizer, str) else optimizer


def _evaluated(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path / "evaluated.csv", newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    rounds = np.asarray([int(r[0]) for r in rows], np.int64)
    x = np.asarray([[int(t) for t in r[1].split(",")] for r in rows], np.int32)
    return rounds, x


def _records(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


def check_pays_once(optimizer: str | OptimizerEntry, out: pathlib.Path) -> None:
    """Each label paid once, the black box asked about the paid sequences only (module
    docstring)."""
    entry = _entry(optimizer)
    objective, evaluate, is_feasible = recording_objective()
    path = pathlib.Path(out) / "pays_once"
    run(entry, entry.test_config(), path, objective=objective, progress=False)
    rounds, x = _evaluated(path)
    records = _records(path)
    name = entry.name
    assert len(x) > 0, f"{name} labelled nothing"
    assert len(np.unique(x, axis=0)) == len(x), f"{name} paid for a sequence twice"
    assert [r["num_evaluations"] for r in records] == [
        int(np.sum(rounds <= r["round"])) for r in records
    ], f"{name}'s num_evaluations do not count evaluated.csv's rows"
    start = tuple(np.asarray(objective.x0).tolist())
    asked = sorted(row for row in evaluate.rows if row != start)
    assert asked == sorted(map(tuple, x.tolist())), (
        f"{name} asked the objective about {len(asked)} sequences but paid for {len(x)}: it "
        "learnt values it did not pay for (or paid for one twice)"
    )
    assert set(is_feasible.rows) <= {start}, f"{name} made constraint queries under the defaults"
    assert {r.get("cum_constraint_queries", 0) for r in records} == {0}


def check_budget(optimizer: str | OptimizerEntry, out: pathlib.Path, budget: int = 5) -> None:
    """``budget`` labels after round 0, exactly."""
    entry = _entry(optimizer)
    path = pathlib.Path(out) / "budget"
    run(entry, entry.test_config(), path, budget=budget, progress=False)
    records = _records(path)
    rounds, x = _evaluated(path)
    paid = records[-1]["num_evaluations"] - records[0]["num_evaluations"]
    found = records[-1]["stop_reason"].startswith("the optimum")  # nothing left to pay for
    assert paid == budget or (found and paid < budget), (
        f"{entry.name} paid {paid} labels after round 0 for a budget {budget}"
    )
    assert int(np.sum(rounds > 0)) == paid
    assert len(np.unique(x, axis=0)) == len(x), f"{entry.name} paid for a sequence twice"
    assert found or records[-1]["stop_reason"] == "", records[-1]["stop_reason"]


def check_resume(optimizer: str | OptimizerEntry, out: pathlib.Path) -> None:
    """Interrupted after one round and resumed = made in one go (files but the seconds)."""
    entry = _entry(optimizer)
    cfg = entry.test_config()
    once, twice = pathlib.Path(out) / "once", pathlib.Path(out) / "twice"
    run(entry, cfg, once, progress=False)
    run(entry, cfg, twice, progress=False, max_rounds_this_call=1)
    run(entry, cfg, twice, progress=False, resume=True)
    assert filecmp.cmp(once / "evaluated.csv", twice / "evaluated.csv", shallow=False), (
        f"{entry.name}: a resumed run labelled other sequences than an uninterrupted one"
    )

    def without_seconds(path: pathlib.Path) -> list[dict[str, Any]]:
        """The records but their timings (``seconds``, ``seconds_*``, ``time_*``)."""
        return [
            {k: v for k, v in r.items() if not k.startswith(("seconds", "time_"))}
            for r in _records(path)
        ]

    assert without_seconds(once) == without_seconds(twice), (
        f"{entry.name}: a resumed run's rounds.jsonl differs from an uninterrupted one's"
    )
    assert len(_records(once)) >= 3, f"{entry.name}'s test_config ran fewer than 2 rounds"


def check_config_version(optimizer: str | OptimizerEntry, out: pathlib.Path) -> None:
    """``config_version`` is recorded and the migrations read today's file as it is (the
    ``config.json`` the driver writes: the optimizer's ``config_dict()`` under its name; nothing
    runs)."""
    entry = _entry(optimizer)
    plugin = entry.make(entry.test_config())
    saved = json.loads(json.dumps({"optimizer": entry.name, **plugin.config_dict()}))
    steps = getattr(plugin, "migrations", ())
    assert saved.get(CONFIG_VERSION) == len(steps), (
        f"{entry.name}'s config.json records config_version {saved.get(CONFIG_VERSION)!r}, "
        f"not {len(steps)}"
    )
    assert plugin.upgrade_config(saved) == saved


#: every check, by name (the registry's contract tests run each on each optimizer)
CHECKS = {
    "pays_once": check_pays_once,
    "budget": check_budget,
    "resume": check_resume,
    "config_version": check_config_version,
}


def check_all(optimizer: str | OptimizerEntry, out: pathlib.Path) -> None:
    """Every check of :data:`CHECKS` in turn, each in a folder of its own under ``out``."""
    for name, check in CHECKS.items():
        check(optimizer, pathlib.Path(out) / name)
