"""Every relative link in every Markdown page of the repository resolves: the file (or folder)
exists, and a ``#anchor`` names a heading (GitHub's slugs) or an ``<a id=...>`` of that page.

Links inside code blocks and inline code are not links; ``http(s):`` and ``mailto:`` links are
not checked (no network in the tests)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import unicodedata
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: folders never searched for pages: environments, caches, dependencies, run outputs
SKIP_DIRS = {
    ".venv",
    "venv",
    "node_modules",
    ".git",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".jax_cache",
    "__pycache__",
    "build",
    "dist",
    "runs",
    "results",
}

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: ``[text](target)`` and ``![alt](target)``; the target may be ``<...>`` and have a title
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)


def pages(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every ``*.md`` under ``root`` outside :data:`SKIP_DIRS` and hidden folders."""
    found = []
    for path in sorted(root.rglob("*.md")):
        parts = path.relative_to(root).parts[:-1]
        if any(
            part in SKIP_DIRS or part.startswith(".") or part.endswith(".egg-info")
            for part in parts
        ):
            continue
        found.append(path)
    return found


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and code unwrapped, HTML dropped), lower
    case, punctuation removed except ``-`` and ``_``, spaces as ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").lower()
    kept = []
    for char in text:
        if char in "-_ " or unicodedata.category(char)[0] in "LNM":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page defines: heading slugs (repeats numbered ``-1``, ``-2``, ... as on
    GitHub) and ``<a id="...">`` / ``<a name="...">``."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text: str) -> list[str]:
    """The link targets of a page (inline, images and reference definitions)."""
    targets = []
    for line in _prose_lines(text):
        targets += [t.strip("<>") for t in LINK.findall(line)]
        match = REFERENCE.match(line)
        if match:
            targets.append(match.group(1).strip("<>"))
    return targets


def broken_links(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """``"page: target (why)"`` for each relative link of ``page`` that does not resolve."""
    text = page.read_text(encoding="utf-8")
    own = None
    problems = []
    for target in links(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, ...
            continue
        path_part, _, fragment = target.partition("#")
        path_part = urllib.parse.unquote(path_part)
        name = page.relative_to(root)
        if path_part:
            resolved = (page.parent / path_part).resolve()
            if path_part.startswith("/"):
                resolved = (root / path_part.lstrip("/")).resolve()
            if not resolved.exists():
                problems.append(f"{name}: {target} (no such file)")
                continue
        else:
            resolved = page
        if fragment:
            if resolved.is_dir() or resolved.suffix != ".md":
                continue  # GitHub's line anchors (#L10) and the like are not checked
            if resolved == page:
                own = own if own is not None else anchors(text)
                defined = own
            else:
                defined = anchors(resolved.read_text(encoding="utf-8"))
            if urllib.parse.unquote(fragment).lower() not in defined:
                problems.append(f"{name}: {target} (no such anchor)")
    return problems


def test_every_relative_link_resolves() -> None:
    found = pages()
    assert ROOT / "README.md" in found and ROOT / "BUILD.md" in found
    assert len(found) >= 20
    assert [problem for page in found for problem in broken_links(page)] == []


def linked_files(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The files and folders that the relative links of ``page`` name (those that exist)."""
    found = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue
        path_part = urllib.parse.unquote(target.partition("#")[0])
        if path_part:
            base = root if path_part.startswith("/") else page.parent
            resolved = (base / path_part.lstrip("/")).resolve()
            if resolved.exists():
                found.append(resolved)
    return found


def ignored_by_git(paths: list[pathlib.Path], root: pathlib.Path = ROOT) -> list[str]:
    """The ``paths`` (relative to ``root``) that git ignores and does not track: a fresh clone
    lacks them."""
    names = sorted({str(path.relative_to(root)) for path in paths})
    done = subprocess.run(
        ["git", "check-ignore", "--stdin"],
        cwd=root,
        input="\n".join(names),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: none ignored
    return done.stdout.split()


def test_no_link_points_at_a_file_git_ignores() -> None:
    """A page links only to files a fresh clone has: a linked benchmark result that
    ``.gitignore`` hides exists here but not in CI's checkout."""
    linked = [path for page in pages() for path in linked_files(page)]
    assert len(linked) >= 100
    assert ignored_by_git(linked) == []


def test_the_ignore_check_finds_ignored_files(tmp_path: pathlib.Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("results/\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("{}")
    page = tmp_path / "page.md"
    page.write_text("[a](results/a.json) [b](b.json) [web](https://example.org/a.json)\n")
    linked = linked_files(page, tmp_path)
    assert linked == [tmp_path / "results" / "a.json", tmp_path / "b.json"]
    assert ignored_by_git(linked, tmp_path) == ["results/a.json"]


def test_the_checker_finds_broken_links(tmp_path: pathlib.Path) -> None:
    """The checker can fail: a made-up page with one good and several bad links of each kind."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## A `code` heading: yes!\n")
    (tmp_path / "figure.png").write_bytes(b"")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Title\n\n## Usage (current)\n\n## Usage (current)\n\n"
        '<a id="custom"></a>\n\n'
        "[ok](other.md) [ok](other.md#a-code-heading-yes) [ok](#usage-current)\n"
        "[ok](#usage-current-1) [ok](#custom) ![ok](../figure.png) [web](https://example.org/x)\n"
        "[missing file](gone.md) [missing anchor](other.md#nope) [self](#usage-current-2)\n"
        "![missing image](figure.png)\n"
        "`[in code](gone_in_code.md)`\n\n"
        "```\n[in a block](gone_in_block.md)\n```\n\n"
        "[ref]: ../nowhere.md\n"
    )
    assert broken_links(page, tmp_path) == [
        "docs/page.md: gone.md (no such file)",
        "docs/page.md: other.md#nope (no such anchor)",
        "docs/page.md: #usage-current-2 (no such anchor)",
        "docs/page.md: figure.png (no such file)",
        "docs/page.md: ../nowhere.md (no such file)",
    ]
    assert pages(tmp_path) == [tmp_path / "docs" / "other.md", page]


def test_slugs_follow_github() -> None:
    assert slug("LaMBO-2 vs cortex 0.0.4") == "lambo-2-vs-cortex-004"
    assert slug("On one H100 GPU (2026-11-26)") == "on-one-h100-gpu-2026-11-26"
    assert (
        slug("`llome-jax compare`: runs at equal budgets")
        == "llome-jax-compare-runs-at-equal-budgets"
    )
    assert slug("The `cpu` preset's λ") == "the-cpu-presets-λ"
