"""The GA under the round driver (``llome_jax.ga.optimizer``): its rounds are one uninterrupted GA
run, its round 0 is LLOME's seed data, each sequence is paid once (``pay_once``) or every
evaluation is (the paper's accounting), and a resumed run equals an uninterrupted one."""

from __future__ import annotations

import csv
import json
import pathlib

import jax
import numpy as np
import pytest

import llome_jax
from llome_jax import ehrlich, ga
from llome_jax.ga import loop as ga_loop
from llome_jax.ga.optimizer import GARunConfig, run
from llome_jax.llome.runtime import named_key

CFG = GARunConfig(
    function="Ehr(8,8)-2-2-2",
    instance_seed=1,
    seed=5,
    rounds=3,
    round0_generations=4,
    generations_per_round=2,
    round0_ga=ga.GAConfig(num_particles=64, mutation_prob=0.05),
    accounting="every_evaluation",
)
#: pay_once on a function the GA does not solve in 3 rounds of 64 particles
PAY_ONCE = CFG.replace(function="Ehr(16,16)-2-4-4", accounting="pay_once")


def _evaluated(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with open(path / "evaluated.csv", newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    rounds = np.asarray([int(r[0]) for r in rows])
    x = np.asarray([[int(t) for t in r[1].split(",")] for r in rows], np.int32)
    return rounds, x, np.asarray([float(r[2]) for r in rows])


def test_rounds_are_one_ga_run_and_round0_is_llome_seed_data(tmp_path: pathlib.Path) -> None:
    result = run(CFG, tmp_path / "run", progress=False)
    fn = ehrlich.resolve_function(CFG.function, CFG.instance_seed)
    x0 = ehrlich.resolve_initial_solution(CFG.function, CFG.instance_seed)
    key = named_key(jax.random.key(CFG.seed), "ga")  # what LLOME's round 0 uses
    rounds, x, v = _evaluated(result.path)

    # round 0 == ga_loop.run_archive of n0 generations: LLOME's seed data, row for row
    seed_x, seed_v, _ = ga_loop.run_archive(
        key, fn, x0, CFG.round0_generations, CFG.round0_ga
    ).to_numpy()
    np.testing.assert_array_equal(x[rounds == 0], seed_x)
    np.testing.assert_array_equal(v[rounds == 0], seed_v.astype(np.float64))

    # all rounds == one GA run of n0 + R G generations: best value and oracle calls per round
    total = CFG.round0_generations + CFG.rounds * CFG.generations_per_round
    _, trace = ga_loop.run(key, fn, x0, total, CFG.round0_ga)
    records = [json.loads(line) for line in (result.path / "rounds.jsonl").read_text().splitlines()]
    ends = [CFG.round0_generations + r * CFG.generations_per_round for r in range(CFG.rounds + 1)]
    assert [r["num_evaluations"] for r in records] == [g * 64 for g in ends]
    np.testing.assert_array_equal(
        [1.0 - r["min_regret"] for r in records],
        np.asarray(trace.best_value, np.float64)[np.asarray(ends) - 1],
    )
    # ... and the same particles: the rows of all rounds, each kept at its first occurrence, are
    # the deduplicated archive of the uninterrupted run, in evaluation order
    seen: set[tuple[int, ...]] = set()
    first = [
        i for i, row in enumerate(map(tuple, x.tolist())) if not (row in seen or seen.add(row))
    ]
    all_x, all_v, _ = ga_loop.run_archive(key, fn, x0, total, CFG.round0_ga).to_numpy()
    np.testing.assert_array_equal(x[first], all_x)
    np.testing.assert_array_equal(v[first], all_v.astype(np.float64))
    # every logged value is the oracle's value of the logged sequence; rows distinct per round
    np.testing.assert_array_equal(v, np.asarray(ehrlich.evaluate(fn, x), np.float64))
    for r in range(CFG.rounds + 1):
        assert len(np.unique(x[rounds == r], axis=0)) == int(np.sum(rounds == r)) > 0


def test_pay_once_pays_each_distinct_sequence_once_and_fills_the_round_budget(
    tmp_path: pathlib.Path,
) -> None:
    cfg = PAY_ONCE
    result = run(cfg, tmp_path / "run", progress=False)
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    x0 = ehrlich.resolve_initial_solution(cfg.function, cfg.instance_seed)
    key = named_key(jax.random.key(cfg.seed), "ga")
    rounds, x, v = _evaluated(result.path)
    records = [json.loads(line) for line in (result.path / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2, 3] and not result.stop_reason

    # no sequence twice in evaluated.csv, and never the (public) start sequence
    assert len(np.unique(x, axis=0)) == len(x)
    assert not (x == x0).all(axis=1).any()
    # round 0: LLOME's seed data (ga_loop.run_archive) without the start sequence, row for row
    seed_x, seed_v, _ = ga_loop.run_archive(
        key, fn, x0, cfg.round0_generations, cfg.round0_ga
    ).to_numpy()
    keep = ~(seed_x == x0).all(axis=1)
    np.testing.assert_array_equal(x[rounds == 0], seed_x[keep])
    np.testing.assert_array_equal(v[rounds == 0], seed_v[keep].astype(np.float64))
    # num_evaluations = paid labels = rows of evaluated.csv so far
    paid = [int(np.sum(rounds <= r)) for r in range(cfg.rounds + 1)]
    assert [r["num_evaluations"] for r in records] == paid
    # each later round runs whole generations until it has paid G n new labels
    budget = cfg.generations_per_round * cfg.round0_ga.num_particles
    gens = [r["generations"] for r in records]
    for r in range(1, cfg.rounds + 1):
        assert paid[r] - paid[r - 1] >= budget
        assert records[r]["num_proposals"] == (gens[r] - gens[r - 1]) * cfg.round0_ga.num_particles
    # the rows are the first occurrences in the uninterrupted GA run of as many generations
    all_x, all_v, _ = ga_loop.run_archive(key, fn, x0, gens[-1], cfg.round0_ga).to_numpy()
    keep = ~(all_x == x0).all(axis=1)
    np.testing.assert_array_equal(x, all_x[keep])
    np.testing.assert_array_equal(v, all_v[keep].astype(np.float64))
    # ... whose generation count is the first with the budget paid: one generation less was short
    first_gen_of_row = np.asarray(
        ga_loop.run_archive(key, fn, x0, gens[-1], cfg.round0_ga).generations
    )[: len(all_x)][keep]
    for r in range(1, cfg.rounds + 1):
        assert int(np.sum(first_gen_of_row <= gens[r] - 1)) - paid[r - 1] < budget
    # the record's uniqueness is over the round's proposals (particles), not the paid rows
    assert 0.0 < records[1]["frac_unique"] < 1.0


def test_resumed_run_equals_uninterrupted(tmp_path: pathlib.Path) -> None:
    for name, cfg in (("paper", CFG), ("pay_once", PAY_ONCE)):
        full = run(cfg, tmp_path / f"full_{name}", progress=False)
        run(cfg, tmp_path / f"part_{name}", progress=False, max_rounds_this_call=1)
        resumed = run(cfg, tmp_path / f"part_{name}", resume=True, progress=False)
        assert (resumed.path / "evaluated.csv").read_bytes() == (
            full.path / "evaluated.csv"
        ).read_bytes()
        assert (resumed.path / "rounds.jsonl").read_text().count("\n") == cfg.rounds + 1
    assert (resumed.path / "evaluated.csv").read_bytes() == (
        full.path / "evaluated.csv"
    ).read_bytes()
    assert resumed.records[-1]["round"] == CFG.rounds
    # provenance: one entry per invocation, never compared on resume
    entries = json.loads((resumed.path / "config.json").read_text())["provenance"]
    assert len(entries) == 2 and entries[0]["started"] <= entries[1]["started"]
    assert {e["jax"] for e in entries} == {jax.__version__}
    assert {e["llome_jax"] for e in entries} == {llome_jax.__version__}
    assert entries[0]["devices"] == jax.device_count() == 8  # conftest's fake CPU devices


def test_cli_round_mode(tmp_path: pathlib.Path, capsys) -> None:
    from llome_jax import cli

    base = ["ga", "--function", "Ehr(8,8)-2-2-2", "--instance-seed", "1", "--particles", "64"]
    out = tmp_path / "cli"
    argv = [*base, "--rounds", "2", "--generations-per-round", "3", "--out", str(out)]
    assert cli.main([*argv, "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    rounds, _, _ = _evaluated(out)  # pay_once: paid labels = rows of evaluated.csv so far
    assert len(records) == 2  # round 1 labels the optimum of this easy function
    assert [r["num_evaluations"] for r in records] == [int(np.sum(rounds <= r)) for r in range(2)]
    paper = tmp_path / "paper"
    argv = [*base, "--rounds", "2", "--generations-per-round", "3", "--out", str(paper)]
    assert cli.main([*argv, "--set", "accounting=every_evaluation", "--no-progress"]) == 0
    records = [json.loads(line) for line in (paper / "rounds.jsonl").read_text().splitlines()]
    assert [r["num_evaluations"] for r in records] == [640, 832, 1024]  # (10, 13, 16) x 64
    assert json.loads((out / "config.json").read_text())["optimizer"] == "ga"
    assert cli.main([*base, "--rounds", "2", "--seeds", "3", "--out", str(tmp_path / "x")]) == 2
    assert "one seed" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_many_seeds_run_writes_each_seeds_own_ga_run_through_the_run_directory(tmp_path):
    # the library function behind `llome-jax ga` without --rounds: seed s of the vmapped,
    # segmented run is ga_loop.run(key(s)) on its own, generation by generation
    from llome_jax.ga.optimizer import TRACE_HEADER, GASeedsConfig, run_seeds

    config = ga.GAConfig(num_particles=32, mutation_prob=0.05)
    cfg = GASeedsConfig(
        function="Ehr(8,8)-2-2-2",
        instance_seed=1,
        seed=3,
        seeds=2,
        generations=7,
        segment=3,
        ga=config,
    )
    seen = []
    summary = run_seeds(cfg, tmp_path / "many", progress=lambda done, best: seen.append(done))
    assert seen == [3, 6, 7]
    with open(tmp_path / "many" / "trace.csv", newline="") as stream:
        rows = list(csv.reader(stream))
    assert tuple(rows[0]) == TRACE_HEADER and len(rows) == 1 + 2 * 7
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    x0 = ehrlich.resolve_initial_solution(cfg.function, cfg.instance_seed)
    for s, seed in enumerate((3, 4)):
        _, trace = ga_loop.run(jax.random.key(seed), fn, x0, 7, config)
        best = [float(v) for v in np.asarray(trace.best_value)]
        mine = [float(r[3]) for r in rows[1 + 7 * s : 1 + 7 * (s + 1)]]
        assert [int(r[0]) for r in rows[1 + 7 * s : 1 + 7 * (s + 1)]] == [seed] * 7
        assert mine == best
        assert summary["final_best_value"][s] == best[-1]
    on_disk = json.loads((tmp_path / "many" / "summary.json").read_text())
    assert on_disk["seeds"] == [3, 4] and on_disk["final_best_value"] == summary["final_best_value"]
    with pytest.raises(ValueError, match="already holds a GA run"):
        run_seeds(cfg, tmp_path / "many")
