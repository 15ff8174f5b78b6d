"""Write docs/reference/api.md from the docstrings: every public name of every public module.

Run from the repository root after changing a public name or its docstring's first line:
``python scripts/make_api_reference.py``. ``tests/test_public_api.py`` fails while the page differs
from what this script writes, when a class or function named in an ``__all__`` has no docstring,
and when a name of ``tests/fixtures/public_api.txt`` (the names earlier releases showed) no longer
imports.

A public module is one under ``llome_jax`` whose dotted name has no part starting with ``_``,
outside the command line (``llome_jax.cli``, ``llome_jax.commands``, whose reference is
docs/reference/cli.md); its public names are its ``__all__``. Each name gets its kind, its
signature (for classes and functions; object addresses removed) and the first line of its
docstring; a name re-exported from another module says where it is defined.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import re
import sys
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "api.md"


def public_modules() -> Iterator[str]:
    """The public modules' dotted names, sorted."""
    import llome_jax

    names = ["llome_jax"]
    for info in pkgutil.walk_packages(llome_jax.__path__, "llome_jax."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] in ("cli", "commands"):
            continue
        names.append(info.name)
    return iter(sorted(names))


def public_names(module: Any) -> list[str]:
    """The module's ``__all__`` (empty without one)."""
    return list(getattr(module, "__all__", None) or [])


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip()
    return first.replace("|", "\\|")


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return re.sub(r" at 0x[0-9a-f]+", "", text).replace("|", "\\|")


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        return "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    if inspect.ismodule(obj):
        return "module"
    return "constant"


def render() -> str:
    """The page's text."""
    lines = [
        "# Python API reference",
        "",
        "Every public name of every public module, generated from the docstrings by "
        "`python scripts/make_api_reference.py` (a test fails while this page is stale). "
        "The command line has [its own page](cli.md); the design behind the modules is "
        "[BUILD.md](../../BUILD.md).",
        "",
    ]
    for name in public_modules():
        module = importlib.import_module(name)
        lines += [f"## `{name}`", "", _summary(module) or "(no module docstring)", ""]
        names = public_names(module)
        if not names:
            lines += ["No `__all__`: nothing public beyond its submodules.", ""]
            continue
        lines += ["| name | kind | signature | summary |", "|---|---|---|---|"]
        for attr in names:
            obj = getattr(module, attr)
            kind = _kind(obj)
            home = getattr(obj, "__module__", name) if kind in ("class", "function") else name
            where = "" if home in (name, None) else f" (from `{home}`)"
            signature = f"`{_signature(obj)}`" if kind in ("class", "function") else ""
            summary = _summary(obj) if kind in ("class", "function", "module") else ""
            lines.append(f"| `{attr}` | {kind}{where} | {signature} | {summary} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
