"""A label budget ends every optimizer at exactly N labels after round 0, and one round 0.

``Oracle.affordable`` / ``Oracle.limit`` are checked against hand-counted cases; the round
driver's ``budget`` end to end for the GA, LLOME and LaMBO-2 (smoke shapes of
``test_information_contract``, so the compiled programs are shared); and for one run seed the
three optimizers pay for the same round-0 sequences in the same order (``runner.round0_key``).
"""

from __future__ import annotations

import csv
import json
import pathlib

import numpy as np
import pytest

from llome_jax import ga
from llome_jax.ga.optimizer import GARunConfig
from llome_jax.ga.optimizer import run as ga_run
from llome_jax.lambo2 import optimizer as lambo2
from llome_jax.llome import loop, presets
from llome_jax.objective import Objective
from llome_jax.oracle import Oracle


def _toy() -> Objective:
    """f(x) = sum(x) / 6 on 3 positions of 3 states; every sequence feasible."""
    return Objective(
        "toy",
        3,
        3,
        lambda x: np.asarray(x, np.float32).sum(axis=1) / 6.0,
        initial_solution=[1, 1, 1],
    )


def _rows(path: pathlib.Path) -> list[list[str]]:
    with (path / "evaluated.csv").open() as file:
        return list(csv.reader(file))[1:]


