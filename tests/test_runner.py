"""The shared round driver (``llome_jax.run.runner``) with a toy plug-in: what it writes, when it
stops, and that an interrupted run resumes to the same files."""

from __future__ import annotations

import csv
import json
import pathlib
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax.metrics import round_metrics
from llome_jax.run import runner
from llome_jax.run.lock import RunDirectoryInUseError
from llome_jax.run.plotting import plot_run


class Countdown:
    """Labels 2 random sequences per round (L = 3, v = 5) with value = round / 4 (f = 1 at round 4)."""

    name = "countdown"

    def upgrade_config(self, saved: dict[str, Any]) -> dict[str, Any]:
        return saved

    def __init__(self, rounds: int, seed: int = 0) -> None:
        self.rounds, self.seed = rounds, seed

    def config_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "seed": self.seed}

    def total_rounds(self) -> int:
        return self.rounds

    def _label(self, key: jax.Array, r: int) -> tuple[dict[str, Any], runner.RoundResult]:
        x = np.asarray(jax.random.randint(jax.random.fold_in(key, r), (2, 3), 0, 5), np.int32)
        v = np.full(2, r / 4)
        state = {"key": key, "round": jnp.asarray(r, jnp.int32)}
        return state, runner.RoundResult(x, v, round_metrics(r, x, v, v))

    def init(self, key: jax.Array):
        return self._label(key, 0)

    def round(self, state, *, progress: bool = False):
        return self._label(state["key"], int(state["round"]) + 1)

    def round_index(self, state) -> int:
        return int(state["round"])

    def stop_reason(self, state) -> str:
        return "the optimum (f = 1) was found" if int(state["round"]) >= 4 else ""

    def save(self, manager, state) -> None:
        manager.save(int(state["round"]), state, {"round": int(state["round"])})

    def restore(self, manager):
        abstract = {"key": jax.eval_shape(lambda: jax.random.key(0)), "round": jnp.int32(0)}
        restored = manager.restore_latest_good(abstract)
        return None if restored is None else restored[1]

    def round0_description(self) -> str:
        return "toy"

    def round_line(self, record: Mapping[str, Any]) -> str:
        return f"round {record['round']}"

    def plot(self, run_dir) -> None:
        plot_run(run_dir, "countdown", "countdown")


def _rows(path: pathlib.Path) -> list[list[str]]:
    with open(path / "evaluated.csv", newline="") as stream:
        return list(csv.reader(stream))


def test_driver_writes_the_layout_and_stops_on_the_plugins_reason(tmp_path):
    lines: list[str] = []
    result = runner.run(Countdown(rounds=10), tmp_path / "run", log=lines.append)
    # rounds 0..4, then the plug-in's stop reason ends the run before round 10
    assert [r["round"] for r in result.records] == [0, 1, 2, 3, 4]
    assert result.stop_reason == "the optimum (f = 1) was found"
    assert lines[0] == "round 0 (toy): 2 distinct sequences, min regret 1.0000"
    assert lines[-1] == "stopped early after round 4: the optimum (f = 1) was found"
    rows = _rows(result.path)
    assert rows[0] == ["round", "sequence", "value"] and len(rows) == 1 + 5 * 2
    assert [float(r[2]) for r in rows[1:]] == [r / 4 for r in range(5) for _ in range(2)]
    records = [json.loads(x) for x in (result.path / "rounds.jsonl").read_text().splitlines()]
    assert [r["min_regret"] for r in records] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert all(r["seconds"] >= 0.0 for r in records)
    config = json.loads((result.path / "config.json").read_text())
    assert config["optimizer"] == "countdown" and config["rounds"] == 10
    assert (result.path / "regret.png").is_file()


def test_interrupted_run_resumes_to_the_same_files(tmp_path):
    full = runner.run(Countdown(rounds=3), tmp_path / "full", progress=False)
    runner.run(Countdown(rounds=3), tmp_path / "part", progress=False, max_rounds_this_call=1)
    # a half-written round 2 (logged, no checkpoint) is rolled back on resume
    with open(tmp_path / "part" / "evaluated.csv", "a") as stream:
        stream.write('2,"9,9,9",0.5\n')
    resumed = runner.run(Countdown(rounds=3), tmp_path / "part", resume=True, progress=False)
    assert _rows(resumed.path) == _rows(full.path)
    assert [r["round"] for r in resumed.records] == [2, 3]
    with pytest.raises(ValueError, match="configuration differs"):
        runner.run(Countdown(rounds=3, seed=1), tmp_path / "part", resume=True, progress=False)
    with pytest.raises(ValueError, match="already holds a run"):
        runner.run(Countdown(rounds=3), tmp_path / "part", progress=False)


