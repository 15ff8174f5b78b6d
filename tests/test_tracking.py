"""Metrics trackers (``llome_jax.run.tracking``) under the round driver: what TensorBoard's event files
and W&B's calls hold equals the ``rounds.jsonl`` the driver wrote, at ``num_evaluations`` steps;
a resume neither loses nor doubles a point; ``finish`` runs when a round raises; a missing
package is one clear CLI error."""

from __future__ import annotations

import json
import math
import pathlib
import struct
import subprocess
import sys
import types
from typing import Any

import numpy as np
import pytest

from llome_jax import cli, ga
from llome_jax.ga.optimizer import GARunConfig, GeneticAlgorithm, run
from llome_jax.run.tracking import TensorBoardTracker, _import_tensorboardx

# the event protos through the tracker's import, so this module does not load torch either
_event_pb2 = _import_tensorboardx().proto.event_pb2
Event, SessionLog = _event_pb2.Event, _event_pb2.SessionLog

FUNCTION = "f1"  # Ehr(8,128)-8-8-8: far from solved in a few generations (no early stop)
CFG = GARunConfig(
    function=FUNCTION,
    seed=3,
    rounds=3,
    round0_generations=2,
    generations_per_round=1,
    round0_ga=ga.GAConfig(num_particles=64, mutation_prob=0.05),
)
CLI_GA = [
    "ga",
    "--function",
    FUNCTION,
    "--particles",
    "64",
    "--initial-generations",
    "2",
    "--generations-per-round",
    "1",
    "--no-progress",
]


# ------------------------------------------------------------------------------ helpers
def _rounds(out: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]


def _expected_numbers(record: dict[str, Any]) -> dict[str, float]:
    """Written independently of ``tracking.numeric_fields``: the record's finite numbers."""
    return {
        k: v
        for k, v in record.items()
        if type(v) in (int, float) and math.isfinite(v)  # bool is not int here
    }


def _events(logdir: pathlib.Path) -> list[Event]:
    """Every ``Event`` of every event file (TFRecord: u64 length, u32 crc, data, u32 crc), files
    in name order as TensorBoard reads them."""
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {logdir}"
    events = []
    for path in files:
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            events.append(Event.FromString(data[offset + 12 : offset + 12 + length]))
            offset += 12 + length + 4
        assert offset == len(data), f"truncated record in {path}"
    return events


def _scalars(events: list[Event], *, purge: bool = True) -> dict[str, list[tuple[int, float]]]:
    """``tag -> [(step, value)]``; with ``purge``, as TensorBoard shows them: a
    ``SessionLog.START`` at step s drops the points read so far at steps >= s."""
    series: dict[str, list[tuple[int, float]]] = {}
    for event in events:
        if purge and event.session_log.status == SessionLog.START:
            series = {t: [p for p in pts if p[0] < event.step] for t, pts in series.items()}
        for value in event.summary.value:
            if value.HasField("simple_value"):
                series.setdefault(value.tag, []).append((event.step, value.simple_value))
    return series


def _assert_scalars_equal_rounds(series, records) -> None:
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for tag, value in _expected_numbers(record).items():
            expected.setdefault(tag, []).append(
                (record["num_evaluations"], float(np.float32(value)))
            )
    assert {"round", "num_evaluations", "min_regret", "mean_regret", "seconds"} <= set(expected)
    assert series == expected


