"""The public API stays: every name of ``tests/fixtures/public_api.txt`` imports (a name that
moved keeps an alias, ``llome_jax.moved``), every class and function in an ``__all__`` has a
docstring, and docs/reference/api.md is what ``scripts/make_api_reference.py`` writes."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_api_reference  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "public_api.txt"


def _snapshot() -> list[str]:
    lines = SNAPSHOT.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def _resolves(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return True


def test_every_name_earlier_releases_showed_still_imports() -> None:
    names = _snapshot()
    assert len(names) > 800 and "llome_jax.ga.run" in names
    assert [n for n in names if not _resolves(n)] == []


def test_a_name_that_disappears_is_caught() -> None:
    assert not _resolves("llome_jax.ga.loop.run_everything")
    assert not _resolves("llome_jax.no_such_module.run")


def test_every_public_class_and_function_has_a_docstring() -> None:
    missing = []
    for module_name in make_api_reference.public_modules():
        module = importlib.import_module(module_name)
        for name in make_api_reference.public_names(module):
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
                missing.append(f"{module_name}.{name}")
    assert missing == []


@pytest.mark.slow
def test_the_api_reference_is_current() -> None:
    page = make_api_reference.PAGE.read_text()
    assert page == make_api_reference.render(), "run python scripts/make_api_reference.py"


def test_the_api_reference_names_nothing_of_this_machine() -> None:
    # a default such as sys.executable renders as this checkout's path and breaks the
    # reference on any other machine (CI checks it out elsewhere)
    page = make_api_reference.PAGE.read_text()
    root = str(pathlib.Path(__file__).resolve().parents[1])
    for local in (sys.executable, root, str(pathlib.Path.home())):
        assert local not in page, f"the API reference shows {local!r}, a path of this machine"