def _records(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------------------
# The oracle's cap, by hand
# ---------------------------------------------------------------------------------------------
def test_affordable_counts_distinct_unlabelled_rows_up_to_the_cap() -> None:
    oracle = Oracle(_toy())
    oracle.label(np.asarray([[0, 0, 0]]))  # paid: 1
    oracle.limit = 3  # two more labels
    x = np.asarray(
        [
            [0, 0, 0],  # labelled: free
            [2, 2, 2],  # new (1)
            [1, 1, 1],  # the public start sequence: free
            [2, 2, 2],  # repeat within the call: free
            [0, 1, 2],  # new (2)
            [2, 1, 0],  # new (3): past the cap
            [0, 0, 0],
        ]
    )
    assert oracle.affordable(x) == 5
    assert oracle.affordable(x[:2]) == 2
    oracle.limit = 1
    assert oracle.affordable(x) == 1  # only the labelled first row
    oracle.limit = None
    assert oracle.affordable(x) == 7


def test_every_evaluation_counts_rows_against_the_cap() -> None:
    oracle = Oracle(_toy(), accounting="every_evaluation")
    oracle.limit = 4
    assert oracle.affordable(np.zeros((6, 3), np.int32)) == 4


def test_a_label_call_past_the_cap_pays_the_affordable_prefix_only() -> None:
    oracle = Oracle(_toy())
    oracle.limit = 2
    result = oracle.label(np.asarray([[2, 2, 2], [0, 0, 0], [0, 0, 1], [2, 2, 2]]))
    assert oracle.num_paid == 2 and oracle.truncated
    np.testing.assert_array_equal(result.paid, [True, True, False, False])
    np.testing.assert_allclose(result.values[:2], [1.0, 0.0])
    assert np.isnan(result.values[2])
    assert result.values[3] == 1.0  # labelled in this call's paid prefix: known
    assert oracle.remaining() == 0


def test_record_labels_registers_the_affordable_prefix_only() -> None:
    oracle = Oracle(_toy())
    oracle.limit = 1
    new = oracle.record_labels(np.asarray([[2, 2, 2], [0, 0, 0]]), np.asarray([1.0, 0.0]))
    np.testing.assert_array_equal(new, [True, False])
    assert oracle.num_paid == 1 and oracle.truncated
    assert np.isnan(oracle.lookup(np.asarray([[0, 0, 0]]))[0])


# ---------------------------------------------------------------------------------------------
# End to end through the round driver
# ---------------------------------------------------------------------------------------------
GA_CFG = GARunConfig(
    function="Ehr(8,8)-2-2-2",
    instance_seed=1,
    seed=3,
    rounds=50,
    round0_generations=2,
    generations_per_round=1,
    round0_ga=ga.GAConfig(num_particles=200, mutation_prob=0.1),
)
LLOME_CFG = presets.preset("smoke", rounds=5, model_overrides=(("num_hidden_layers", 2),))
LAMBO_CFG = lambo2.preset(
    "smoke",
    function="Ehr(8,8)-2-2-2",
    instance_seed=1,
    rounds=5,
    labels_per_round=16,
    round0_ga={"num_particles": 200, "mutation_prob": 0.1},
    model_overrides=(("ensemble_size", 1), ("num_blocks", 1)),
    **{"train.epochs": 1, "design.num_steps": 1, "design.guidance_updates": 1},
)


#: the GA on a function it does not solve within these budgets (it solves Ehr(8,8) in ~280)
GA_HARD = GA_CFG.replace(function="Ehr(32,32)-4-4-4", instance_seed=7)


def _run(kind: str, out: pathlib.Path, **options) -> None:
    if kind == "ga":
        ga_run(GA_HARD, out, progress=False, **options)
    elif kind == "llome":
        loop.run(LLOME_CFG, out, progress=False, **options)
    else:
        lambo2.run(LAMBO_CFG, out, progress=False, **options)


def test_the_shared_configurations_start_from_one_round0() -> None:
    """The test's three configurations agree on what round 0 is (seed, n0, the GA)."""
    assert LLOME_CFG.seed == LAMBO_CFG.seed == 0 != GA_CFG.seed
    assert LLOME_CFG.round0_generations == LAMBO_CFG.round0_generations == GA_CFG.round0_generations
    assert LLOME_CFG.round0_ga == LAMBO_CFG.round0_ga == GA_CFG.round0_ga


@pytest.mark.slow
def test_round0_rows_are_identical_for_the_ga_llome_and_lambo2(tmp_path: pathlib.Path) -> None:
    for kind in ("llome", "lambo2"):
        _run(kind, tmp_path / kind, max_rounds_this_call=0)
    for name, seed in (("ga", GA_CFG.seed), ("ga0", 0)):
        ga_run(GA_CFG.replace(seed=seed), tmp_path / name, progress=False, max_rounds_this_call=0)
    rows = {kind: _rows(tmp_path / kind) for kind in ("ga", "ga0", "llome", "lambo2")}
    assert len(rows["ga0"]) > 20
    assert rows["ga0"] == rows["llome"] == rows["lambo2"]
    assert rows["ga"] != rows["ga0"]  # another seed, another round 0


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "budget", "rounds"), [("ga", 600, 2)], ids=["ga"])
def test_a_run_ends_at_exactly_its_budget(
    kind: str, budget: int, rounds: int, tmp_path: pathlib.Path
) -> None:
    """A budget that ends inside the GA's second round (200 labels or more a round, 386 in
    round 1). Every registered optimizer, LLOME and LaMBO-2 included, is held to ``--budget``
    by ``tests/test_registry_contract.py`` (``contract.check_budget``)."""
    _run(kind, tmp_path / kind, budget=budget)
    records = _records(tmp_path / kind)
    round0 = records[0]["num_evaluations"]
    assert records[-1]["num_evaluations"] - round0 == budget
    rows = _rows(tmp_path / kind)
    assert sum(int(r[0]) > 0 for r in rows) == budget
    assert len({r[1] for r in rows}) == len(rows)  # each sequence paid once
    assert records[-1]["round"] == rounds  # the budget, not the cap of 5 or 50 rounds, ended it
    assert records[-1]["stop_reason"] == ""
    config = json.loads((tmp_path / kind / "config.json").read_text())
    assert config["budget"] == budget
    # the last round's min regret is over the labels paid (evaluated.csv), not more
    values = np.asarray([float(r[2]) for r in rows])
    best = np.max(np.where(np.isfinite(values), values, -np.inf))
    assert records[-1]["min_regret"] == pytest.approx(1.0 - max(best, _start_value(kind)))


