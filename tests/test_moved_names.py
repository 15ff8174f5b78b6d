"""Names earlier releases and docs showed keep importing from there, warning once with the new
path (``llome_jax.moved``): ``llome_jax.ga.run`` (now ``ga_loop.run``), ``llome_jax.lm.
from_pretrained`` and ``llome_jax.lm.pythia.from_pretrained`` (now ``lm.convert``)."""

from __future__ import annotations

import importlib
import json
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


def test_every_moved_module_imports_as_its_new_home_and_warns_once() -> None:
    """In a fresh interpreter (nothing imported yet): ``import <old>`` is the new module object
    itself, with one DeprecationWarning naming the new path; ``from llome_jax import <old>``
    and ``from <old> import <name>`` work the same way; an unknown module still fails."""
    import subprocess
    import sys

    from llome_jax.moved import MOVED_MODULES

    assert len(MOVED_MODULES) == 24 and MOVED_MODULES["llome_jax.runner"] == "llome_jax.run.runner"
    script = r"""
import importlib, json, warnings
warnings.simplefilter("always")
from llome_jax.moved import MOVED_MODULES
out = {}
for old, new in MOVED_MODULES.items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        again = importlib.import_module(old)
    out[old] = [module is again is importlib.import_module(new), [str(w.message) for w in seen]]
with warnings.catch_warnings(record=True):
    from llome_jax import losses
    from llome_jax.train_optimizer import make_optimizer
import llome_jax.training.losses as real
import llome_jax.training.optimizer as real_opt
out["from"] = [losses is real, make_optimizer is real_opt.make_optimizer]
try:
    importlib.import_module("llome_jax.no_such_module")
    out["unknown"] = "imported"
except ModuleNotFoundError:
    out["unknown"] = "refused"
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    got = json.loads(done.stdout)
    for old, new in MOVED_MODULES.items():
        assert got[old] == [True, [f"{old} moved to {new}; import it from there"]], old
    assert got["from"] == [True, True] and got["unknown"] == "refused"
