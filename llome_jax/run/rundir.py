"""The shared run directory: one layout for every optimizer (GA, LaMBO-2, LLOME).

A run directory holds

* ``config.json`` — the run's configuration (a resume with a different one is refused), pinned
  to the function it optimises (``function_digest`` / ``objective_digest``: a resume on another
  instance behind the same name is refused) and never contradicting the data: ``rounds`` is the
  largest target ever asked for, so a resume never lowers it;
* ``rounds.jsonl`` — one JSON object per round with the fields ``ROUND_FIELDS``;
* ``evaluated.csv`` — every labelled sequence: ``round,sequence,value`` (sequence as a quoted
  comma-separated list, value as a float with ``-inf`` for infeasible);
* ``regret.png`` — minimum simple regret vs labels paid (``num_evaluations``), drawn by
  :func:`llome_jax.run.plotting.plot_run`;
* ``checkpoints/`` — orbax checkpoints (written by the optimizer);
* ``stopped.json`` — why the run ended when the next round could not run at all
  (:meth:`RunDirectory.log_stop`);
* ``.lock`` — an empty file that a running process holds an exclusive ``flock`` on
  (``create(..., lock=True)``, as the round driver does), so a second process started on the same
  directory stops with a clear error before it writes anything.

so that results of different optimizers can be compared file for file. Metrics follow the paper
(Sec. 4.2): ``regret(x) = 1 - f(x)``; ``min_regret`` is over every labelled sequence so far,
``mean_regret`` over the round's sequences; infeasible sequences have regret 1 (the worst value a
feasible sequence can have), so averages stay finite.

For an :class:`~llome_jax.objective.Objective` of your own, ``regret(x) = f* - f(x)`` with its
``optimal_value`` ``f*`` (infeasible sequences count as its ``worst_value``, or are left out of
``min_regret``/``mean_regret`` when that is unknown). With no known optimum ``min_regret`` and
``mean_regret`` are null and ``best_value`` (``max f`` so far, in every optimizer's records) is
the progress measure; ``regret.png`` then plots the best value
(:func:`llome_jax.run.plotting.plot_options`). Figures are drawn by :mod:`llome_jax.run.plotting`, what a
run paid for is read by :mod:`llome_jax.run.label_audit`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from llome_jax import metrics
from llome_jax.run import files
from llome_jax.run import lock as run_lock
from llome_jax.run.integrity import _read_rows, audit_for_resume

__all__ = [
    "ROUND_FIELDS",
    "NothingToDoError",
    "RunDirectory",
    "sequence_from_string",
    "sequence_to_string",
]

#: Fields of each ``rounds.jsonl`` record (missing ones are written as null).
ROUND_FIELDS: tuple[str, ...] = (
    "round",
    "num_evaluations",
    "num_proposals",
    "num_constraint_queries",
    "cum_constraint_queries",
    "num_generated",
    "min_regret",
    "mean_regret",
    "frac_feasible",
    "frac_unique",
    "mean_hamming",
    "mean_reward",
    "train_loss",
    "temperature_offset",
    "seconds",
)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------
def sequence_to_string(sequence: Iterable[int]) -> str:
    """``[3, 1, 0]`` -> ``"3,1,0"``."""
    return ",".join(str(int(token)) for token in sequence)


def sequence_from_string(text: str) -> list[int]:
    """``"3,1,0"`` (or ``"[3, 1, 0]"``) -> ``[3, 1, 0]``."""
    text = text.strip().strip("[]")
    return [int(token) for token in text.split(",") if token.strip()]


def _normalise(value: Any) -> Any:
    """JSON round-trip so that tuples, numpy scalars and dataclasses compare equal."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=_json_default, sort_keys=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, pathlib.Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _json_float(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class NothingToDoError(ValueError):
    """A resume asked for fewer rounds than the run directory already holds: nothing is run and
    nothing is written (the command line reports it and exits 0)."""


