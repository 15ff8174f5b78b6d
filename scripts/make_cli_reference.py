"""Write docs/reference/cli.md from the ``llome-jax`` parsers (every subcommand and flag).

Run from the repository root after changing a command's flags or help texts:
``python scripts/make_cli_reference.py``. ``tests/test_docs_reference.py`` fails while the page
differs from what this script writes, so the page cannot go stale.

The page is built from the parsers' actions (flags, metavars, choices, help texts), not from
argparse's formatted ``--help`` text, so it is the same on every Python version. Options hidden
from ``--help`` (``argparse.SUPPRESS``) are left out, as ``--help`` leaves them out.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"

HEADER = """\
# Command-line reference

Every `llome-jax` subcommand and flag, generated from the parsers by
`python scripts/make_cli_reference.py` (`tests/test_docs_reference.py` fails when this page and
`llome-jax COMMAND --help` disagree). What the flags do together, with examples: the
[tutorial](../tutorial.md) and the [how-to guides](../README.md#how-to-guides); every setting
that `--set KEY=VALUE` reaches: [configuration keys](config.md).

Common to every command: bad input (a missing or malformed file, an unknown setting, `--out`
naming a file, ...) stops it with one line on stderr and exit code 2, before anything is
written. A resume with nothing to do says so and exits 0. Ctrl-C exits 130, SIGTERM 143
([resume and budgets](../howto/resume-and-budgets.md)).
"""


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _flag(action: argparse.Action) -> str:
    """How the flag is written: ``--out OUT``, ``--resume``, ``[LABEL=]DIR ...``."""
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    value = _metavar(action)
    if action.nargs in ("+", "*"):
        value = f"{value} ..."
    elif action.nargs == "?":
        value = f"[{value}]"
    if not action.option_strings:
        return value
    return ", ".join(f"{option} {value}" for option in action.option_strings)


def _cell(text: str | None) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _rows(actions: list[argparse.Action]) -> list[str]:
    rows = []
    for action in actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        required = " (required)" if action.required and action.option_strings else ""
        rows.append(f"| `{_flag(action)}` | {_cell(action.help)}{required} |")
    return rows


def _section(name: str, parser: argparse.ArgumentParser, summary: str | None) -> list[str]:
    lines = [f"## `{name}`", ""]
    description = parser.description or summary
    if description:
        lines += [_cell(description), ""]
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    default_titles = ("positional arguments", "options", "optional arguments")
    plain = [g for g in parser._action_groups if g.title in default_titles]
    rows = [row for group in plain for row in _rows(group._group_actions)]
    if rows:
        lines += ["| flag | meaning |", "|---|---|", *rows, ""]
    for group in parser._action_groups:
        rows = _rows(group._group_actions)
        if group in plain or not rows:
            continue
        title = f"*{group.title}*"
        if group.description:
            title += f": {_cell(group.description)}"
        lines += [title, "", "| flag | meaning |", "|---|---|", *rows, ""]
    for action in subparsers:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        lines += ["| action | meaning |", "|---|---|"]
        lines += [
            f"| [`{sub}`](#{_anchor(f'{name} {sub}')}) | {_cell(helps.get(sub))} |"
            for sub in action.choices
        ]
        lines.append("")
    return lines


def _anchor(name: str) -> str:
    return name.lower().replace(" ", "-")


def _commands(
    parser: argparse.ArgumentParser, prefix: str
) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    """``(full name, parser, one-line help)`` of every (sub)command, depth first."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix} {name}"
            yield full, sub, helps.get(name)
            yield from _commands(sub, full)


def render() -> str:
    from llome_jax import cli

    parser = cli.build_parser()
    commands = list(_commands(parser, "llome-jax"))
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    for name, _, summary in commands:
        if name.count(" ") == 1:
            lines.append(f"| [`{name}`](#{_anchor(name)}) | {_cell(summary)} |")
    lines.append("")
    top = [
        a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]
    lines += ["## `llome-jax`", "", "| flag | meaning |", "|---|---|", *_rows(top), ""]
    for name, sub, summary in commands:
        lines += _section(name, sub, summary)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