def _start_value(kind: str) -> float:
    from llome_jax import ehrlich

    name, seed = ("Ehr(32,32)-4-4-4", 7) if kind == "ga" else ("Ehr(8,8)-2-2-2", 1)
    fn = ehrlich.resolve_function(name, seed)
    x0 = ehrlich.resolve_initial_solution(name, seed)
    return float(np.asarray(ehrlich.evaluate(fn, np.asarray(x0)[None]))[0])


@pytest.mark.slow
def test_a_ga_budget_raised_on_resume_continues_the_same_generations(
    tmp_path: pathlib.Path,
) -> None:
    """A run cut inside a generation (the state stays before it), then resumed with a larger
    budget, pays the same sequences in the same order as a run given the larger budget."""
    _run("ga", tmp_path / "once", budget=700)
    _run("ga", tmp_path / "twice", budget=300)
    _run("ga", tmp_path / "twice", budget=700, resume=True)
    once = [r[1:] for r in _rows(tmp_path / "once")]
    twice = [r[1:] for r in _rows(tmp_path / "twice")]
    assert once == twice
    records = _records(tmp_path / "twice")
    assert records[-1]["num_evaluations"] - records[0]["num_evaluations"] == 700


def test_a_bad_budget_is_refused_before_anything_is_written(tmp_path: pathlib.Path) -> None:
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="budget must be a positive number"):
            ga_run(GA_CFG, tmp_path / "bad", progress=False, budget=bad)
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------
# Reading a run at exactly a label count (compare, the paper driver)
# ---------------------------------------------------------------------------------------------
def _hand_run(path: pathlib.Path, accounting: str = "pay_once") -> pathlib.Path:
    """Round 0 pays 2 labels (values 0.25, 0.0); round 1 pays 4 (0.5, -inf, 0.75, 0.5) and
    records min regret 0.25; round 2 pays 2 (0.5, 1.0)."""
    path.mkdir(parents=True)
    config = {"optimizer": "ga", "function": "f2", "instance_seed": None, "accounting": accounting}
    (path / "config.json").write_text(json.dumps(config))
    values = [(0, 0.25), (0, 0.0), (1, 0.5), (1, -np.inf), (1, 0.75), (1, 0.5), (2, 0.5), (2, 1.0)]
    rows = ["round,sequence,value"] + [f'{r},"{i},{i}",{v!r}' for i, (r, v) in enumerate(values)]
    (path / "evaluated.csv").write_text("\n".join(rows) + "\n")
    records = [(0, 2, 0.75), (1, 6, 0.25), (2, 8, 0.0)]
    lines = [
        json.dumps({"round": r, "num_evaluations": n, "min_regret": g, "best_value": 1 - g})
        for r, n, g in records
    ]
    (path / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_a_pay_once_run_is_read_at_exactly_a_label_count(tmp_path: pathlib.Path) -> None:
    from llome_jax import compare

    _hand_run(tmp_path / "exact")
    _hand_run(tmp_path / "rounds", accounting="every_evaluation")
    (run,) = compare.load_runs([str(tmp_path / "exact")])
    assert run.exact
    # after 3 labels (round 0 + the first of round 1: 0.5): regret 0.5, not round 0's 0.75
    # after 4 (an infeasible label): still 0.5; after 5 (0.75): 0.25; after 7 (0.5): 0.25
    assert [compare.value_at(run, n) for n in (2, 3, 4, 5, 6, 7, 8)] == [
        0.75,
        0.5,
        0.5,
        0.25,
        0.25,
        0.25,
        0.0,
    ]
    assert [compare.labels_read(run, n) for n in (3, 7, 9)] == [3, 7, 8]
    (by_round,) = compare.load_runs([str(tmp_path / "rounds")], allow_mixed=True)
    assert not by_round.exact  # rows are not labels: read at the last round end
    assert [compare.value_at(by_round, n) for n in (3, 5, 7)] == [0.75, 0.75, 0.25]
    assert [compare.labels_read(by_round, n) for n in (3, 7)] == [2, 6]


def test_the_paper_driver_reads_runs_at_exactly_its_budget(tmp_path: pathlib.Path) -> None:
    """The paper driver reads a run's curve at round-0 labels + its budget with the same
    function as ``compare`` (``compare.curve_at``), at label resolution when it has the run
    directory."""
    from llome_jax.bench.plan import RunSpec
    from llome_jax.bench.results import regret_curves, summary_at
    from llome_jax.compare import curve_at

    spec = RunSpec("GA", "ga", "f2", 0, None, ("solver",))
    _hand_run(tmp_path / "runs" / spec.name)
    records = _records(tmp_path / "runs" / spec.name)
    ((x, y),) = regret_curves({spec: records}, tmp_path)["GA"]
    # 3 labels after round 0 (5 in all): 0.25; 1 after round 0: 0.5
    assert curve_at(x, y, x[0] + 3) == 0.25
    assert curve_at(x, y, x[0] + 1) == 0.5
    assert summary_at({"GA": [(x, y)]}, 3)["GA"]["values"] == [0.25]
    ((x, y),) = regret_curves({spec: records})["GA"]  # without the directory: round ends only
    assert curve_at(x, y, x[0] + 3) == 0.75


@pytest.mark.slow
def test_ga_rounds_of_exactly_labels_per_round_pay_the_same_sequences(
    tmp_path: pathlib.Path,
) -> None:
    """``labels_per_round``: every round pays exactly that many (the generation that completes a
    round is drawn again by the next), and the labels come in the same order as with whole
    generations a round."""
    exact = GA_HARD.replace(rounds=4, labels_per_round=150)
    ga_run(exact, tmp_path / "exact", progress=False)
    ga_run(GA_HARD.replace(rounds=4), tmp_path / "whole", progress=False)
    paid = [r["num_evaluations"] for r in _records(tmp_path / "exact")]
    assert np.diff(paid).tolist() == [150, 150, 150, 150]
    exact_rows = [r[1:] for r in _rows(tmp_path / "exact")]
    whole_rows = [r[1:] for r in _rows(tmp_path / "whole")]
    assert len(whole_rows) > len(exact_rows)
    assert exact_rows == whole_rows[: len(exact_rows)]


def test_a_ga_round_cut_at_its_labels_stops_at_the_optimum_it_labelled(
    tmp_path: pathlib.Path,
) -> None:
    """The generation a round's label count cuts is not in the GA state (the next round draws it
    again); when one of its labels is the optimum, the run still stops there. Seed 0 on instance
    1 of Ehr(8,8)-2-2-2 labels regret 0 in round 1's cut generation."""
    cfg = GARunConfig(
        function="Ehr(8,8)-2-2-2",
        instance_seed=1,
        seed=0,
        rounds=3,
        round0_generations=2,
        labels_per_round=32,
        round0_ga=ga.GAConfig(num_particles=200, mutation_prob=0.1),
    )
    result = ga_run(cfg, tmp_path / "run", progress=False)
    records = _records(tmp_path / "run")
    assert [r["round"] for r in records] == [0, 1]
    assert records[-1]["min_regret"] == 0.0
    assert "optimum" in records[-1]["stop_reason"] and result.stop_reason


def test_a_run_whose_rounds_end_before_its_budget_says_so(tmp_path: pathlib.Path) -> None:
    """Issue 67, item 2: 2 rounds of 32 labels cannot spend a budget of 1,000; the run ends
    after 64 and its last record and result say why (it was silent before)."""
    cfg = GA_HARD.replace(rounds=2, labels_per_round=32)
    result = ga_run(cfg, tmp_path / "short", progress=False, budget=1000)
    records = _records(tmp_path / "short")
    assert records[-1]["num_evaluations"] - records[0]["num_evaluations"] == 64
    why = (
        "its 2 rounds ended it after 64 of its 1,000 labels after round 0 (--rounds caps a budget)"
    )
    assert records[-1]["stop_reason"] == result.stop_reason == why
    assert [r["stop_reason"] for r in records[:-1]] == ["", ""]
    # a budget it spends exactly leaves no such reason
    ga_run(cfg, tmp_path / "exact", progress=False, budget=64)
    assert _records(tmp_path / "exact")[-1]["stop_reason"] == ""
