"""A resume refuses a damaged run directory: exit 2, one line naming the file, nothing changed.

One GA run (round mode, f2, 2 rounds) is copied and damaged in each way a user met
(``rounds.jsonl`` or ``evaluated.csv`` deleted, one label row deleted, a value replaced by
text, a truncated ``rounds.jsonl``, a label row written twice, a checkpoint the log does not
hold); the state a crash leaves (a round's labels and record written, its checkpoint not) is
not damage, and resumes.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil

import pytest

from llome_jax.cli import main
from llome_jax.run.integrity import DamagedRunError, check_run_directory

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
    "--no-progress",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("integrity") / "base"
    assert main([*GA, "--rounds", "2", "--out", str(out)]) == 0
    return out


def _digests(path: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _lines(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _delete_row(path: pathlib.Path) -> None:
    lines = _lines(path / "evaluated.csv")
    (path / "evaluated.csv").write_text("".join(lines[:40] + lines[41:]))


def _banana(path: pathlib.Path) -> None:
    lines = _lines(path / "evaluated.csv")
    head, _, _ = lines[60].rstrip("\n").rpartition(",")
    lines[60] = head + ",banana\n"
    (path / "evaluated.csv").write_text("".join(lines))


def _truncate(path: pathlib.Path) -> None:
    text = (path / "rounds.jsonl").read_text()
    (path / "rounds.jsonl").write_text(text[:-40])


def _twice(path: pathlib.Path) -> None:
    lines = _lines(path / "evaluated.csv")
    (path / "evaluated.csv").write_text("".join([*lines, lines[-1]]))


def _lost_record(path: pathlib.Path) -> None:
    lines = _lines(path / "rounds.jsonl")
    (path / "rounds.jsonl").write_text("".join(lines[:-1]))
    lines = [r for r in _lines(path / "evaluated.csv") if not r.startswith("2,")]
    (path / "evaluated.csv").write_text("".join(lines))


DAMAGE = {
    "rounds.jsonl deleted": (lambda p: (p / "rounds.jsonl").unlink(), "rounds.jsonl: missing"),
    "evaluated.csv deleted": (lambda p: (p / "evaluated.csv").unlink(), "evaluated.csv: missing"),
    "one row deleted": (_delete_row, "rounds.jsonl, line 1: round 0 records"),
    "a value replaced by text": (_banana, "evaluated.csv, line 61: unparsable row"),
    "rounds.jsonl truncated": (_truncate, "rounds.jsonl, line 3: not a JSON record"),
    "a row written twice": (_twice, "evaluated.csv, line"),
    "a record lost": (_lost_record, "checkpoints/ holds round 2"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_run_is_refused_and_left_as_it_was(
    damage: str, base: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "copy"
    shutil.copytree(base, out)
    harm, named = DAMAGE[damage]
    harm(out)
    before = _digests(out)
    assert main(["ga", "--resume", "--rounds", "3", "--out", str(out), "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and named in error[0] and "Nothing was changed" in error[0]
    assert _digests(out) == before


def test_a_whole_run_and_a_crash_before_the_checkpoint_pass(
    base: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    check_run_directory(base)
    crashed = tmp_path / "crashed"
    shutil.copytree(base, crashed)
    shutil.rmtree(crashed / "checkpoints" / "2")  # round 2's labels and record, no checkpoint
    check_run_directory(crashed)
    extra = tmp_path / "extra"  # labels of the next round written before its record
    shutil.copytree(base, extra)
    rows = [f'{r},"{",".join([str(r)] * 32)}",0.0\n' for r in (3, 4)]  # new sequences
    (extra / "evaluated.csv").write_text("".join([*_lines(extra / "evaluated.csv"), rows[0]]))
    check_run_directory(extra)
    (extra / "evaluated.csv").write_text("".join([*_lines(extra / "evaluated.csv"), rows[1]]))
    with pytest.raises(DamagedRunError, match="a label of round 4"):
        check_run_directory(extra)


#: damage after a checkpointed round: --repair rolls back to it (round 1; checkpoints 1 and 2)
REPAIRABLE = ["rounds.jsonl truncated", "a row written twice", "a record lost"]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_repair_rolls_back_only_where_that_is_safe(
    damage: str, base: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "copy"
    shutil.copytree(base, out)
    DAMAGE[damage][0](out)
    resume = ["ga", "--resume", "--rounds", "3", "--out", str(out), "--no-progress"]
    assert main(resume) == 2
    refusal = capsys.readouterr().err
    assert ("--resume --repair rolls it back to round 1" in refusal) == (damage in REPAIRABLE)
    before = _digests(out)
    if damage not in REPAIRABLE:
        assert main([*resume, "--repair"]) == 2
        assert "--repair cannot help" in capsys.readouterr().err
        assert _digests(out) == before
        return
    assert main([*resume, "--repair"]) == 0
    assert f"repaired {out}: rolled back to round 1" in capsys.readouterr().out
    whole = tmp_path / "whole"  # the undamaged run continued to 3 rounds
    shutil.copytree(base, whole)
    assert main(["ga", "--resume", "--rounds", "3", "--out", str(whole), "--no-progress"]) == 0
    assert (out / "evaluated.csv").read_bytes() == (whole / "evaluated.csv").read_bytes()
    check_run_directory(out)
