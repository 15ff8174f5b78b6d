"""The blind local-search baseline (:mod:`llome_jax.bench.local_search`, the paper driver's
``local search`` method; ``experiments/local_search.py`` is its command line): its proposals
and accounting."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from llome_jax.bench import local_search

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "local_search_script", ROOT / "experiments" / "local_search.py"
)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def test_proposals_are_new_single_substitutions_of_the_best():
    rng = np.random.default_rng(0)
    sequences = rng.integers(0, 4, (40, 6))
    sequences = np.unique(sequences, axis=0)
    values = rng.random(len(sequences))
    seen = {s.astype(np.uint8).tobytes() for s in sequences}
    top = sequences[np.argsort(-values)[:3]]
    out = local_search.propose(rng, sequences, values, seen, 50, 3, 1, 4)
    assert out.shape == (50, 6) and len(np.unique(out, axis=0)) == 50
    # Each is one substitution from one of the 3 best and was never labelled.
    distance = (out[:, None, :] != top[None, :, :]).sum(-1).min(1)
    assert (distance == 1).all()
    assert not any((out[i] == sequences).all(1).any() for i in range(len(out)))
    # The proposals were added to the seen set, so later rounds cannot repeat them. Enumerate
    # the distinct single mutants of the 3 best that are still new: exactly those can come next.
    mutants = {
        tuple(np.where(np.arange(6) == i, t, row))
        for row in top
        for i in range(6)
        for t in range(4)
        if t != row[i]
    }
    left = {m for m in mutants if np.asarray(m, np.uint8).tobytes() not in seen}
    more = local_search.propose(rng, sequences, values, seen, len(left), 3, 1, 4)
    assert {tuple(r) for r in more} == left
    with pytest.raises(ValueError, match="new sequences found"):
        local_search.propose(rng, sequences, values, seen, 1, 3, 1, 4)


def test_a_run_labels_new_single_mutants_and_logs_them_like_an_optimizer(tmp_path):
    from llome_jax import ehrlich
    from llome_jax.run.rundir import RunDirectory

    directory = script.run_directory(tmp_path, "Ehr(8,8)-2-2-2", 1, 0)
    assert directory == tmp_path / "Ehr_8_8_-2-2-2_1_seed0"
    rows = local_search.run("Ehr(8,8)-2-2-2", 1, 0, 2, 16, 4, 1, directory)
    rounds, sequences, values = RunDirectory(directory).evaluated()
    # round 0 pays the GA archive's distinct sequences (the public start sequence excluded),
    # then 16 labels a round; the paper's accounting counts the 10 GA generations of 1,000
    n0 = int(np.sum(rounds == 0))
    x0 = np.asarray(ehrlich.resolve_initial_solution("Ehr(8,8)-2-2-2", 1))
    assert [r[4] for r in rows] == [n0, n0 + 16, n0 + 32] and 0 < n0 < 10_000
    assert not (sequences == x0).all(axis=1).any()
    paper = local_search.run("Ehr(8,8)-2-2-2", 1, 0, 2, 16, 4, 1, None, "every_evaluation")
    assert [r[4] for r in paper] == [10_000, 10_016, 10_032]
    assert len({tuple(s) for s in sequences}) == len(sequences)  # nothing labelled twice
    for r in (1, 2):
        batch = sequences[rounds == r]
        before = np.concatenate([sequences[rounds < r], x0[None]])
        assert len(batch) == 16
        nearest = (batch[:, None, :] != before[None, :, :]).sum(-1).min(1)
        assert (nearest == 1).all()
    fn = ehrlich.resolve_function("Ehr(8,8)-2-2-2", 1)
    np.testing.assert_array_equal(values, np.asarray(ehrlich.evaluate(fn, sequences), np.float64))
    logged = [rec["min_regret"] for rec in RunDirectory(directory).rounds()]
    f_x0 = float(np.asarray(ehrlich.evaluate(fn, x0[None].astype(np.int32)))[0])
    assert logged == [1.0 - max(values[rounds <= r].max(), f_x0) for r in range(3)]


def test_a_run_directory_run_pays_exactly_its_budget_after_the_shared_round0(tmp_path):
    """The paper driver's local search: budget 2,500 with 2,000 a round is two rounds, the
    second of 500; round 0 is the GA seed data every optimizer of the seed pays."""
    import json

    result = local_search.run_directory_run("f2", 1, tmp_path / "run", budget=2500)
    records = [json.loads(x) for x in (result.path / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2]
    paid = [r["num_evaluations"] - records[0]["num_evaluations"] for r in records]
    assert paid == [0, 2000, 2500]
    *_, calls = local_search.seed_data("f2", None, 1)
    rows = (result.path / "evaluated.csv").read_text().splitlines()[1:]
    round0 = [r for r in rows if r.startswith("0,")]
    assert len(round0) == calls == records[0]["num_evaluations"]
    assert len(rows) == calls + 2500 and len(set(rows)) == len(rows)
    config = json.loads((result.path / "config.json").read_text())
    assert config["budget"] == 2500 and config["method"] == "local search"


def test_the_plugin_repeats_the_committed_f2_local_search_run(tmp_path) -> None:
    """Seed 5 of the f2 comparison (the start sequence is row 1 of its round-0 archive, not row
    0), re-made through the ask/tell plug-in as the paper driver runs it now: the same labels
    each round and the same curve as ``docs/paper/f2/curves.csv``."""
    import csv
    import json

    from llome_jax.bench import execution
    from llome_jax.bench.plan import SCALES, RunSpec

    spec = RunSpec("local search", "local_search", "f2", 5, None, ("solver",))
    assert execution.run_one(spec, SCALES["cpu"], tmp_path / "plugin", progress=False) == "new"
    records = (tmp_path / "plugin" / "rounds.jsonl").read_text().splitlines()
    mine = [(r["round"], r["num_evaluations"], r["min_regret"]) for r in map(json.loads, records)]
    with open(ROOT / "docs" / "paper" / "f2" / "curves.csv", newline="") as stream:
        committed = [
            (int(r["round"]), int(r["labels"]), float(r["min_regret"]))
            for r in csv.DictReader(stream)
            if r["run"] == "f2/local-search_seed5"
        ]
    assert len(committed) == 11 and mine == committed
