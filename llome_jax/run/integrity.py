"""Is a run directory whole? The checks a resume makes before it writes anything.

A run directory (:mod:`llome_jax.run.rundir`) holds one run in four places that must agree:
``config.json`` (the settings), ``rounds.jsonl`` (one record per round, in order),
``evaluated.csv`` (every paid label, in the order paid) and ``checkpoints/`` (the optimizer's
state after a round). The round driver writes a round's labels, then its record, then its
checkpoint, so a run stopped at any moment leaves them in one of these states:

* all agree, or
* the last round's labels (and maybe its record) are written but not its checkpoint: a resume
  rolls the logs back to the checkpoint and recomputes that round identically.

Anything else is damage, and resuming on it would build on a history the files do not hold:
a deleted ``evaluated.csv`` would empty the label cache (the run might pay again for sequences
it had), a deleted ``rounds.jsonl`` would restart the counters. :func:`check_run_directory`
finds it and raises :class:`DamagedRunError`, one line naming the file, the line and what
disagrees, before anything is written; the resume then changes nothing.

The way out, where one is safe: damage after a checkpointed round ``c`` (a lost or truncated
record, a row written twice at the end, a checkpoint the log does not hold) is undone by rolling
the directory back to ``c`` (:func:`safe_round` finds the newest ``c`` whose files, cut there,
agree; :func:`repair` cuts them, ``--resume --repair`` on the command line); the rounds after
it are recomputed from the checkpoint, as after a crash, and pay again for what they label.
Damage inside the rounds every checkpoint holds (round 0's labels, a deleted file) has no safe
way out: restore the file or start a new run.

The checks (``n_r``: the record of round ``r``'s ``num_evaluations``):

* ``rounds.jsonl``: each line a JSON object with an integer ``round``; rounds 0, 1, 2, ... in
  order; present whenever ``evaluated.csv`` or a checkpoint is.
* ``evaluated.csv``: the header ``round,sequence,value``; each row three fields, an integer round
  no smaller than the row before, a sequence of integers, a number (``-inf``: infeasible); a row
  of a round after the last record only for the round just after it (written before its record);
  present whenever a round records labels paid.
* with ``accounting="pay_once"`` (each label its own row): no sequence twice, and the rows of
  rounds ``<= r`` number exactly ``n_r`` for every record up to the newest checkpoint (a round
  after it is rolled back and recomputed, whatever its files hold).
* ``checkpoints/``: the newest committed step is a recorded round (a checkpoint of a round that
  ``rounds.jsonl`` does not hold means the log lost records).
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
from typing import Any

from llome_jax.run.files import atomic_write_text

__all__ = [
    "DamagedRunError",
    "audit_for_resume",
    "check_run_directory",
    "checkpoint_steps",
    "repair",
    "safe_round",
]


class DamagedRunError(ValueError):
    """The files of a run directory disagree (the message names the file and the line)."""


def _damaged(path: pathlib.Path, line: int | None, what: str) -> DamagedRunError:
    where = f"{path}" if line is None else f"{path}, line {line}"
    return DamagedRunError(
        f"cannot resume: {where}: {what}. Nothing was changed; restore the file from a copy, "
        "or start a new run in another --out"
    )


def _with_way_out(directory: pathlib.Path, damage: DamagedRunError) -> DamagedRunError:
    """``damage``, saying whether ``--repair`` has a safe way out (:func:`safe_round`)."""
    step = safe_round(directory)
    if step is None:
        return damage
    return DamagedRunError(
        f"{damage}; or --resume --repair rolls it back to round {step}, whose files agree "
        "(the rounds after it are recomputed)"
    )


def checkpoint_steps(directory: pathlib.Path) -> list[int]:
    """The committed checkpoint steps under ``directory/checkpoints`` (orbax names a committed
    step's folder by its number; an interrupted save has another name), ascending."""
    root = directory / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def _read_rounds(path: pathlib.Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise _damaged(path, number, f"not a JSON record ({error.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("round"), int):
            raise _damaged(path, number, "a record without an integer 'round'")
        if record["round"] != len(records):
            raise _damaged(
                path, number, f"round {record['round']} where round {len(records)} comes next"
            )
        record["_line"] = number
        records.append(record)
    return records


def _read_rows(path: pathlib.Path) -> list[tuple[int, str, int]]:
    """``(round, sequence text, line)`` per row, each row parsed."""
    rows: list[tuple[int, str, int]] = []
    with open(path, newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader, None)
        if header != ["round", "sequence", "value"]:
            raise _damaged(path, 1, f"the header is {header!r}, not round,sequence,value")
        previous = 0
        for number, row in enumerate(reader, start=2):
            if len(row) != 3:
                raise _damaged(path, number, f"{len(row)} fields, not 3")
            text_round, sequence, value = row
            try:
                round_index = int(text_round)
                [int(token) for token in sequence.split(",")]
                number_value = float(value)
            except ValueError:
                raise _damaged(path, number, f"unparsable row {','.join(row)!r}") from None
            if math.isnan(number_value):
                raise _damaged(path, number, "a value that is NaN")
            if round_index < previous:
                raise _damaged(path, number, f"round {round_index} after round {previous}")
            previous = round_index
            rows.append((round_index, sequence, number))
    return rows


def check_run_directory(directory: str | pathlib.Path) -> None:
    """Raise :class:`DamagedRunError` if ``directory``'s files disagree (module docstring);
    return quietly for a whole run directory. Reads only."""
    directory = pathlib.Path(directory)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    rounds_path, evaluated_path = directory / "rounds.jsonl", directory / "evaluated.csv"
    steps = checkpoint_steps(directory)
    records = _read_rounds(rounds_path) if rounds_path.exists() else []
    rows = _read_rows(evaluated_path) if evaluated_path.exists() else []
    if not rounds_path.exists() and (evaluated_path.exists() or steps):
        held = "evaluated.csv" if evaluated_path.exists() else f"checkpoint {steps[-1]}"
        raise _damaged(rounds_path, None, f"missing, while {held} is there")
    paid = [int(r["num_evaluations"]) for r in records if r.get("num_evaluations")]
    if paid and not evaluated_path.exists():
        raise _damaged(
            evaluated_path,
            None,
            f"missing, while rounds.jsonl records {len(records)} rounds and {paid[-1]} labels",
        )
    last = len(records) - 1
    if steps and steps[-1] > last:
        raise _damaged(
            rounds_path,
            None,
            f"ends at round {last}, but checkpoints/ holds round {steps[-1]} (records were lost)",
        )
    for round_index, _, number in rows:
        if round_index > last + 1:
            raise _damaged(
                evaluated_path,
                number,
                f"a label of round {round_index}, but rounds.jsonl ends at round {last}",
            )
    if config.get("accounting") != "pay_once":
        return
    seen: dict[str, int] = {}
    for _, sequence, number in rows:
        if sequence in seen:
            raise _damaged(
                evaluated_path,
                number,
                f"sequence paid twice (first on line {seen[sequence]})",
            )
        seen[sequence] = number
    counted = 0
    by_round: dict[int, int] = {}
    for round_index, _, _ in rows:
        by_round[round_index] = by_round.get(round_index, 0) + 1
    kept = steps[-1] if steps else -1  # later rounds are rolled back and recomputed
    for record in records:
        if record["round"] > kept:
            break
        counted += by_round.get(record["round"], 0)
        paid = record.get("num_evaluations")
        if paid is not None and int(paid) != counted:
            raise _damaged(
                rounds_path,
                record["_line"],
                f"round {record['round']} records {paid} labels paid, evaluated.csv holds "
                f"{counted} up to that round",
            )


def _cut_rounds(text: str, to_round: int) -> str:
    """``rounds.jsonl``'s leading whole records of rounds ``<= to_round``."""
    kept = []
    for index, line in enumerate(text.splitlines()):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(record, dict) or record.get("round") != index or index > to_round:
            break
        kept.append(line + "\n")
    return "".join(kept)


def _cut_rows(text: str, to_round: int) -> str:
    """``evaluated.csv``'s header and leading rows of rounds ``<= to_round``."""
    lines = text.splitlines(keepends=True)
    kept = lines[:1]
    for line in lines[1:]:
        first = line.split(",", 1)[0]
        if not first.isdigit() or int(first) > to_round:
            break
        kept.append(line)
    return "".join(kept)


def _cut(directory: pathlib.Path, to_round: int, into: pathlib.Path) -> None:
    """Write ``directory`` cut to rounds ``<= to_round`` into ``into`` (the round driver's files;
    checkpoints as empty step folders, which is all the checks read)."""
    import shutil

    into.mkdir(parents=True, exist_ok=True)
    if (directory / "config.json").is_file():
        shutil.copy(directory / "config.json", into / "config.json")
    for name, cut in (("rounds.jsonl", _cut_rounds), ("evaluated.csv", _cut_rows)):
        if (directory / name).is_file():
            (into / name).write_text(cut((directory / name).read_text(), to_round))
    for step in checkpoint_steps(directory):
        if step <= to_round:
            (into / "checkpoints" / str(step)).mkdir(parents=True, exist_ok=True)


def safe_round(directory: str | pathlib.Path) -> int | None:
    """The newest checkpointed round ``c`` at which ``directory``, cut to rounds ``<= c``, is
    whole (``None``: there is none). Reads only."""
    import tempfile

    directory = pathlib.Path(directory)
    for step in reversed(checkpoint_steps(directory)):
        with tempfile.TemporaryDirectory() as tmp:
            _cut(directory, step, pathlib.Path(tmp) / "run")
            try:
                check_run_directory(pathlib.Path(tmp) / "run")
            except DamagedRunError:
                continue
            return step
    return None


def repair(directory: str | pathlib.Path) -> int | None:
    """Roll a damaged ``directory`` back to :func:`safe_round`: its logs cut there, later
    checkpoints and a later ``stopped.json`` removed. Returns that round, or ``None`` when the
    directory is whole (nothing is changed then).

    Raises:
      DamagedRunError: the damage has no safe way out (the message of the check)."""
    import shutil

    directory = pathlib.Path(directory)
    try:
        check_run_directory(directory)
        return None
    except DamagedRunError as damage:
        step = safe_round(directory)
        if step is None:
            raise DamagedRunError(
                f"{damage} (no checkpointed round is whole: --repair cannot help)"
            ) from None
    for name, cut in (("rounds.jsonl", _cut_rounds), ("evaluated.csv", _cut_rows)):
        path = directory / name
        if path.is_file():
            atomic_write_text(path, cut(path.read_text(), step))
    for later in checkpoint_steps(directory):
        if later > step:
            shutil.rmtree(directory / "checkpoints" / str(later))
    stopped = directory / "stopped.json"
    if stopped.is_file() and json.loads(stopped.read_text()).get("after_round", 0) > step:
        stopped.unlink()
    return step


def audit_for_resume(directory: str | pathlib.Path) -> None:
    """:func:`check_run_directory`, whose refusal also says when ``--repair`` has a safe way
    out (the round it would roll back to)."""
    directory = pathlib.Path(directory)
    try:
        check_run_directory(directory)
    except DamagedRunError as damage:
        raise _with_way_out(directory, damage) from None
