"""Per-round metrics sinks for the round driver: TensorBoard and Weights & Biases.

:func:`llome_jax.run.runner.run` takes ``trackers=(...)``, objects implementing :class:`Tracker`:

* ``start(config, run_dir, history)`` once, after the run directory is set up (``config`` is
  ``config.json``'s content; ``history`` the records already in ``rounds.jsonl`` when a resume
  starts, after the rollback to the restored checkpoint; ``[]`` for a new run);
* ``log_round(record)`` once per round *written by this call*, round 0 included, with the record
  exactly as ``rounds.jsonl`` holds it (JSON types; non-finite floats as ``None``/``"inf"``);
  rounds already in the directory on resume are not sent again through ``log_round``;
* ``finish(error)`` always, also when a round raises (``error`` is the exception, else ``None``).

Each sink decides what to do with ``history``: :class:`TensorBoardTracker` appends to the same
log directory on every call, so it only tells TensorBoard to drop points at steps after the
history (``purge_step``: rounds rolled back on resume and recomputed are not drawn twice);
:class:`WandbTracker` starts a new W&B run per call and logs the history first, so every W&B run
holds the whole curve so far.

Both log every numeric field of a record (:func:`numeric_fields`: ``None``, NaN, infinities,
strings and booleans skipped) against ``num_evaluations``, the oracle budget (the x axis of the
paper's plots); ``round`` is one of the fields. The sinks' packages are optional
(``pip install "llome-jax[tracking]"``) and imported when a sink is constructed, so a missing one
fails before the run starts.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "TRACKERS",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "flatten",
    "make_tracker",
    "numeric_fields",
]

_INSTALL_HINT = 'pip install "llome-jax[tracking]"'


def _import_tensorboardx() -> Any:
    """``import tensorboardX`` without letting it import torch.

    tensorboardX's ``writer`` module imports torch when it is installed, only to accept torch
    tensors as values; we pass floats and strings. Loading torch costs ~3 s and puts its native
    libraries into the JAX process (torch is for parity tests only, never a run-time dependency),
    so while tensorboardX loads, ``import torch`` fails as if torch were absent (a ``None`` entry in
    ``sys.modules``). A torch that is already loaded is left alone.
    """
    if "torch" in sys.modules:
        import tensorboardX

        return tensorboardX
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import tensorboardX
        import tensorboardX.summary
    finally:
        del sys.modules["torch"]
    return tensorboardX


@runtime_checkable
class Tracker(Protocol):
    """A per-round metrics sink (the module docstring gives the call order)."""

    def start(
        self,
        config: Mapping[str, Any],
        run_dir: pathlib.Path,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> None: ...

    def log_round(self, record: Mapping[str, Any]) -> None: ...

    def finish(self, error: BaseException | None = None) -> None: ...


def flatten(tree: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """Nested dicts as one level of ``sep``-joined keys (``{"ga": {"n": 1}}`` -> ``{"ga.n": 1}``)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name, sep))
        else:
            flat[name] = value
    return flat


