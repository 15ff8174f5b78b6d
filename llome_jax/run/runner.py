"""One driver for every optimizer: the round protocol and :func:`run`.

An optimizer (the GA, LLOME, LaMBO-2) is a plug-in that implements :class:`RoundOptimizer`, in the
spirit of evosax's ``init``/``ask``/``tell`` but per round of labels:

* ``init(key) -> (state, RoundResult)``: round 0, the seed data (``n0`` GA generations for LLOME
  and LaMBO-2) and any initial model;
* ``round(state) -> (state, RoundResult | None)``: one round, deterministic in ``state``; ``None``
  when the optimizer stopped before labelling anything (the returned state says why);
* ``save(manager, state)`` / ``restore(manager) -> state | None``: its checkpoint;
* ``round_index(state)``, ``stop_reason(state)`` ("" to go on), the log lines and the plot.
  Every optimizer stops once a label reaches the objective's optimum ``f*``
  (:func:`optimum_stop_reason`: nothing is left to find, and no more labels are paid).

:func:`run` owns everything else, identically for all of them: the run directory
(``config.json``, ``rounds.jsonl``, ``evaluated.csv``, ``regret.png``, ``checkpoints/``), resume
with rollback, one checkpoint per round, the per-round ``seconds``, progress lines, the plot and
the stop conditions (each round record's ``stop_reason``: why the run ends after it, ``""``
to go on), and the run's provenance in ``config.json`` (``llome_jax.run.provenance``, one
entry per invocation), and the metrics trackers (``llome_jax.run.tracking``: TensorBoard, W&B), which
get every record this call writes and are finished however the call ends. Order per round:
compute, append the labelled sequences and the round record (then the trackers get it), then
checkpoint; a resume rolls the logs back to the newest readable checkpoint and recomputes the rest
(identically), so no labelled sequence is lost or duplicated.

Ctrl-C (SIGINT), SIGTERM and SIGUSR2 during :func:`run` (in the main thread) finish the current
round: its labels, record and checkpoint are written, then ``KeyboardInterrupt``,
:class:`Terminated` or :class:`Preempted` is raised at the round boundary (the CLI turns it into
one line and exit 130/143/140). SIGUSR2 is the scheduler's warning before a time limit or a
preemption (submitit asks SLURM for it: ``#SBATCH --signal=USR2@90``); under submitit the sweep's
task then checkpoints and requeues (:mod:`llome_jax.sweep.requeue`). A second signal abandons the
round at once; the resume recomputes it from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import jax
import numpy as np

from llome_jax.host import compile_cache
from llome_jax.run.checkpoint import CheckpointManager
from llome_jax.run.integrity import repair as roll_back
from llome_jax.run.lock import acquire_lock
from llome_jax.run.provenance import provenance
from llome_jax.run.rundir import RunDirectory, _normalise

__all__ = [
    "Preempted",
    "RoundOptimizer",
    "RoundResult",
    "RunResult",
    "Terminated",
    "optimum_stop_reason",
    "progress_bar",
    "progress_text",
    "round0_key",
    "run",
]

State = TypeVar("State")


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """What one round labelled, and its record.

    Attributes:
      sequences: int ``[m, L]`` the sequences labelled this round (``evaluated.csv``).
      values: float ``[m]`` their values (``-inf`` infeasible).
      record: the ``rounds.jsonl`` record (``metrics.round_metrics`` fields and the optimizer's
        own); the driver sets ``seconds``.
    """

    sequences: np.ndarray
    values: np.ndarray
    record: dict[str, Any]


class RoundOptimizer(Protocol[State]):
    """The per-round protocol every optimizer implements (module docstring)."""

    #: ``config.json``'s ``"optimizer"`` and the plot label's prefix.
    name: str
    #: the run seed: round 0 gets ``jax.random.key(seed)``.
    seed: int

    def config_dict(self) -> dict[str, Any]:
        """The JSON configuration recorded in ``config.json`` (without ``"optimizer"``)."""
        ...

    def upgrade_config(self, saved: dict[str, Any]) -> dict[str, Any]:
        """A ``config.json`` written by an earlier version in today's form (settings added since
        set to the values that reproduce the old behaviour), for the comparison on resume;
        ``saved`` itself when nothing changed."""
        ...

    def total_rounds(self) -> int:
        """Rounds the run should reach (``config.rounds``)."""
        ...

    def init(self, key: jax.Array) -> tuple[State, RoundResult]:
        """Round 0."""
        ...

    def round(self, state: State, *, progress: bool = False) -> tuple[State, RoundResult | None]:
        """The next round; ``None`` when it cannot run (``stop_reason(state)`` then says why,
        and :func:`run` writes it to ``stopped.json``)."""
        ...

    def round_index(self, state: State) -> int: ...

    def stop_reason(self, state: State) -> str: ...

    def save(self, manager: Any, state: State) -> None: ...

    def restore(self, manager: Any) -> State | None: ...

    def round0_description(self) -> str:
        """What round 0 is, for its log line (e.g. ``"GA, 10 generations"``)."""
        ...

    def round_line(self, record: Mapping[str, Any]) -> str: ...

    def plot(self, run_dir: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class RunResult(Generic[State]):
    """Outcome of :func:`run`: the final state, the records this call wrote, why it stopped early
    (``""``: it did not) and the run directory."""

    state: State
    records: list[dict[str, Any]]
    stop_reason: str
    path: pathlib.Path


def round0_key(run_key: jax.Array) -> jax.Array:
    """The key of round 0's GA, ``fold_in(run_key, 1)`` (``llome.runtime.named_key(run_key,
    "ga")``), for every optimizer: with the same run seed, GA settings and ``n0``, the GA, LLOME,
    LaMBO-2 and local search pay for the same seed sequences in the same order (one round 0)."""
    return jax.random.fold_in(run_key, 1)


def optimum_stop_reason(best_value: float, optimal_value: float | None) -> str:
    """The stop reason once the best label reaches the optimum, ``best_value >= f*``:
    ``"the optimum (f = f*) was found"``; ``""`` otherwise or when ``f*`` is unknown (``None``)."""
    if optimal_value is not None and float(best_value) >= optimal_value:
        return f"the optimum (f = {optimal_value:g}) was found"
    return ""


def progress_text(record: Mapping[str, Any]) -> str:
    """``"min regret 0.1234"``, or ``"best value 7"`` for a record without regret (an objective
    whose optimum is unknown)."""
    if record.get("min_regret") is not None:
        return f"min regret {record['min_regret']:.4f}"
    best = record.get("best_value")
    return "best value n/a" if best is None else f"best value {best:.6g}"


def progress_bar(enabled: bool, **kwargs: Any) -> Any:
    """A transient tqdm bar (a no-op one when ``enabled`` is false)."""
    from tqdm.auto import tqdm  # lazy: tqdm.auto picks the notebook or terminal bar at import

    return tqdm(disable=not enabled, leave=False, dynamic_ncols=True, **kwargs)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a run stops as after Ctrl-C."""