# ------------------------------------------------------------------------------ TensorBoard
def test_tensorboard_tracker_does_not_load_torch(tmp_path: pathlib.Path) -> None:
    """tensorboardX imports torch when it is installed; the tracker keeps it out of the process
    (torch is a test-only dependency). Checked in a fresh interpreter, with torch installed."""
    pytest.importorskip("torch")
    script = (
        "import sys, pathlib\n"
        "from llome_jax.run.tracking import TensorBoardTracker\n"
        "tracker = TensorBoardTracker()\n"
        f"tracker.start({{'function': 'f1'}}, pathlib.Path({str(tmp_path)!r}))\n"
        "tracker.log_round({'round': 0, 'num_evaluations': 5, 'min_regret': 0.5})\n"
        "tracker.finish()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert _scalars(_events(tmp_path / "tensorboard"))["min_regret"] == [(5, 0.5)]


def test_cli_tensorboard_scalars_equal_rounds_jsonl(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "run"
    assert cli.main([*CLI_GA, "--rounds", "2", "--out", str(out), "--tracker", "tensorboard"]) == 0
    records = _rounds(out)
    assert [r["round"] for r in records] == [0, 1, 2]
    events = _events(out / "tensorboard")
    _assert_scalars_equal_rounds(_scalars(events), records)
    # the min_regret curve at its steps (the paper's axes), spelled out
    assert _scalars(events)["min_regret"] == [
        (r["num_evaluations"], float(np.float32(r["min_regret"]))) for r in records
    ]
    # the configuration as text and as hyper-parameters
    tags = {v.tag for e in events for v in e.summary.value}
    assert {"config/text_summary", "_hparams_/experiment", "_hparams_/session_start_info"} <= tags
    assert "_hparams_/session_end_info" in tags  # a clean finish
    text = next(v for e in events for v in e.summary.value if v.tag == "config/text_summary")
    shown = json.loads(b"".join(text.tensor.string_val).decode())
    assert shown == json.loads((out / "config.json").read_text())


def test_resume_after_a_crash_shows_each_round_once(tmp_path: pathlib.Path, monkeypatch) -> None:
    """Round 2 is logged, then its checkpoint fails: the resume recomputes it, and TensorBoard's
    purge hides the first copy (whose ``seconds`` differ)."""
    out = tmp_path / "run"
    save = GeneticAlgorithm.save

    def crash_at_round_2(self, manager, state):
        if self.round_index(state) == 2:
            raise RuntimeError("killed before the checkpoint")
        save(self, manager, state)

    monkeypatch.setattr(GeneticAlgorithm, "save", crash_at_round_2)
    with pytest.raises(RuntimeError, match="killed"):
        run(CFG, out, progress=False, trackers=[TensorBoardTracker()])
    assert [r["round"] for r in _rounds(out)] == [0, 1, 2]
    monkeypatch.setattr(GeneticAlgorithm, "save", save)

    result = run(CFG, out, resume=True, progress=False, trackers=[TensorBoardTracker()])
    assert [r["round"] for r in result.records] == [2, 3]
    records = _rounds(out)
    assert [r["round"] for r in records] == [0, 1, 2, 3]
    events = _events(out / "tensorboard")
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2
    raw = [step for step, _ in _scalars(events, purge=False)["round"]]
    assert raw.count(records[2]["num_evaluations"]) == 2  # the scenario did log round 2 twice
    _assert_scalars_equal_rounds(_scalars(events), records)


def test_finish_runs_when_a_round_raises(tmp_path: pathlib.Path, monkeypatch) -> None:
    calls: list[tuple[str, Any]] = []

    class Recorder:
        def start(self, config, run_dir, history=()):
            calls.append(("start", (config, run_dir, list(history))))

        def log_round(self, record):
            calls.append(("log_round", record))

        def finish(self, error=None):
            calls.append(("finish", error))

    def broken_round(self, state, *, progress=False):
        raise RuntimeError("round 1 failed")

    monkeypatch.setattr(GeneticAlgorithm, "round", broken_round)
    out = tmp_path / "run"
    board = TensorBoardTracker()
    with pytest.raises(RuntimeError, match="round 1 failed"):
        run(CFG, out, progress=False, trackers=[Recorder(), board])
    records = _rounds(out)
    assert [name for name, _ in calls] == ["start", "log_round", "finish"]
    assert calls[0][1] == (json.loads((out / "config.json").read_text()), out, [])
    assert calls[1][1] == records[0]
    assert isinstance(calls[2][1], RuntimeError)
    # the TensorBoard sink was closed with round 0 on disk and no "success" session end
    events = _events(out / "tensorboard")
    _assert_scalars_equal_rounds(_scalars(events), records)
    assert "_hparams_/session_end_info" not in {v.tag for e in events for v in e.summary.value}


# ------------------------------------------------------------------------------ W&B
class _FakeWandb:
    """A ``wandb`` module recording ``init`` / ``run.define_metric`` / ``run.log`` /
    ``run.finish``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.module = types.ModuleType("wandb")
        self.module.init = self.init

    def init(self, **kwargs: Any) -> Any:
        self.calls.append(("init", kwargs))
        calls = self.calls

        class Run:
            def define_metric(self, name, **kwargs):
                calls.append(("define_metric", (name, kwargs)))

            def log(self, data, **kwargs):
                calls.append(("log", (dict(data), kwargs)))

            def finish(self, **kwargs):
                calls.append(("finish", kwargs))

        return Run()


def test_cli_wandb_logs_every_record(tmp_path: pathlib.Path, monkeypatch) -> None:
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake.module)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    out = tmp_path / "run"
    args = [*CLI_GA, "--out", str(out), "--tracker", "wandb"]
    assert cli.main([*args, "--rounds", "1"]) == 0
    first = _rounds(out)
    assert [r["round"] for r in first] == [0, 1]
    init = fake.calls[0]
    assert init == (
        "init",
        {
            "project": "llome-jax",
            "mode": "offline",
            "dir": str(out),
            "name": "run",
            "config": json.loads((out / "config.json").read_text()),
        },
    )
    logs = [payload for name, payload in fake.calls if name == "log"]
    assert logs == [(_expected_numbers(r), {}) for r in first]
    assert ("define_metric", ("*", {"step_metric": "num_evaluations"})) in fake.calls
    assert fake.calls[-1] == ("finish", {"exit_code": 0})

    # a resume is a new W&B run that logs the kept history first, then the new rounds
    fake.calls.clear()
    assert cli.main([*args, "--rounds", "2", "--resume"]) == 0
    records = _rounds(out)
    assert [r["round"] for r in records] == [0, 1, 2]
    assert records[:2] == first
    assert [c[0] for c in fake.calls].count("init") == 1
    logs = [payload for name, payload in fake.calls if name == "log"]
    assert logs == [(_expected_numbers(r), {}) for r in records]
    assert fake.calls[-1] == ("finish", {"exit_code": 0})


# ------------------------------------------------------------------------------ CLI errors
def test_missing_package_is_one_clear_error_before_the_run(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    out = tmp_path / "run"
    assert cli.main([*CLI_GA, "--rounds", "1", "--out", str(out), "--tracker", "wandb"]) == 2
    assert 'pip install "llome-jax[tracking]"' in capsys.readouterr().err
    assert not out.exists()  # nothing was written
    # the many-seeds GA mode has no rounds to track
    args = ["ga", "--function", FUNCTION, "--generations", "2"]
    assert cli.main([*args, "--out", str(out), "--tracker", "tensorboard"]) == 2
    assert "--tracker" in capsys.readouterr().err
    assert not out.exists()