def numeric_fields(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's finite numbers (ints and floats, not booleans), nested dicts joined by ``/``."""
    out: dict[str, float] = {}
    for key, value in flatten(record, sep="/").items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = value
    return out


def _step(record: Mapping[str, Any]) -> int:
    """``num_evaluations``, else the round index (records of plug-ins without a budget)."""
    value = record.get("num_evaluations")
    return int(value if isinstance(value, int | float) else record["round"])


def _hparams(config: Mapping[str, Any]) -> dict[str, str | float | bool]:
    """The configuration as TensorBoard hyper-parameters: dotted keys, lists as JSON text,
    ``None`` and the provenance left out."""
    out: dict[str, str | float | bool] = {}
    for key, value in flatten({k: v for k, v in config.items() if k != "provenance"}).items():
        if value is None:
            continue
        out[key] = value if isinstance(value, str | int | float | bool) else json.dumps(value)
    return out


class TensorBoardTracker:
    """TensorBoard event files through ``tensorboardX`` (TensorFlow not needed).

    One scalar per numeric record field (tag = field name, step = ``num_evaluations``); the
    configuration as text (tag ``config``) and as hyper-parameters (HParams tab, with
    ``min_regret`` as the metric). Every call writes a new event file into ``logdir`` (default
    ``<run_dir>/tensorboard``) whose ``purge_step`` hides points that a resume rolled back.
    """

    def __init__(self, logdir: str | os.PathLike | None = None) -> None:
        try:
            _import_tensorboardx()
        except ImportError as error:
            raise ImportError(
                f"the TensorBoard tracker needs tensorboardX: {_INSTALL_HINT}"
            ) from error
        self.logdir = None if logdir is None else pathlib.Path(logdir)
        self._writer: Any = None
        self._hparams_end: Any = None

    def start(
        self,
        config: Mapping[str, Any],
        run_dir: pathlib.Path,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        if self.logdir is None:
            self.logdir = pathlib.Path(run_dir) / "tensorboard"
        # Points at steps >= purge_step in earlier event files are dropped by TensorBoard (a
        # resume recomputes the rounds after its checkpoint). The file-name suffix keeps two calls
        # within one second from overwriting each other's file (the name has whole seconds).
        purge_step = _step(history[-1]) + 1 if history else 0
        self._writer = SummaryWriter(
            str(self.logdir),
            purge_step=purge_step,
            filename_suffix=f".{time.time_ns()}",
            flush_secs=30,
        )
        text = json.dumps(dict(config), indent=1, default=str)
        self._writer.add_text("config", "    " + text.replace("\n", "\n    "), purge_step)
        experiment, session_start, self._hparams_end = hparams(
            _hparams(config), {"min_regret": None}
        )
        for summary in (experiment, session_start):
            self._writer.file_writer.add_summary(summary, purge_step)
        self._writer.flush()

    def log_round(self, record: Mapping[str, Any]) -> None:
        step = _step(record)
        for tag, value in numeric_fields(record).items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()  # rounds take minutes: make each one visible at once

    def finish(self, error: BaseException | None = None) -> None:
        if self._writer is None:
            return
        if error is None and self._hparams_end is not None:
            self._writer.file_writer.add_summary(self._hparams_end)
        self._writer.close()
        self._writer = None


class WandbTracker:
    """Weights & Biases through ``wandb.init`` / ``run.log`` / ``run.finish``.

    ``mode="offline"`` (default) writes under ``<dir>/wandb/`` (``dir`` defaults to the run
    directory; ``wandb sync`` uploads later). Each call of the driver is a new W&B run (named after
    the run directory, ``config`` = ``config.json``) that logs the history first; the x axis is
    ``num_evaluations`` (``define_metric``). ``init_kwargs`` go to ``wandb.init`` (``entity``,
    ``group``, ``tags``, ...).
    """

    def __init__(
        self,
        project: str | None = "llome-jax",
        *,
        mode: str = "offline",
        dir: str | os.PathLike | None = None,
        name: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        try:
            import wandb  # noqa: F401
        except ImportError as error:
            raise ImportError(f"the W&B tracker needs wandb: {_INSTALL_HINT}") from error
        self.project, self.mode, self.name = project, mode, name
        self.dir = None if dir is None else pathlib.Path(dir)
        self.init_kwargs = init_kwargs
        self._run: Any = None

    def start(
        self,
        config: Mapping[str, Any],
        run_dir: pathlib.Path,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        import wandb

        if self.dir is None:
            self.dir = pathlib.Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=self.project,
            mode=self.mode,
            dir=str(self.dir),
            name=self.name or pathlib.Path(run_dir).name,
            config=dict(config),
            **self.init_kwargs,
        )
        self._run.define_metric("num_evaluations")
        self._run.define_metric("*", step_metric="num_evaluations")
        for record in history:
            self.log_round(record)

    def log_round(self, record: Mapping[str, Any]) -> None:
        self._run.log(numeric_fields(record))

    def finish(self, error: BaseException | None = None) -> None:
        if self._run is None:
            return
        self._run.finish(exit_code=0 if error is None else 1)
        self._run = None


#: ``--tracker`` names.
TRACKERS = ("tensorboard", "wandb")


def make_tracker(name: str, run_dir: str | os.PathLike) -> Tracker:
    """The CLI's trackers: ``"tensorboard"`` (events in ``<run_dir>/tensorboard/``) or ``"wandb"``
    (offline files in ``<run_dir>/wandb/``; ``WANDB_MODE`` and ``WANDB_PROJECT`` override the
    mode and the project ``llome-jax``).

    Raises:
      ValueError: an unknown name.
      ImportError: the sink's package is not installed (the message says what to install).
    """
    run_dir = pathlib.Path(run_dir)
    if name == "tensorboard":
        return TensorBoardTracker(run_dir / "tensorboard")
    if name == "wandb":
        return WandbTracker(
            os.environ.get("WANDB_PROJECT", "llome-jax"),
            mode=os.environ.get("WANDB_MODE", "offline"),
            dir=run_dir,
        )
    raise ValueError(f"unknown tracker {name!r}; choose from {list(TRACKERS)}")
