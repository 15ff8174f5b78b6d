"""The shared run directory and metrics."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from llome_jax import metrics
from llome_jax.run import plotting, rundir
from llome_jax.run.label_audit import (
    LabelAudit,
    cached_label_audit,
    label_audit,
    read_audit_cache,
    write_audit_cache,
)


def test_create_resume_and_config_mismatch(tmp_path):
    config = {"optimizer": "ga", "function": "f2", "rounds": 3, "lr": 1e-3}
    run = rundir.RunDirectory.create(tmp_path / "r", config)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["function"] == "f2"
    with pytest.raises(ValueError, match="already holds a run"):
        rundir.RunDirectory.create(tmp_path / "r", config)
    resumed = rundir.RunDirectory.create(tmp_path / "r", {**config, "rounds": 10}, resume=True)
    assert resumed.path == run.path
    before = (tmp_path / "r" / "config.json").read_text()
    with pytest.raises(ValueError, match=r"lr: saved 0\.001 vs now 0\.01"):
        rundir.RunDirectory.create(tmp_path / "r", {**config, "lr": 1e-2}, resume=True)
    assert (tmp_path / "r" / "config.json").read_text() == before
    with pytest.raises(ValueError, match="does not exist"):
        rundir.RunDirectory.create(tmp_path / "none", config, resume=True)


def test_resume_fills_settings_added_later_with_their_legacy_value(tmp_path):
    """A run made before a setting existed resumes through ``upgrade`` (a plug-in's migrations)
    when the setting holds its legacy value (the old behaviour) and refuses any other value; a
    saved value always wins over the legacy one."""
    old = {"optimizer": "llome", "function": "f2", "rounds": 3}
    rundir.RunDirectory.create(tmp_path / "r", old)
    legacy = {"exclude_labelled": False, "training_data": "latest"}

    def upgrade(saved):
        return {**legacy, **saved}

    same = {**old, "exclude_labelled": False, "training_data": "latest"}
    with pytest.raises(ValueError, match="configuration differs"):  # without the migration
        rundir.RunDirectory.create(tmp_path / "r", same, resume=True)
    with pytest.raises(ValueError, match="exclude_labelled: saved False vs now True"):
        rundir.RunDirectory.create(
            tmp_path / "r", {**same, "exclude_labelled": True}, resume=True, upgrade=upgrade
        )
    rundir.RunDirectory.create(tmp_path / "r", same, resume=True, upgrade=upgrade)
    # the resumed run's config.json now records the settings explicitly
    saved = json.loads((tmp_path / "r" / "config.json").read_text())
    assert saved["exclude_labelled"] is False and saved["training_data"] == "latest"
    new = {**old, "exclude_labelled": True}
    rundir.RunDirectory.create(tmp_path / "n", new)
    with pytest.raises(ValueError, match="exclude_labelled: saved True vs now False"):
        rundir.RunDirectory.create(
            tmp_path / "n", {**old, "exclude_labelled": False}, resume=True, upgrade=upgrade
        )


def test_flat_llome_config_json_reads_as_the_nested_configuration():
    """``config.json`` of a run directory made before ``LoopConfig`` was nested (the fixture was
    written by ``llome --preset smoke --loss marge --seed 3`` at commit 2604557) upgrades to the
    nested form of the same configuration, so such runs resume; differences survive the upgrade,
    and settings added after a directory was made take the values of the old behaviour (the
    LLOME migrations, ``llome_jax.run.migrations``)."""
    from llome_jax.llome.presets import preset
    from llome_jax.run.migrations import LLOME_MIGRATIONS, migrate

    def upgrade_saved_config(saved):
        return migrate(saved, LLOME_MIGRATIONS)

    version = {"config_version": len(LLOME_MIGRATIONS)}
    #: the settings added after the first runs, as the flat configuration named them
    added = (
        "exclude_labelled",
        "marge_weight_norm",
        "training_data",
        "sft_batch_size",
        "dpo_compute_dtype",
        "text_format",
        "head_on_targets",
        "accounting",
        "constraint_queries",
    )

    saved = json.loads(
        (pathlib.Path(__file__).parent / "fixtures" / "llome_config_flat.json").read_text()
    )
    # the run paid every evaluation and its Filter asked free constraint queries (the
    # behaviour before the information contract), and stopped below num_seeds unique
    # candidates (before the stop rule was sized): it resumes with exactly that
    now = preset(
        "smoke",
        seed=3,
        schedule=(("sft", 1), ("marge", 1)),
        accounting="every_evaluation",
        constraint_queries="free",
        min_unique_rule="paper",
    )
    assert rundir._normalise(upgrade_saved_config(saved)) == rundir._normalise(
        {"optimizer": "llome", **now.to_dict(), **version}
    )
    changed = upgrade_saved_config({**saved, "num_iterations": 3, "filter_rule": "reference"})
    assert changed["refine"]["num_iterations"] == 3 and changed["refine"] != now.to_dict()["refine"]
    assert changed["filter"]["strict_threshold"] is False  # the authors' Filter
    older = upgrade_saved_config({k: v for k, v in saved.items() if k not in added})
    assert older["exclude_labelled"] is False and older["training_data"] == "latest"
    assert older["finetune"]["marge_weight_norm"] == "mean"
    assert older["finetune"]["dpo_compute_dtype"] == "float32"
    assert older["finetune"]["sft_batch_size"] is None
    nested = now.to_dict()
    assert upgrade_saved_config(nested) == {**nested, **version}
    # a nested configuration saved before refine.share_prompts existed (a speed-only setting)
    before = {
        **nested,
        "refine": {k: v for k, v in nested["refine"].items() if k != "share_prompts"},
    }
    assert "share_prompts" not in before["refine"]
    assert upgrade_saved_config(before) == {**nested, **version}
    # ... and before finetune.reward_beta (an override, off by default)
    before_beta = {
        **nested,
        "finetune": {k: v for k, v in nested["finetune"].items() if k != "reward_beta"},
    }
    assert "reward_beta" not in before_beta["finetune"]
    assert upgrade_saved_config(before_beta) == {**nested, **version}
    # ... and before finetune.head_on_targets: its run scored every position, so it resumes
    # with False (the smoke and cpu presets' value), not today's default True
    paper_like = preset("smoke", **{"finetune.head_on_targets": True}).to_dict()
    before_window = {
        **paper_like,
        "finetune": {k: v for k, v in paper_like["finetune"].items() if k != "head_on_targets"},
    }
    upgraded = upgrade_saved_config(before_window)
    assert upgraded["finetune"]["head_on_targets"] is False
    assert upgrade_saved_config({**nested, "finetune": before_window["finetune"]}) == {
        **nested,
        **version,
    }
    assert older["finetune"]["head_on_targets"] is False


def test_log_read_and_rollback(tmp_path):
    run = rundir.RunDirectory.create(tmp_path, {"optimizer": "x"})
    for r in range(3):
        seqs = np.full((2, 4), r)
        run.log_evaluated(r, seqs, [0.25 * r, -np.inf])
        record = run.log_round(
            {"round": r, "num_evaluations": 2 * (r + 1), "train_loss": float("nan"), "extra": 1}
        )
        assert list(record)[: len(rundir.ROUND_FIELDS)] == list(rundir.ROUND_FIELDS)
    rounds, sequences, values = run.evaluated()
    np.testing.assert_array_equal(rounds, [0, 0, 1, 1, 2, 2])
    assert sequences.shape == (6, 4) and values[1] == -np.inf and values[4] == 0.5
    assert run.rounds()[1]["train_loss"] is None and run.rounds()[2]["extra"] == 1
    run.rollback(0)
    assert [r["round"] for r in run.rounds()] == [0]
    assert len(run.evaluated()[0]) == 2
    assert plotting.plot_run(run).stat().st_size > 1000
    # no min_regret in the rounds: one evaluation per csv row, running minimum
    evaluations, curve = run.regret_curve()
    np.testing.assert_array_equal(evaluations, [1, 2])
    np.testing.assert_array_equal(curve, [1.0, 1.0])


def test_a_stop_before_a_round_is_recorded_and_rolled_back_with_later_rounds(tmp_path):
    run = rundir.RunDirectory.create(tmp_path, {"optimizer": "x"})
    assert run.stopped() is None
    run.log_stop(2, "the labelled set yields no training pairs")
    assert json.loads((tmp_path / "stopped.json").read_text()) == {
        "after_round": 2,
        "stop_reason": "the labelled set yields no training pairs",
    }
    run.rollback(2)  # the stop follows the kept rounds: it stays
    assert run.stopped()["after_round"] == 2
    run.rollback(1)  # resuming from round 1: round 2 and the stop after it are gone
    assert run.stopped() is None and not (tmp_path / "stopped.json").exists()


def test_stop_reason_reads_a_stop_wherever_it_was_recorded(tmp_path):
    """A stop decided in a round is its record's ``stop_reason``; one before a round could run
    is ``stopped.json``; a run that did neither has none."""
    run = rundir.RunDirectory.create(tmp_path, {"optimizer": "x"})
    assert run.stop_reason() == ""
    lines = [{"round": 0, "stop_reason": ""}, {"round": 1, "stop_reason": "the optimum"}]
    run.rounds_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert run.stop_reason() == "the optimum"
    run.rounds_path.write_text(json.dumps(lines[0]) + "\n")
    assert run.stop_reason() == ""
    run.log_stop(0, "no training pairs")
    assert run.stop_reason() == "no training pairs"


def test_regret_curve_uses_the_rounds_own_accounting(tmp_path):
    """GA seed data: 10,000 oracle calls but only its distinct sequences in evaluated.csv."""
    run = rundir.RunDirectory.create(tmp_path, {"optimizer": "x"})
    run.log_evaluated(0, np.zeros((3, 4), int), [0.25, 0.5, -np.inf])
    run.log_round({"round": 0, "num_evaluations": 10_000, "min_regret": 0.5})
    run.log_evaluated(1, np.ones((2, 4), int), [0.75, 0.0])
    run.log_round({"round": 1, "num_evaluations": 10_002, "min_regret": 0.25})
    evaluations, curve = run.regret_curve()
    np.testing.assert_array_equal(evaluations, [10_000, 10_002])
    np.testing.assert_array_equal(curve, [0.5, 0.25])


def test_metrics_by_hand():
    np.testing.assert_allclose(metrics.regret([1.0, 0.25, -np.inf]), [0.0, 0.75, 1.0])
    assert metrics.frac_unique(np.array([[1, 2], [1, 2], [2, 1], [0, 0]])) == 0.75
    assert math.isnan(metrics.frac_unique(np.zeros((0, 2), int)))  # one semantics: NaN -> null
    assert (
        metrics.mean_hamming_to_nearest(
            np.array([[0, 0, 0, 0]]), np.array([[0, 1, 1, 1], [0, 0, 1, 1]])
        )
        == 0.5
    )
    record = metrics.round_metrics(
        2, np.array([[1, 2], [1, 2]]), [0.5, -np.inf], [0.25, 0.5, -np.inf], mean_reward=0.1
    )
    assert record == {
        "round": 2,
        "num_evaluations": 3,
        "num_generated": 2,
        "min_regret": 0.5,
        "mean_regret": 0.75,
        "frac_feasible": 0.5,
        "frac_unique": 0.5,
        "mean_reward": 0.1,
    }


def test_plot_regret_curves_with_ragged_seeds(tmp_path):
    curves = {
        "a": [
            (np.array([1, 10, 100]), np.array([0.9, 0.5, 0.1])),
            (np.array([1, 10]), np.array([1.0, 0.0])),
        ]
    }
    path = plotting.plot_regret_curves(curves, tmp_path / "p.png", title="t")
    assert path.stat().st_size > 1000


def test_label_audit_counts_what_the_run_directory_paid(tmp_path):
    """Rows, distinct sequences, the last record's paid labels and constraint queries; a run
    pays each label once only when all three counts agree."""
    run = rundir.RunDirectory.create(tmp_path, {"optimizer": "x"})
    assert label_audit(run) is None  # nothing labelled yet
    run.log_evaluated(0, [[0, 1], [1, 0], [2, 2]], [0.1, 0.2, 0.3])
    run.log_round({"round": 0, "num_evaluations": 3, "cum_constraint_queries": 0})
    once = label_audit(run)
    assert once == LabelAudit(labels=3, distinct=3, num_evaluations=3, constraint_queries=0)
    assert once.pays_once
    # round 1 labels [1, 0] again (paid twice) and one new sequence; 4 constraint queries
    run.log_evaluated(1, [[1, 0], [3, 3]], [0.2, 0.4])
    run.log_round({"round": 1, "num_evaluations": 5, "cum_constraint_queries": 4})
    twice = label_audit(run)
    assert (twice.labels, twice.distinct, twice.constraint_queries) == (5, 4, 4)
    assert not twice.pays_once
    # distinct rows, but the record claims more paid labels than were recorded
    other = rundir.RunDirectory.create(tmp_path / "other", {"optimizer": "x"})
    other.log_evaluated(0, [[0, 1]], [0.1])
    other.log_round({"round": 0, "num_evaluations": 10_000})
    assert label_audit(other).constraint_queries is None
    assert not label_audit(other).pays_once


def test_a_cached_label_audit_is_reused_until_the_run_changes(tmp_path):
    """The cache's entry stands in for ``evaluated.csv`` while its size and time match (shown by
    an entry made to differ from the file: it is what comes back), and a run that labels more is
    read again."""
    run = rundir.RunDirectory.create(tmp_path / "run", {"optimizer": "x"})
    run.log_evaluated(0, [[0, 1], [1, 0]], [0.1, 0.2])
    run.log_round({"round": 0, "num_evaluations": 2, "cum_constraint_queries": 0})
    cache_path = tmp_path / "cache" / "audits.json"
    cache = read_audit_cache(cache_path)
    assert cache == {}  # no file yet
    first = cached_label_audit(run, cache, "r")
    assert first == LabelAudit(labels=2, distinct=2, num_evaluations=2, constraint_queries=0)
    write_audit_cache(cache_path, cache)
    cache = read_audit_cache(cache_path)
    cache["r"]["audit"]["labels"] = 99  # not what evaluated.csv holds
    assert cached_label_audit(run, cache, "r").labels == 99  # the file was not read
    run.log_evaluated(1, [[1, 0]], [0.2])  # labelled again: the stamp no longer matches
    run.log_round({"round": 1, "num_evaluations": 3, "cum_constraint_queries": 0})
    again = cached_label_audit(run, cache, "r")
    assert (again.labels, again.distinct, again.num_evaluations) == (3, 2, 3)
    assert cache["r"]["audit"]["labels"] == 3