_square = jax.jit(lambda x: x * x)


class CompilingCountdown(Countdown):
    """:class:`Countdown` whose every round first notes how many programs ``_square`` holds
    compiled, then calls it (one program: the same shape each round)."""

    def __init__(self, rounds: int) -> None:
        super().__init__(rounds)
        self.held_at_round_start: list[int] = []

    def _label(self, key: jax.Array, r: int) -> tuple[dict[str, Any], runner.RoundResult]:
        self.held_at_round_start.append(_square._cache_size())
        _square(jnp.float32(r))
        return super()._label(key, r)


@pytest.mark.parametrize(("limit", "held", "freed"), [(1, [0, 0, 0], 3), (10**9, [0, 1, 1], 0)])
def test_the_driver_frees_compiled_programs_after_a_round_only_near_the_mapping_limit(
    tmp_path, monkeypatch, limit, held, freed
):
    """After every round the driver asks ``compile_cache.release_if_crowded``: with a limit of
    1 mapping every round frees ``_square``'s program (and says so); far below the limit the
    program stays compiled from round to round."""
    from llome_jax.host import compile_cache

    release = compile_cache.release_if_crowded
    monkeypatch.setattr(
        compile_cache, "release_if_crowded", lambda: release(fraction=0.5, limit=limit)
    )
    compile_cache.release_programs()
    plugin, lines = CompilingCountdown(rounds=2), []
    runner.run(plugin, tmp_path / "run", log=lines.append)
    assert plugin.held_at_round_start == held
    said = [line for line in lines if line.startswith("freed the compiled programs")]
    assert len(said) == freed


def test_a_second_process_on_a_running_directory_stops_before_writing(tmp_path):
    """Two processes resuming one run directory would both roll back, label and append (seen in
    practice: a duplicate round in rounds.jsonl, then a checkpoint-order error). While another
    process holds the directory's lock, ``run`` refuses and leaves every file as it was."""
    part = tmp_path / "part"
    runner.run(Countdown(rounds=3), part, progress=False, max_rounds_this_call=1)
    before = {p.name: p.read_bytes() for p in part.iterdir() if p.is_file()}
    holder = subprocess.Popen(  # another process, holding the lock as a running run does
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()",
            str(part / ".lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirectoryInUseError, match="in use"):
            runner.run(Countdown(rounds=3), part, resume=True, progress=False)
        # a second process starting the same run as a new one (the paper driver's workers do)
        # is told the directory is in use, not that it "already holds a run"
        with pytest.raises(RunDirectoryInUseError, match="in use"):
            runner.run(Countdown(rounds=3), part, progress=False)
        assert {p.name: p.read_bytes() for p in part.iterdir() if p.is_file()} == before
    finally:
        holder.communicate("")
    resumed = runner.run(Countdown(rounds=3), part, resume=True, progress=False)
    assert [r["round"] for r in resumed.records] == [2, 3]  # free again once the holder exits


def test_print_config_shows_what_a_run_records(tmp_path, capsys):
    """``--print-config`` prints the configuration that ``config.json`` records (provenance aside)
    and writes nothing; without it, ``--out`` is required."""
    from llome_jax.cli import main as cli_main

    ga_args = ["ga", "--function", "Ehr(8,8)-2-2-2", "--instance-seed", "1", "--particles", "64"]
    ga_args += ["--rounds", "1", "--initial-generations", "2", "--generations-per-round", "1"]
    assert cli_main([*ga_args, "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert cli_main([*ga_args, "--out", str(tmp_path / "ga"), "--no-progress"]) == 0
    capsys.readouterr()
    recorded = json.loads((tmp_path / "ga" / "config.json").read_text())
    recorded.pop("provenance")
    assert printed == recorded
    for command in ("llome", "lambo2"):
        assert cli_main([command, "--preset", "smoke", "--print-config"]) == 0
        assert json.loads(capsys.readouterr().out)["optimizer"] == command
        assert cli_main([command, "--preset", "smoke"]) == 2
        assert "--out DIR is required" in capsys.readouterr().err
    assert not any(p.name != "ga" for p in tmp_path.iterdir())
