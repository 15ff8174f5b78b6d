"""``docs/reference/scripts.md`` lists exactly the scripts in ``experiments/`` and ``benchmarks/``.

The "Scripts" table names every script there (a ``.py`` or ``.sh`` file; ``_``-prefixed helper
modules are not scripts, but a listed script must name each of them, or it is dead code); the
"Retired" table names deleted scripts only, each with the commit that last held it."""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "scripts.md"
FOLDERS = ("experiments", "benchmarks")
ROW = re.compile(r"^\| `((?:experiments|benchmarks)/[^`]+)` \|", re.M)


def _section(title: str) -> str:
    """The text of the page's ``## title`` section."""
    return PAGE.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _on_disk() -> tuple[set[str], set[str]]:
    """``(scripts, helper modules)`` in the script folders, as paths from the repository root."""
    files = [
        path
        for folder in FOLDERS
        for path in sorted((ROOT / folder).iterdir())
        if path.is_file() and path.suffix in (".py", ".sh")
    ]
    scripts = {str(p.relative_to(ROOT)) for p in files if not p.name.startswith("_")}
    helpers = {str(p.relative_to(ROOT)) for p in files if p.name.startswith("_")}
    return scripts, helpers


def test_the_table_lists_exactly_the_scripts_there_are() -> None:
    listed = ROW.findall(_section("Scripts"))
    assert len(listed) == len(set(listed)), "a script is listed twice"
    scripts, _ = _on_disk()
    assert set(listed) == scripts, (
        f"not listed: {sorted(scripts - set(listed))}; listed but absent: "
        f"{sorted(set(listed) - scripts)}"
    )


def test_every_helper_module_is_used_by_a_listed_script() -> None:
    scripts, helpers = _on_disk()
    sources = {s: (ROOT / s).read_text() for s in scripts}
    for helper in helpers:
        name = pathlib.Path(helper).stem
        users = [s for s, text in sources.items() if re.search(rf"\b{re.escape(name)}\b", text)]
        assert users, f"{helper}: no listed script imports or runs it"


def test_every_table_row_gives_a_command_that_names_its_script() -> None:
    for line in _section("Scripts").splitlines():
        if match := ROW.match(line):
            command = line.rstrip(" |").rsplit("|", 1)[1]
            assert match.group(1) in command, line


def test_retired_scripts_are_gone_and_name_the_commit_that_held_them() -> None:
    rows = [line for line in _section("Retired").splitlines() if ROW.match(line)]
    assert rows
    shallow = _git("rev-parse", "--is-shallow-repository")
    full_history = (ROOT / ".git").exists() and shallow == (0, b"false\n")
    for line in rows:
        path = ROW.match(line).group(1)
        assert not (ROOT / path).exists(), f"{path} is retired but still there"
        commit = line.rstrip(" |").rsplit("|", 1)[1].strip()
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), line
        if full_history:  # the commit holds the script (a shallow or exported tree cannot say)
            assert _git("cat-file", "-e", f"{commit}:{path}")[0] == 0, f"{commit} lacks {path}"


def _git(*args: str) -> tuple[int, bytes]:
    """``(exit code, stdout)`` of a read-only git command in the repository."""
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=False)
    return done.returncode, done.stdout