def _short(digest: Any) -> str:
    return str(digest).removeprefix("sha256:")[:12] if digest else "none"


def _changed_function(
    directory: pathlib.Path, saved: Mapping[str, Any], config: Mapping[str, Any], keys: list[str]
) -> str:
    """The one-line refusal of a resume whose settings match but whose function does not."""
    digests = "; ".join(
        f"{key} {_short(saved.get(key))} saved, {_short(config.get(key))} now" for key in keys
    )
    if "objective" in config:
        what = f"objective {config['objective']!r} is not the one the run used (its code changed)"
    else:
        seed = config.get("instance_seed")
        what = f"function {config.get('function')!r}" + (
            "" if seed is None else f" (instance seed {seed})"
        )
        what += " now gives another Ehrlich instance than the run used"
    return (
        f"cannot resume {directory}: the {what} ({digests}). Restore the original or start a "
        "new --out."
    )


def _differences(key: str, saved: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """``(dotted key, saved, now)`` for each leaf that differs (a nested setting is named by
    its path, ``finetune.epochs``, instead of printing both dicts)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return [
            item
            for k in sorted(set(saved) | set(now))
            if saved.get(k) != now.get(k)
            for item in _differences(f"{key}.{k}", saved.get(k), now.get(k))
        ]
    return [(key, saved, now)]


def _resumed_rounds(
    run_dir: RunDirectory, saved: Mapping[str, Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """``{"rounds": target}`` for a resumed ``config.json``: the larger of the saved and the
    requested target (absent when either is not an integer); likewise ``"budget"``.

    Raises:
      NothingToDoError: the request is below the last round ``rounds.jsonl`` holds, or the
        requested budget below the saved one.
    """
    out: dict[str, Any] = {}
    budget, saved_budget = config.get("budget"), saved.get("budget")
    if isinstance(budget, int) and isinstance(saved_budget, int):
        if budget < saved_budget:  # a budget, like rounds, only grows
            raise NothingToDoError(
                f"nothing to do: {run_dir.path} has a budget of {saved_budget:,} labels after "
                f"round 0 (asked for {budget:,}); a budget only grows, config.json is unchanged. "
                f"Pass --budget N with N > {saved_budget:,} to pay more."
            )
        out["budget"] = budget
    requested, target = config.get("rounds"), saved.get("rounds")
    if not isinstance(requested, int) or not isinstance(target, int):
        return out
    done = [r.get("round") for r in run_dir.rounds() if isinstance(r.get("round"), int)]
    if done and requested < max(done):
        raise NothingToDoError(
            f"nothing to do: {run_dir.path} already has {max(done)} rounds (asked for "
            f"{requested}; its target is {target}); config.json is unchanged. Pass --rounds N "
            f"with N > {max(done)} to run more."
        )
    return {**out, "rounds": max(requested, target)}


@dataclasses.dataclass
class RunDirectory:
    """A run directory (see the module docstring). Create it with :meth:`create`."""

    path: pathlib.Path
    lock_handle: Any = dataclasses.field(default=None, repr=False, compare=False)

    CONFIG = "config.json"
    ROUNDS = "rounds.jsonl"
    EVALUATED = "evaluated.csv"
    REGRET_PLOT = "regret.png"
    LOCK = run_lock.LOCK
    #: keys that pin the function a run optimises (``objective.objective_config``). A run made
    #: before they were recorded lacks them: its resume adopts the current value (not recorded
    #: then, so not comparable) and records it from then on.
    PINNING_KEYS = ("function_digest", "objective_digest")
    #: lists a resume appends to instead of comparing (one entry per invocation).
    APPENDED_KEYS = ("provenance",)
    #: keys a resume must be given again, never taken from the saved file (a plugged-in
    #: objective; the function's digests are :attr:`PINNING_KEYS`).
    NEVER_CARRIED = ("objective", "objective_info")

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        config: Mapping[str, Any],
        *,
        resume: bool = False,
        mutable_keys: Sequence[str] = ("rounds", "generations", "resume", "out"),
        upgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        lock: bool = False,
        audit: bool = False,
    ) -> RunDirectory:
        """Open a run directory.

        Args:
          path: the directory.
          config: the run's configuration (JSON-serialisable).
          resume: continue an existing run. Its ``config.json`` must equal ``config`` except for
            ``mutable_keys`` (e.g. more rounds); a key only the saved file has is a record
            another caller wrote (the paper driver's ``method``) and is kept, unless it pins the
            function or objective. A new run refuses a non-empty directory.
          mutable_keys: keys that may differ on resume.
          upgrade: turns a saved ``config.json`` written by an earlier version into today's form
            before the comparison (a plug-in's ``upgrade_config``: its migrations,
            :mod:`llome_jax.run.migrations`), so that a run made before a setting existed resumes
            with the value that reproduces its behaviour and refuses another one.
          lock: hold an exclusive lock on the directory until :meth:`release` (taken before the
            checks when the directory exists, so that a second process starting the same run
            is told it is in use; otherwise once it is made, before ``config.json`` is written).
          audit: on resume, first check that the round driver's files agree
            (:func:`llome_jax.run.integrity.check_run_directory`; the round driver sets it).

        On resume, ``config.json`` never contradicts the data: an integer ``rounds`` is stored as
        the larger of the saved and the requested target, and a request below the rounds
        ``rounds.jsonl`` already holds raises :class:`NothingToDoError`. Keys of
        :attr:`APPENDED_KEYS` (``provenance``) are appended to the saved lists, and
        :attr:`PINNING_KEYS` missing from an older ``config.json`` are adopted (not recorded).

        Raises:
          ValueError: on a configuration mismatch (a changed function is named as such), an
            unreadable ``config.json``, a path that is a file, or an existing run without
            ``resume``; nothing is written in that case.
          run_integrity.DamagedRunError: ``audit`` and ``resume`` on a directory whose files disagree
            (:func:`llome_jax.run.integrity.check_run_directory`); nothing is written.
          NothingToDoError: a resume asking for fewer rounds than the directory holds; nothing
            is written.
          RunDirectoryInUseError: ``lock`` while another process holds the lock; nothing is written
            but the empty lock file.
        """
        directory = pathlib.Path(path)
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"{directory} is a file, not a run directory; choose another --out.")
        # the lock first, so that of two processes starting the same run at once one is told the
        # directory is in use (RunDirectoryInUseError), never that it "already holds a run"
        handle = run_lock.acquire_lock(directory) if lock and directory.is_dir() else None
        try:
            config = _normalise(dict(config))
            if audit and resume and (directory / cls.CONFIG).is_file():
                files.read_config(directory / cls.CONFIG)  # an unreadable one is named first
                audit_for_resume(directory)  # damage refused before anything is written
            config = cls._checked_config(directory, config, resume, mutable_keys, upgrade)
        except BaseException:
            if handle is not None:
                handle.close()
            raise
        directory.mkdir(parents=True, exist_ok=True)
        if lock and handle is None:
            handle = run_lock.acquire_lock(directory)
            if (directory / cls.CONFIG).exists() and not resume:  # created meanwhile
                handle.close()
                raise run_lock.RunDirectoryInUseError(
                    f"{directory} was just started by another process; it is left to that one."
                )
        files.atomic_write_text(
            directory / cls.CONFIG, json.dumps(config, indent=1, sort_keys=True) + "\n"
        )
        return cls(directory, handle)

    @classmethod
    def _checked_config(
        cls,
        directory: pathlib.Path,
        config: dict[str, Any],
        resume: bool,
        mutable_keys: Sequence[str],
        upgrade: Any,
    ) -> dict[str, Any]:
        """The configuration :meth:`create` writes, after its checks (its docstring)."""
        config_path = directory / cls.CONFIG
        if resume:
            if not config_path.exists():
                raise ValueError(
                    f"cannot resume: {config_path} does not exist (start without --resume)."
                )
            saved = files.read_config(config_path)
            for key in cls.PINNING_KEYS:
                if key not in saved and key in config:
                    saved[key] = config[key]
            appended = {
                key: [*saved.get(key, []), *config[key]]
                for key in cls.APPENDED_KEYS
                if isinstance(config.get(key), list) and isinstance(saved.get(key, []), list)
            }
            if upgrade is not None:
                saved = _normalise(upgrade(saved))
            # a key only the saved file has is a record another caller wrote beside the settings
            # (the paper driver's "method"): kept, not compared; never a key that pins the function
            for key in set(saved) - set(config) - set(cls.PINNING_KEYS) - set(cls.NEVER_CARRIED):
                config[key] = saved[key]
            ignored = set(mutable_keys) | set(cls.APPENDED_KEYS)
            differing = sorted(
                key
                for key in set(saved) | set(config)
                if key not in ignored and saved.get(key) != config.get(key)
            )
            if differing and set(differing) <= set(cls.PINNING_KEYS):
                raise ValueError(_changed_function(directory, saved, config, differing))
            if differing:
                details = "; ".join(
                    f"{k}: saved {a!r} vs now {b!r}"
                    for key in differing
                    for k, a, b in _differences(key, saved.get(key), config.get(key))
                )
                raise ValueError(
                    f"cannot resume {directory}: the configuration differs ({details}). Use the "
                    "original settings or a new --out directory."
                )
            config.update(appended)
            config.update(_resumed_rounds(cls(directory), saved, config))
        elif config_path.exists() or (directory / cls.ROUNDS).exists():
            raise ValueError(
                f"{directory} already holds a run; pass --resume to continue it or choose another --out."
            )
        return config

    def release(self) -> None:
        """Release the lock taken by ``create(..., lock=True)`` (a no-op without one)."""
        if self.lock_handle is not None:
            self.lock_handle.close()  # closing the file drops its flock
            self.lock_handle = None

    # ------------------------------------------------------------------ paths
    @property
    def checkpoint_dir(self) -> pathlib.Path:
        """Where optimizers keep their orbax checkpoints."""
        return self.path / "checkpoints"

    @property
    def rounds_path(self) -> pathlib.Path:
        return self.path / self.ROUNDS

    @property
    def evaluated_path(self) -> pathlib.Path:
        return self.path / self.EVALUATED

    def config(self) -> dict[str, Any]:
        """``config.json`` (:func:`~llome_jax.run.files.read_config`: a clear error naming the file
        if unreadable)."""
        return files.read_config(self.path / self.CONFIG)

    # ------------------------------------------------------------------ logging
    def log_evaluated(self, round_index: int, sequences: Any, values: Any) -> None:
        """Append labelled sequences (``[n, L]`` ints, ``[n]`` values) to ``evaluated.csv``."""
        sequences = np.asarray(sequences)
        values = np.asarray(values, dtype=np.float64)
        if sequences.ndim != 2 or len(sequences) != len(values):
            raise ValueError(f"sequences {sequences.shape} and values {values.shape} do not match.")
        new_file = not self.evaluated_path.exists()
        with open(self.evaluated_path, "a", newline="") as stream:
            writer = csv.writer(stream)
            if new_file:
                writer.writerow(["round", "sequence", "value"])
            for row, value in zip(sequences, values):
                writer.writerow([int(round_index), sequence_to_string(row), repr(float(value))])
            stream.flush()
            os.fsync(stream.fileno())

    def write_table(self, name: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Write the CSV file ``name`` whole, atomically (a results table such as the many-seeds
        GA's ``trace.csv``; floats as ``repr``, exact)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(list(header))
        writer.writerows([repr(v) if isinstance(v, float) else v for v in row] for row in rows)
        files.atomic_write_text(self.path / name, buffer.getvalue())

    def write_json(self, name: str, data: Mapping[str, Any]) -> None:
        """Write the JSON file ``name`` whole, atomically (indented, NumPy values as Python)."""
        text = json.dumps(data, indent=1, default=_json_default) + "\n"
        files.atomic_write_text(self.path / name, text)

    def log_round(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Append one record to ``rounds.jsonl`` (fields in ``ROUND_FIELDS`` order, then extras)."""
        unknown = [key for key in record if key not in ROUND_FIELDS]
        ordered = {key: _json_float(record.get(key)) for key in ROUND_FIELDS}
        ordered.update({key: _json_float(record[key]) for key in unknown})
        with open(self.rounds_path, "a") as stream:
            stream.write(json.dumps(_normalise(ordered)) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        return ordered

    @property
    def stopped_path(self) -> pathlib.Path:
        return self.path / "stopped.json"

    def log_stop(self, after_round: int, reason: str) -> None:
        """Record why the run ended after ``after_round`` when the next round could not run at
        all (LLOME: the latest labels hold no training pair), so no ``rounds.jsonl`` record can
        say it: ``stopped.json`` = ``{"after_round", "stop_reason"}``. (A stop decided in a round,
        such as the optimum found, is that round's record's ``stop_reason``.)"""
        text = json.dumps({"after_round": int(after_round), "stop_reason": reason}, indent=1)
        files.atomic_write_text(self.stopped_path, text + "\n")

    def stopped(self) -> dict[str, Any] | None:
        """``stopped.json``, or ``None``."""
        path = self.stopped_path
        return json.loads(path.read_text()) if path.exists() else None

    def stop_reason(self) -> str:
        """Why the run ended early, as this directory records it: the last round's
        ``stop_reason`` (the round driver writes one into every record, e.g. the optimum found)
        or ``stopped.json`` (a stop before a round could run); ``""`` otherwise."""
        stop = self.stopped()
        if stop is not None:
            return str(stop["stop_reason"])
        records = self.rounds()
        return str(records[-1].get("stop_reason") or "") if records else ""

    def rollback(self, to_round: int) -> None:
        """Drop every record of rounds ``> to_round`` (used when resuming from a checkpoint), and
        a ``stopped.json`` of a later round."""
        stop = self.stopped()
        if stop is not None and stop["after_round"] > to_round:
            self.stopped_path.unlink()
        if self.rounds_path.exists():
            kept = [r for r in self.rounds() if r["round"] <= to_round]
            files.atomic_write_text(self.rounds_path, "".join(json.dumps(r) + "\n" for r in kept))
        if self.evaluated_path.exists():
            with open(self.evaluated_path, newline="") as stream:
                rows = list(csv.reader(stream))
            header, body = rows[0], [r for r in rows[1:] if int(r[0]) <= to_round]
            text = io.StringIO(newline="")
            csv.writer(text).writerows([header, *body])
            files.atomic_write_text(self.evaluated_path, text.getvalue())

    # ------------------------------------------------------------------ reading
    def rounds(self) -> list[dict[str, Any]]:
        """All ``rounds.jsonl`` records."""
        if not self.rounds_path.exists():
            return []
        records = []
        for number, line in enumerate(self.rounds_path.read_text().splitlines(), start=1):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{self.rounds_path}, line {number}: not a JSON record ({error.msg})"
                ) from None
        return records

    def evaluated(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rounds [n], sequences [n, L], values [n])`` from ``evaluated.csv``."""
        if not self.evaluated_path.exists():
            return np.zeros(0, np.int64), np.zeros((0, 0), np.int64), np.zeros(0, np.float64)
        with open(self.evaluated_path, newline="") as stream:
            rows = list(csv.reader(stream))[1:]
        try:
            rounds = np.asarray([int(r[0]) for r in rows], np.int64)
            sequences = np.asarray([sequence_from_string(r[1]) for r in rows], np.int64)
            values = np.asarray([float(r[2]) for r in rows], np.float64)
        except (ValueError, IndexError):
            _read_rows(self.evaluated_path)  # names the first bad line
            raise
        return rounds, sequences, values

    # ------------------------------------------------------------------ curves
    def regret_curve(self, metric: str = "min_regret") -> tuple[np.ndarray, np.ndarray]:
        """``(evaluations, min_regret)`` float arrays for plotting (``metric="best_value"``:
        ``(evaluations, best value so far)``).

        ``rounds.jsonl``'s ``(num_evaluations, metric)`` when every round records both, with the
        labels that improved the metric inside a round for a ``pay_once`` run
        (:meth:`label_steps`: read at any label count, the curve is exact): the
        optimizer's own oracle accounting (e.g. the GA seed data counts all ``n0 * n`` calls while
        ``evaluated.csv`` keeps only its distinct sequences). Otherwise the running minimum
        (maximum) over ``evaluated.csv``, one evaluation per row (regret of an Ehrlich function).
        """
        if metric not in ("min_regret", "best_value"):
            raise ValueError(f"metric must be 'min_regret' or 'best_value'; got {metric!r}.")
        rounds = self.rounds()
        if rounds and all(
            r.get("num_evaluations") is not None and r.get(metric) is not None for r in rounds
        ):
            exact = self.label_steps(metric, rounds)
            if exact is not None:
                return exact
            evaluations = np.asarray([r["num_evaluations"] for r in rounds], float)
            return evaluations, np.asarray([r[metric] for r in rounds], float)
        _, _, values = self.evaluated()
        if metric == "best_value":
            curve = np.maximum.accumulate(values) if values.size else np.zeros(0)
        else:
            curve = np.minimum.accumulate(metrics.regret(values)) if values.size else np.zeros(0)
        return np.arange(1, values.size + 1, dtype=float), curve

    def label_steps(
        self, metric: str = "min_regret", rounds: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The curve at label resolution for a ``pay_once`` run, whose ``evaluated.csv`` rows are
        its paid labels in the order paid: every round's ``(num_evaluations, metric)`` plus a
        point at each label that improved the metric inside a round, so that the step function
        read at any label count ``N`` is exactly the run's value after ``N`` labels (not only at
        round ends). ``None`` for other runs (``every_evaluation``: rows are not labels) or when
        the files disagree on the count (the per-round curve is used then).

        Inside round ``r`` the value after a label is the better of round ``r - 1``'s recorded
        value and the label's own (regret ``f* - f`` with ``f* = best_value + min_regret`` of
        a round that records both; an infeasible label improves nothing)."""
        config = self.config() if (self.path / self.CONFIG).is_file() else {}
        if config.get("accounting") != "pay_once":
            return None
        rounds = self.rounds() if rounds is None else rounds
        if not rounds or any(
            r.get("num_evaluations") is None or r.get(metric) is None for r in rounds
        ):
            return None
        round_of, _, values = self.evaluated()
        counts = np.searchsorted(np.sort(round_of), [int(r["round"]) for r in rounds], "right")
        if counts.tolist() != [int(r["num_evaluations"]) for r in rounds]:
            return None
        optimum = None
        if metric == "min_regret":
            known = [
                r["best_value"] + r["min_regret"]
                for r in rounds
                if r.get("best_value") is not None
                and math.isfinite(r["best_value"])
                and r.get("min_regret") is not None
            ]
            if not known:
                return None
            optimum = float(known[-1])
        x: list[float] = []
        y: list[float] = []
        previous: float | None = None
        for record in rounds:
            r, paid = int(record["round"]), int(record["num_evaluations"])
            if previous is not None:
                current = previous
                rows = np.flatnonzero(round_of == r)
                for row in rows[np.isfinite(values[rows])]:
                    value = float(values[row])
                    value = optimum - value if optimum is not None else value
                    better = value < current if metric == "min_regret" else value > current
                    if better and row + 1 < paid:
                        current = value
                        x.append(float(row + 1))
                        y.append(value)
            x.append(float(paid))
            y.append(float(record[metric]))
            previous = float(record[metric])
        return np.asarray(x), np.asarray(y)
