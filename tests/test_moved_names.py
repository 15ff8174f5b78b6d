"""Names earlier releases and docs showed keep importing from there, warning once with the new
path (``llome_jax.moved``): ``llome_jax.ga.run`` (now ``ga_loop.run``), ``llome_jax.lm.
from_pretrained`` and ``llome_jax.lm.pythia.from_pretrained`` (now ``lm.convert``)."""

from __future__ import annotations

import importlib
import re
import warnings

import pytest

from llome_jax.moved import moved_names


@pytest.mark.parametrize(
    "old, name, new",
    [
        ("llome_jax.ga", "run", "llome_jax.ga.loop"),
        ("llome_jax.ga", "run_archive", "llome_jax.ga.loop"),
        ("llome_jax.lm", "from_pretrained", "llome_jax.lm.convert"),
        ("llome_jax.lm.pythia", "from_pretrained", "llome_jax.lm.convert"),
    ],
)
def test_an_old_name_is_the_new_one(old, name, new) -> None:
    importlib.import_module(old).__getattr__.warned.discard(name)  # once per process
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old}.{name} moved to {new}.{name}")):
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), name)


def test_the_alias_warns_once_and_unknown_names_still_fail() -> None:
    getattr_ = moved_names("pkg.old", {"advance": "llome_jax.ga.loop"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        getattr_("advance")
        getattr_("advance")
    assert [str(w.message) for w in seen] == [
        "pkg.old.advance moved to llome_jax.ga.loop.advance; import it from there"
    ]
    with pytest.raises(AttributeError, match=re.escape("module 'pkg.old' has no attribute 'g'")):
        getattr_("g")
    with pytest.raises(AttributeError, match="has no attribute 'runn'"):
        importlib.import_module("llome_jax.ga").runn  # noqa: B018