class Preempted(Terminated):
    """SIGUSR2: the scheduler's warning before a time limit or a preemption (module docstring);
    a :class:`Terminated`, so that whatever stops on SIGTERM stops on it too."""


#: the signals :func:`run` stops at a round boundary on, with their names and what they raise
STOP_SIGNALS: tuple[tuple[str, str, type[BaseException]], ...] = (
    ("SIGINT", "Ctrl-C", KeyboardInterrupt),
    ("SIGTERM", "SIGTERM", Terminated),
    ("SIGUSR2", "SIGUSR2 (time limit or preemption)", Preempted),
)


class _StopAtRoundEnd:
    """Signal handlers for the rounds of :func:`run` (:data:`STOP_SIGNALS`): the first one is
    noted (one line through ``log``) and raised by :meth:`check` at the next round boundary, once
    the round's files and checkpoint are written; a second one raises at once. Installed only in
    the main thread; a SIGINT that the process ignores (a background job) stays ignored."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._pending: BaseException | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopAtRoundEnd:
        if threading.current_thread() is not threading.main_thread():
            return self
        for name, _, _ in STOP_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:  # SIGUSR2 where the platform has none
                continue
            previous = signal.getsignal(signum)
            if signum == signal.SIGINT and previous == signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        _, said, kind = next(
            entry for entry in STOP_SIGNALS if getattr(signal, entry[0], None) == signum
        )
        stop = kind()
        if self._pending is not None:  # the second signal: abandon the round now
            raise stop
        self._pending = stop
        short = said.split(" (")[0]
        self._log(f"{said}: finishing this round, then stopping ({short} again abandons it)")

    def check(self) -> None:
        """Raise the noted signal (between rounds, after the checkpoint)."""
        if self._pending is not None:
            raise self._pending


def run(
    optimizer: RoundOptimizer[State],
    out: str | pathlib.Path,
    *,
    resume: bool = False,
    progress: bool = True,
    max_rounds_this_call: int | None = None,
    log: Callable[[str], None] = print,
    extra_config: Mapping[str, Any] | None = None,
    trackers: Sequence[Any] = (),
    budget: int | None = None,
    bars: bool = True,
    repair: bool = False,
) -> RunResult[State]:
    """Run (or resume) ``optimizer`` into the run directory ``out``.

    Args:
      optimizer: the plug-in (already validated: nothing is written if its construction failed).
      out: the run directory.
      resume: continue from the newest readable checkpoint (the configuration must match except
        ``rounds``).
      progress: one line per round through ``log`` (``round k/N``, labels paid, the metric,
        elapsed time and an ETA; then the optimizer's own line) and the optimizer's progress
        bars.
      bars: with ``progress``, also the progress bars (``False``: the lines only, ``--quiet``).
      repair: with ``resume``, first roll a damaged directory back to its newest checkpointed
        round whose files agree (``run_integrity.repair``; a line says so); without it a damaged
        directory is refused.
      max_rounds_this_call: stop after this many rounds in this call (tests, interruptions).
      log: where the lines go.
      extra_config: more keys for ``config.json`` (e.g. the CLI's ``loss``).
      budget: labels to pay after round 0 (``config.json``'s ``"budget"``; ``None``: the one
        saved, or no budget). The run ends once it has paid exactly this many: the last round
        labels only what is left (``Oracle.affordable``), or earlier at ``rounds`` rounds or a
        stop reason. A resume may raise it (it is stored as the larger of the saved and the
        requested budget).
      trackers: metrics sinks (``llome_jax.run.tracking.Tracker``): ``start(config, run_dir,
        history)`` once the directory is set up (``history``: the records a resume keeps, which
        are not sent again), ``log_round(record)`` with every record this call writes (round 0
        included) as ``rounds.jsonl`` holds it, and ``finish(error)`` at the end, also when a
        round raises.

    Raises:
      ValueError: ``resume`` on a directory holding a different configuration (or another
        function behind the same name: ``config.json``'s ``function_digest``), or a new run in a
        directory that holds one; nothing is written then.
      rundir.NothingToDoError: ``resume`` with fewer rounds than the directory already holds;
        nothing is written (``config.json`` keeps the largest target ever asked for).
      run_lock.RunDirectoryInUseError: another process is running in ``out`` (it holds the directory's
        lock); nothing is written then.
    """
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
        raise ValueError(f"budget must be a positive number of labels; got {budget!r}.")
    if budget is not None and getattr(optimizer, "oracle", None) is None:
        raise ValueError(f"{optimizer.name} pays no labels through an Oracle: it has no budget.")
    config = {"optimizer": optimizer.name, **optimizer.config_dict(), **dict(extra_config or {})}
    if budget is not None:
        config["budget"] = budget
    # one provenance entry per invocation: a resume appends it to the saved ones (never compared)
    config["provenance"] = [provenance()]
    if repair and resume and pathlib.Path(out, "config.json").is_file():
        handle = acquire_lock(pathlib.Path(out))  # nobody else writes while it is cut
        try:
            step = roll_back(out)
        finally:
            handle.close()
        if step is not None:
            log(f"repaired {out}: rolled back to round {step}, whose files agree")
    run_dir = RunDirectory.create(
        out,
        config,
        resume=resume,
        mutable_keys=("rounds", "budget", "resume", "out", "provenance"),
        upgrade=optimizer.upgrade_config,
        lock=True,
        audit=True,
    )
    try:
        return _run_rounds(
            optimizer, run_dir, resume, progress, max_rounds_this_call, log, trackers, bars
        )
    finally:
        run_dir.release()


def _run_rounds(
    optimizer: RoundOptimizer[State],
    run_dir: Any,
    resume: bool,
    progress: bool,
    max_rounds_this_call: int | None,
    log: Callable[[str], None],
    trackers: Sequence[Any],
    bars: bool = True,
) -> RunResult[State]:
    """The body of :func:`run` once ``run_dir`` is open and locked."""
    records: list[dict[str, Any]] = []

    def log_round(record: dict[str, Any]) -> None:
        records.append(run_dir.log_round(record))
        written = _normalise(records[-1])  # exactly the rounds.jsonl line
        for tracker in trackers:
            tracker.log_round(written)

    # the trackers are finished last (after the manager's close, which may raise), in any case
    with (
        contextlib.ExitStack() as finish_trackers,
        CheckpointManager(run_dir.checkpoint_dir, max_to_keep=2) as manager,
        _StopAtRoundEnd(log) as interrupt,
    ):
        state = optimizer.restore(manager) if resume else None
        run_dir.rollback(-1 if state is None else optimizer.round_index(state))
        history = run_dir.rounds()
        oracle = getattr(optimizer, "oracle", None)
        if oracle is not None and state is not None:
            _, labelled_x, labelled_v = run_dir.evaluated()
            last = history[-1] if history else {}
            oracle.restore(
                labelled_x,
                labelled_v,
                num_paid=int(last.get("num_evaluations") or 0),
                num_constraint_queries=int(last.get("cum_constraint_queries") or 0),
            )
        for tracker in trackers:
            finish_trackers.push(
                _finisher(tracker)
            )  # before start: a half-started sink is closed too
            tracker.start(run_dir.config(), run_dir.path, history)
        budget = run_dir.config().get("budget")
        if state is None:
            t0 = time.perf_counter()
            queries = _queries(oracle)
            state, result = optimizer.init(jax.random.key(optimizer.seed))
            run_dir.log_evaluated(0, result.sequences, result.values)
            record = _stopped(_account(result.record, oracle, queries), optimizer, state)
            log_round({**record, "seconds": time.perf_counter() - t0})
            optimizer.save(manager, state)
            _release_if_crowded(log if progress else None)
            if progress:
                log(
                    f"round 0 ({optimizer.round0_description()}): {len(result.values)} distinct "
                    f"sequences, {progress_text(records[-1])}"
                )
        elif progress:
            log(f"resuming {run_dir.path} after round {optimizer.round_index(state)}")
        if budget is not None:  # labels after round 0: the cap counts round 0's too
            oracle.limit = int(_round0_labels(run_dir) or 0) + int(budget)
        done_here = 0
        round0 = _round0_labels(run_dir)
        paid = 0 if oracle is None else int(oracle.num_paid)
        start = (time.perf_counter(), optimizer.round_index(state), paid)
        while (
            optimizer.round_index(state) < optimizer.total_rounds()
            and not optimizer.stop_reason(state)
            and (oracle is None or oracle.remaining() != 0)
        ):
            interrupt.check()
            if max_rounds_this_call is not None and done_here >= max_rounds_this_call:
                break
            t0 = time.perf_counter()
            queries = _queries(oracle)
            state, result = optimizer.round(state, progress=progress and bars)
            if result is None:  # the round could not run: say why in the run directory
                run_dir.log_stop(optimizer.round_index(state), optimizer.stop_reason(state))
                break
            seconds = time.perf_counter() - t0
            run_dir.log_evaluated(optimizer.round_index(state), result.sequences, result.values)
            record = _stopped(_account(result.record, oracle, queries), optimizer, state)
            if not record["stop_reason"]:
                record["stop_reason"] = _short_of_budget(optimizer, state, oracle, budget, round0)
            log_round({**record, "seconds": seconds})
            optimizer.plot(run_dir)
            optimizer.save(manager, state)
            _release_if_crowded(log if progress else None)
            done_here += 1
            if progress:
                log(_run_line(records[-1], optimizer.total_rounds(), budget, round0, start))
                log("  " + optimizer.round_line(records[-1]))
        optimizer.plot(run_dir)
    reason = optimizer.stop_reason(state) or _short_of_budget(
        optimizer, state, oracle, budget, round0
    )
    if resume and done_here == 0 and history:  # a resume that found nothing left to run
        last = history[-1]
        spent = (
            ""
            if round0 is None or last.get("num_evaluations") is None
            else (f", {int(last['num_evaluations']) - round0:,} labels paid after round 0")
        )
        why = reason or (
            f"its budget of {int(budget):,} labels is spent"
            if budget is not None and oracle is not None and oracle.remaining() == 0
            else f"it has its {optimizer.total_rounds()} rounds"
        )
        log(
            f"nothing to do: {run_dir.path} already ended after round "
            f"{optimizer.round_index(state)} ({why}){spent}"
        )
    if reason and progress:
        log(f"stopped early after round {optimizer.round_index(state)}: {reason}")
    return RunResult(state=state, records=records, stop_reason=reason, path=run_dir.path)


def _short_of_budget(
    optimizer: Any, state: Any, oracle: Any, budget: int | None, round0: int | None
) -> str:
    """Why a run under a budget ends before spending it: its last round reached
    ``total_rounds()`` with labels left (``""`` otherwise), e.g. ``"its 2 rounds ended it after
    20 of its 32 labels after round 0 (--rounds caps a budget)"``."""
    if budget is None or oracle is None or not oracle.remaining():
        return ""
    if optimizer.round_index(state) < optimizer.total_rounds():
        return ""
    paid = int(oracle.num_paid) - int(round0 or 0)
    rounds = optimizer.total_rounds()
    return (
        f"its {rounds} round{'s' if rounds != 1 else ''} ended it after {paid:,} of its "
        f"{int(budget):,} labels after round 0 (--rounds caps a budget)"
    )


def _round0_labels(run_dir: Any) -> int | None:
    """Round 0's ``num_evaluations`` (``None`` when it records none)."""
    records = run_dir.rounds()
    paid = records[0].get("num_evaluations") if records else None
    return None if paid is None else int(paid)


def _clock(seconds: float) -> str:
    """``"42s"``, ``"12m05s"``, ``"3h07m"``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _run_line(
    record: Mapping[str, Any],
    rounds: int,
    budget: int | None,
    round0_labels: int | None,
    start: tuple[float, int, int],
) -> str:
    """The run-level line after a round: ``round k/N`` (``round k`` under a budget), labels
    paid (after round 0, of the budget), the metric, the time this call has run and an ETA: the
    labels left at this call's labels a second under a budget, else the rounds left at its
    seconds a round. ``start``: ``(time, round, labels paid)`` when this call's rounds began."""
    t0, round_start, paid_start = start
    elapsed = time.perf_counter() - t0
    k, paid = int(record["round"]), record.get("num_evaluations")
    eta = None
    if budget is not None and paid is not None and round0_labels is not None:
        after = int(paid) - round0_labels
        text = f"round {k}: {after:,}/{budget:,} labels after round 0"
        rate = (int(paid) - paid_start) / elapsed if elapsed > 0 else 0.0
        eta = (budget - after) / rate if rate > 0 else None
    else:
        text = f"round {k}/{rounds}" + ("" if paid is None else f": {int(paid):,} labels paid")
        if k > round_start:
            eta = (rounds - k) * elapsed / (k - round_start)
    return (
        f"{text}, {progress_text(record)}, {_clock(elapsed)} elapsed, "
        f"ETA {'n/a' if eta is None else _clock(eta)}"
    )


def _release_if_crowded(log: Callable[[str], None] | None) -> None:
    """After a round: free this process's compiled programs when their memory mappings near the
    kernel's limit (:func:`llome_jax.host.compile_cache.release_if_crowded`); the next round compiles
    what it needs again."""
    held = compile_cache.release_if_crowded()
    if held is not None and log is not None:
        log(f"freed the compiled programs: {held} memory mappings, over half of vm.max_map_count")


def _queries(oracle: Any) -> int:
    return 0 if oracle is None else int(oracle.num_constraint_queries)


def _account(record: Mapping[str, Any], oracle: Any, queries_before: int) -> dict[str, Any]:
    """``record`` with the information contract's counters (``llome_jax.oracle``):
    ``num_evaluations`` = paid labels so far, ``num_constraint_queries`` of this round and
    ``cum_constraint_queries``; ``record`` itself for a plug-in without an oracle."""
    if oracle is None:
        return dict(record)
    total = int(oracle.num_constraint_queries)
    return {
        **record,
        "num_evaluations": int(oracle.num_paid),
        "num_constraint_queries": total - queries_before,
        "cum_constraint_queries": total,
    }


def _stopped(record: dict[str, Any], optimizer: Any, state: Any) -> dict[str, Any]:
    """``record`` with ``stop_reason``: the optimizer's own (LLOME's rounds set it) or
    ``optimizer.stop_reason(state)`` after the round (``""`` to go on), so that every optimizer's
    run directory says why it ended (``RunDirectory.stop_reason``)."""
    if "stop_reason" in record:
        return record
    return {**record, "stop_reason": optimizer.stop_reason(state)}


def _finisher(tracker: Any) -> Callable[..., bool]:
    """An ``ExitStack`` exit callback calling ``tracker.finish(error)`` (the exception is not
    swallowed)."""

    def exit_(exc_type: Any, error: BaseException | None, traceback: Any) -> bool:
        tracker.finish(error)
        return False

    return exit_
