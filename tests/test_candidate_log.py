"""The optional candidate log of a LLOME round (``llome_round(on_candidates=...)``,
``Llome(candidates_dir=...)``): what it holds, and that it changes nothing else."""

from __future__ import annotations

import pathlib

import jax
import numpy as np

from llome_jax import ehrlich
from llome_jax.llome.loop import Llome
from llome_jax.llome.presets import preset
from llome_jax.llome.round import CANDIDATE_FIELDS
from llome_jax.llome.runtime import Runtime


def test_candidate_log_holds_the_round_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    cfg = preset("smoke", schedule="sft:1", rounds=1)
    runtime = Runtime.build(cfg)
    plain = Llome(cfg, runtime)
    logged = Llome(cfg, runtime, candidates_dir=tmp_path / "candidates")
    state0, _ = plain.init(jax.random.key(cfg.seed))
    state0_b, _ = logged.init(jax.random.key(cfg.seed))  # its oracle holds round 0 too

    state_a, result_a = plain.round(state0)
    state_b, result_b = logged.round(state0_b)

    # the log changes nothing: same labels, same record (timings aside), same archive
    assert result_a is not None and result_b is not None
    np.testing.assert_array_equal(result_a.sequences, result_b.sequences)
    np.testing.assert_array_equal(result_a.values, result_b.values)
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("time_")}  # noqa: E731
    assert strip(result_a.record) == strip(result_b.record)
    np.testing.assert_array_equal(state_a.archive_sequences, state_b.archive_sequences)

    files = sorted((tmp_path / "candidates").glob("*.npz"))
    assert [f.name for f in files] == ["round_0001.npz"]
    with np.load(files[0]) as data:
        log = {k: data[k] for k in data.files}
    assert set(CANDIDATE_FIELDS) <= set(log)
    assert int(log["round"]) == 1 and str(log["loss"]) == "sft"
    m = log["sequences"].shape[0]
    assert m == result_b.record["num_unique"] > 0
    for name in CANDIDATE_FIELDS:
        assert log[name].shape[0] == m, name
    # the selected rows are exactly the labelled sequences, with their labels
    selected = log["sequences"][log["selected"]]
    assert sorted(map(tuple, selected.tolist())) == sorted(map(tuple, result_b.sequences.tolist()))
    order = {tuple(x): v for x, v in zip(result_b.sequences.tolist(), result_b.values.tolist())}
    np.testing.assert_array_equal(
        log["values"][log["selected"]], [order[tuple(x)] for x in selected.tolist()]
    )
    # every candidate's value is f(x) (an Ehrlich function: a free diagnostic)
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    np.testing.assert_array_equal(log["values"], np.asarray(ehrlich.evaluate(fn, log["sequences"])))
    np.testing.assert_array_equal(
        log["feasible"], np.asarray(ehrlich.is_feasible(fn, log["sequences"]))
    )
    assert log["iteration"].min() >= 1 and log["iteration"].max() <= cfg.refine.num_iterations
    assert np.all(log["log_likelihood_raw"] <= 0.0)
