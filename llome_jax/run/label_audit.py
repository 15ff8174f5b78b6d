"""What a run directory says its optimizer paid for (the information contract, BUILD.md §3.5).

:func:`label_audit` reads a run directory's ``evaluated.csv`` and last ``rounds.jsonl`` record into
a :class:`LabelAudit` (labels recorded, distinct sequences, labels paid, constraint queries);
:func:`cached_label_audit` keeps each run's audit in a cache file and reads ``evaluated.csv``
again only when it or ``rounds.jsonl`` changed (a report over 10,000 runs need not read every
label file each time); :func:`label_audit_summary` says in one sentence how many runs pay each label once
(``llome-jax compare`` and the paper report print it).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, MutableMapping
from typing import Any

from llome_jax.run.rundir import RunDirectory

__all__ = [
    "LabelAudit",
    "cached_label_audit",
    "label_audit",
    "label_audit_summary",
    "read_audit_cache",
    "write_audit_cache",
]


@dataclasses.dataclass(frozen=True)
class LabelAudit:
    """What a run directory says its optimizer paid for.

    Attributes:
      labels: rows of ``evaluated.csv`` (every label the run recorded, round 0 included).
      distinct: distinct sequences among them.
      num_evaluations: the last round record's ``num_evaluations`` (labels paid); ``None``
        without a record.
      constraint_queries: the last record's ``cum_constraint_queries`` (``is_feasible`` asked of
        unlabelled sequences); ``None`` for a run recorded before it was counted.
    """

    labels: int
    distinct: int
    num_evaluations: int | None
    constraint_queries: int | None

    @property
    def pays_once(self) -> bool:
        """Each label paid once: ``labels == distinct == num_evaluations`` (no sequence recorded
        twice, and every paid label recorded)."""
        return self.labels == self.distinct == self.num_evaluations


def label_audit(run_dir: RunDirectory | str | os.PathLike) -> LabelAudit | None:
    """The run's :class:`LabelAudit` (from ``evaluated.csv`` and the last ``rounds.jsonl``
    record); ``None`` when it has no ``evaluated.csv``. Sequences are compared as written."""
    if not isinstance(run_dir, RunDirectory):
        run_dir = RunDirectory(run_dir)
    if not run_dir.evaluated_path.exists():
        return None
    with open(run_dir.evaluated_path, newline="") as stream:
        rows = csv.reader(stream)
        next(rows, None)  # the header
        sequences = [row[1] for row in rows]
    records = run_dir.rounds()
    last = records[-1] if records else {}

    def count(key: str) -> int | None:
        value = last.get(key)
        return None if value is None else int(value)

    return LabelAudit(
        labels=len(sequences),
        distinct=len(set(sequences)),
        num_evaluations=count("num_evaluations"),
        constraint_queries=count("cum_constraint_queries"),
    )


def _stamp(run_dir: RunDirectory) -> list[int] | None:
    """``[size, mtime_ns]`` of ``evaluated.csv`` and of ``rounds.jsonl``: what a cached audit
    must still match (``None`` when either is missing)."""
    try:
        stats = [os.stat(run_dir.evaluated_path), os.stat(run_dir.rounds_path)]
    except OSError:
        return None
    return [number for st in stats for number in (st.st_size, st.st_mtime_ns)]


def cached_label_audit(
    run_dir: RunDirectory | str | os.PathLike, cache: MutableMapping[str, Any], key: str
) -> LabelAudit | None:
    """:func:`label_audit`, taken from ``cache[key]`` while the run's ``evaluated.csv`` and
    ``rounds.jsonl`` have the size and modification time recorded with it, else computed and
    stored there (``cache``: :func:`read_audit_cache`'s mapping)."""
    if not isinstance(run_dir, RunDirectory):
        run_dir = RunDirectory(run_dir)
    stamp = _stamp(run_dir)
    entry = cache.get(key)
    if stamp is not None and isinstance(entry, dict) and entry.get("stamp") == stamp:
        try:
            return LabelAudit(**entry["audit"])
        except (KeyError, TypeError):
            pass
    audit = label_audit(run_dir)
    if stamp is not None and audit is not None:
        cache[key] = {"stamp": stamp, "audit": dataclasses.asdict(audit)}
    return audit


def read_audit_cache(path: str | os.PathLike) -> dict[str, Any]:
    """The audit cache in ``path`` (a JSON file); empty when it is missing or unreadable."""
    try:
        found = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def write_audit_cache(path: str | os.PathLike, cache: Mapping[str, Any]) -> None:
    """Write the audit cache to ``path`` whole (a temporary file renamed over it)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(dict(cache), sort_keys=True))
    os.replace(partial, path)


def label_audit_summary(audits: Mapping[str, LabelAudit | None]) -> str:
    """One sentence on runs' :class:`LabelAudit` (keyed by run name; ``None``: no
    ``evaluated.csv``): how many pay each label once, which do not, and the constraint queries on
    unlabelled sequences they report."""
    checked = {name: audit for name, audit in audits.items() if audit is not None}
    if not checked:
        return "no run has an `evaluated.csv`"
    failing = sorted(name for name, audit in checked.items() if not audit.pays_once)
    queries = [a.constraint_queries for a in checked.values() if a.constraint_queries is not None]
    if queries:
        counting = (
            f"{len(queries)} runs that count them"
            if len(queries) > 1
            else "the run that counts them"
        )
        asked = f"; constraint queries on unlabelled sequences: {sum(queries):,} in {counting}"
    else:
        asked = "; constraint queries not counted (runs recorded before they were)"
    unread = len(audits) - len(checked)
    return (
        f"{len(checked) - len(failing)} of {len(checked)} runs pay each label once (no sequence "
        "twice in `evaluated.csv`, `num_evaluations` = its rows)"
        + (f"; not: {', '.join(failing)}" if failing else "")
        + asked
        + (f"; {unread} without `evaluated.csv`" if unread else "")
    )
