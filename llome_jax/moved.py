"""Names that moved keep importing from where earlier releases and docs showed them.

:data:`MOVED_MODULES` lists the modules that moved into packages (``llome_jax.runner`` ->
``llome_jax.run.runner``); :func:`install_module_aliases` (run by ``import llome_jax``) lets
``import llome_jax.runner`` and ``from llome_jax.runner import run`` keep working: the old name
is the new module itself (one module object, so state and ``monkeypatch`` agree), with one
:class:`DeprecationWarning` naming the new path.

:func:`moved_names` builds a module's ``__getattr__`` (PEP 562): each old name resolves, on first
use, to its new home and warns once (a :class:`DeprecationWarning` naming the new path), so a
user's script from an earlier release keeps running and says where to go. The new home is
imported only then, so an alias never adds an import to the module that holds it (``ga`` stays
jax-only; ``lm.pythia`` never imports the converter it would circle back to).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["MOVED_MODULES", "install_module_aliases", "moved_names"]

#: old module -> its new home (the regroup of issue 63: the GA, the run driver and its files, the
#: training stack and the host/device helpers each in a package of their own)
MOVED_MODULES: dict[str, str] = {
    "llome_jax.ga_loop": "llome_jax.ga.loop",
    "llome_jax.ga_optimizer": "llome_jax.ga.optimizer",
    "llome_jax.runner": "llome_jax.run.runner",
    "llome_jax.rundir": "llome_jax.run.rundir",
    "llome_jax.run_integrity": "llome_jax.run.integrity",
    "llome_jax.run_lock": "llome_jax.run.lock",
    "llome_jax.checkpoint": "llome_jax.run.checkpoint",
    "llome_jax.migrations": "llome_jax.run.migrations",
    "llome_jax.provenance": "llome_jax.run.provenance",
    "llome_jax.tracking": "llome_jax.run.tracking",
    "llome_jax.plotting": "llome_jax.run.plotting",
    "llome_jax.files": "llome_jax.run.files",
    "llome_jax.label_audit": "llome_jax.run.label_audit",
    "llome_jax.train": "llome_jax.training.step",
    "llome_jax.train_optimizer": "llome_jax.training.optimizer",
    "llome_jax.losses": "llome_jax.training.losses",
    "llome_jax.loss_inputs": "llome_jax.training.loss_inputs",
    "llome_jax.loss_registry": "llome_jax.training.loss_registry",
    "llome_jax.dataset_logprobs": "llome_jax.training.dataset_logprobs",
    "llome_jax.host_memory": "llome_jax.host.memory",
    "llome_jax.host_threads": "llome_jax.host.threads",
    "llome_jax.compile_cache": "llome_jax.host.compile_cache",
    "llome_jax.parallel": "llome_jax.host.parallel",
    "llome_jax.plugin": "llome_jax.optimizers.plugin",
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old module name as the new module object (imported on the way), warning once."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the new module is already initialised."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the names of :data:`MOVED_MODULES` (and nothing else)."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(self.moved[fullname]))


def install_module_aliases(moved: Mapping[str, str] = MOVED_MODULES) -> None:
    """Let every old module name of ``moved`` import as its new module (idempotent)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder(moved))


def moved_names(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``module`` that maps each of ``names`` (old name -> ``"new.module"``,
    where the object has the same name) to the new module's object, warning once per name.

    Example: in ``llome_jax/ga/operators.py``, ``__getattr__ = moved_names(__name__, {"run":
    "llome_jax.ga.loop"})``; then ``llome_jax.ga.run`` is ``llome_jax.ga.loop.run``.
    """
    warned: set[str] = set()

    def module_getattr(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target = names[name]
        if name not in warned:
            warned.add(name)
            warnings.warn(
                f"{module}.{name} moved to {target}.{name}; import it from there",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(importlib.import_module(target), name)

    module_getattr.warned = warned  # the names warned about (a test may clear it)
    return module_getattr
