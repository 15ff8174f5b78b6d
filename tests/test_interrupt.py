"""Ctrl-C, SIGTERM and SIGUSR2 (a scheduler's time-limit warning) end a run with one line saying
how to resume, no traceback (exit 130/143/140),
and the resumed run ends as an uninterrupted one. The first signal finishes the current round; a
second one abandons it (``runner._StopAtRoundEnd``)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

GA = [
    "ga",
    "--function",
    "f2",
    "--particles",
    "200",
    "--initial-generations",
    "3",
    "--generations-per-round",
    "1",
    "--mutation-prob",
    "0.05",  # keeps proposing new sequences: the run cannot stall and stop before the signal
    "--no-progress",
]


#: the CLI as a terminal starts it: Ctrl-C raises KeyboardInterrupt (a shell's background job,
#: which a test runner may be, starts with SIGINT ignored; no preexec_fn, which can deadlock in
#: the child of a multithreaded JAX process)
CLI = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from llome_jax.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _start(out: pathlib.Path, rounds: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLI, *GA, "--rounds", str(rounds), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_rounds(out: pathlib.Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        rounds = out / "rounds.jsonl"
        checkpoints = out / "checkpoints"
        if (
            rounds.exists()
            and len(rounds.read_text().splitlines()) >= count
            and checkpoints.is_dir()
            and any(p.name.isdigit() for p in checkpoints.iterdir())
        ):
            return
        time.sleep(0.2)
    raise AssertionError("the run did not reach its rounds in time")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGUSR2, 140)]
)
def test_an_interrupted_run_says_how_to_resume_and_resumes_exactly(
    sig: int, code: int, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "run"
    process = _start(out, 100_000)  # a cap it cannot reach: the signal ends it
    _wait_for_rounds(out, 2, process)
    process.send_signal(sig)
    _, err = process.communicate(timeout=300)
    assert process.returncode == code
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert len(lines) == 1, err
    said = {130: "(Ctrl-C)", 143: "(SIGTERM)", 140: "(SIGUSR2: time limit or preemption)"}
    assert f"interrupted {said[code]}" in lines[0]
    assert f"llome-jax ga --resume --out {out}" in lines[0] and "keeps rounds 0-" in lines[0]
    kept = int(lines[0].split("keeps rounds 0-")[1].split()[0])
    # resumed to two rounds more, it equals a run of that many rounds made in one go
    from llome_jax.cli import main

    target = str(kept + 2)
    assert main(["ga", "--resume", "--rounds", target, "--out", str(out), "--no-progress"]) == 0
    assert main([*GA, "--rounds", target, "--out", str(tmp_path / "once")]) == 0
    resumed = (out / "evaluated.csv").read_text()
    assert resumed == (tmp_path / "once" / "evaluated.csv").read_text()


class _SignalAt:
    """A tracker that sends this process ``count`` signals ``sig`` once round ``at`` is logged
    (that is, inside the round, before its checkpoint is written)."""

    def __init__(self, sig: int, at: int, count: int) -> None:
        self.sig, self.at, self.count = sig, at, count

    def start(self, config, run_dir, history) -> None:
        pass

    def log_round(self, record) -> None:
        if record["round"] == self.at:
            for _ in range(self.count):
                os.kill(os.getpid(), self.sig)
                time.sleep(0.05)  # the handler runs between bytecodes of this thread

    def finish(self, error) -> None:
        pass


def _ga_run(out: pathlib.Path, rounds: int, **options):
    from llome_jax import ga
    from llome_jax.ga.optimizer import GARunConfig, run

    cfg = GARunConfig(
        function="f2",
        rounds=rounds,
        round0_generations=3,
        generations_per_round=1,
        round0_ga=ga.GAConfig(num_particles=200, mutation_prob=0.05),
    )
    return run(cfg, out, progress=False, **options)


@pytest.mark.parametrize(
    ("sig", "count", "kept"),
    # one signal: round 2 is finished; two: round 2 is abandoned
    [(signal.SIGTERM, 1, 2), (signal.SIGTERM, 2, 1), (signal.SIGUSR2, 1, 2)],
    ids=["finish", "abandon", "usr2-finish"],
)
def test_a_signal_stops_at_the_round_boundary_and_a_second_abandons_the_round(
    sig: int, count: int, kept: int, tmp_path: pathlib.Path
) -> None:
    from llome_jax.run.integrity import checkpoint_steps
    from llome_jax.run.runner import Preempted, Terminated

    previous = signal.getsignal(sig)
    out = tmp_path / "run"
    with pytest.raises(Terminated) as stopped:
        _ga_run(out, 5, trackers=[_SignalAt(sig, 2, count)])
    assert isinstance(stopped.value, Preempted) == (sig == signal.SIGUSR2)
    assert signal.getsignal(sig) is previous  # the handlers are put back
    assert checkpoint_steps(out)[-1] == kept
    _ga_run(out, 4, resume=True)
    _ga_run(tmp_path / "once", 4)
    resumed = (out / "evaluated.csv").read_text()
    assert resumed == (tmp_path / "once" / "evaluated.csv").read_text()
