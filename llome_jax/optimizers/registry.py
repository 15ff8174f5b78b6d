"""The optimizers by name: one registry that the contract tests and the tools loop over.

Three sources, in this order of precedence (a later one cannot shadow an earlier name):

1. the built-ins: ``ga``, ``llome``, ``lambo2`` (the round-driver plug-ins) and ``local_search``
   (:class:`~llome_jax.optimizers.LocalSearch`);
2. :func:`register` (a session's own, e.g. in a test or a notebook);
3. installed packages, through the entry-point group ``llome_jax.optimizers`` (the ecosystem's
   way, as pytest and pip plug-ins are found): in a package's ``pyproject.toml``::

       [project.entry-points."llome_jax.optimizers"]
       hill_climber = "my_package.hill:HillClimber"

and, for a file of one's own, ``"module:attr"`` or ``"path/to/file.py:attr"`` wherever a name is
taken (:func:`get`), or listed (comma-separated) in the environment variable
``LLOME_JAX_OPTIMIZERS``, which adds them to :func:`names` (so that, e.g., ``LLOME_JAX_OPTIMIZERS=
mine.py:HillClimber pytest tests/test_registry_contract.py`` holds one's own optimizer to the
contract).

An entry names an :class:`~llome_jax.optimizers.AskTellOptimizer` subclass (or any class with
the same four attributes): ``name``, ``config_class`` (its frozen configuration), the
constructor ``(cfg, objective=None)`` and ``test_config(**overrides)`` (a configuration of a few
seconds, which the contract tests run). :func:`run` runs one into a run directory through
:func:`llome_jax.run.runner.run`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import pathlib
from collections.abc import Callable
from typing import Any

from llome_jax.objective import import_module_or_file
from llome_jax.run.runner import run as run_rounds

__all__ = [
    "BUILTINS",
    "BUILTIN_ENTRIES",
    "ENTRY_POINT_GROUP",
    "ENVIRONMENT",
    "OptimizerEntry",
    "get",
    "names",
    "register",
    "run",
]

#: the entry-point group installed packages register their optimizers under
ENTRY_POINT_GROUP = "llome_jax.optimizers"
#: the environment variable listing ``module:attr`` optimizers to add to the registry
ENVIRONMENT = "LLOME_JAX_OPTIMIZERS"


@dataclasses.dataclass(frozen=True)
class OptimizerEntry:
    """One registered optimizer.

    Attributes:
      name: its registry name (``config.json``'s ``"optimizer"``).
      make: ``(cfg, objective=None) -> plug-in`` for :func:`llome_jax.run.runner.run`.
      config_class: its configuration dataclass.
      test_config: ``(**overrides) -> cfg``, a configuration of a few seconds (the contract
        tests run it, so that a registered optimizer is held to the contract with no test
        edited).
      source: where it came from (``"built-in"``, ``"register"``, the entry point's value or
        ``module:attr``).
    """

    name: str
    make: Callable[..., Any]
    config_class: type
    test_config: Callable[..., Any]
    source: str = "built-in"


#: the built-ins, each found as an installed package's entry point is (``module:attr``), so that
#: the registry imports no optimizer: each is imported on first use and ``--help`` never pays for
#: LLOME's imports
BUILTIN_ENTRIES: dict[str, str] = {
    "ga": "llome_jax.ga.optimizer:GeneticAlgorithm",
    "llome": "llome_jax.llome.loop:Llome",
    "lambo2": "llome_jax.lambo2.optimizer:Lambo2",
    "local_search": "llome_jax.optimizers.local_search:LocalSearch",
}


def _builtin(name: str) -> OptimizerEntry:
    """A built-in, imported on first use."""
    return _entry(_load_attr(BUILTIN_ENTRIES[name]), "built-in")


#: the built-in optimizers' names
BUILTINS = tuple(BUILTIN_ENTRIES)
_REGISTERED: dict[str, OptimizerEntry] = {}


def _entry(obj: Any, source: str) -> OptimizerEntry:
    """An :class:`OptimizerEntry` from a class with ``name``, ``config_class`` and
    ``test_config`` (or an entry itself).

    Raises:
      ValueError: ``obj`` lacks one of them.
    """
    if isinstance(obj, OptimizerEntry):
        return dataclasses.replace(obj, source=source)
    missing = [a for a in ("name", "config_class", "test_config") if not hasattr(obj, a)]
    if missing or not getattr(obj, "name", ""):
        raise ValueError(
            f"{source}: {obj!r} is not an optimizer (it needs a non-empty name, config_class and "
            f"test_config; subclass llome_jax.optimizers.AskTellOptimizer); missing: "
            f"{', '.join(missing) or 'name'}"
        )
    return OptimizerEntry(obj.name, obj, obj.config_class, obj.test_config, source)


def register(optimizer: Any) -> OptimizerEntry:
    """Register ``optimizer`` (a class as :func:`_entry` takes, or an :class:`OptimizerEntry`)
    under its ``name`` for this process.

    Raises:
      ValueError: not an optimizer, or the name is a built-in's.
    """
    entry = _entry(optimizer, "register")
    if entry.name in BUILTINS:
        raise ValueError(f"{entry.name!r} is a built-in optimizer's name; choose another")
    _REGISTERED[entry.name] = entry
    return entry


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


_LOADED: dict[str, OptimizerEntry] = {}  # module:attr -> its entry (a file is executed once)


def _load(spec: str) -> OptimizerEntry:
    if spec not in _LOADED:
        _LOADED[spec] = _entry(_load_attr(spec), spec)
    return _LOADED[spec]


def _from_environment() -> dict[str, OptimizerEntry]:
    specs = [s.strip() for s in os.environ.get(ENVIRONMENT, "").split(",") if s.strip()]
    return {entry.name: entry for entry in map(_load, specs)}


def names() -> list[str]:
    """Every registered name: the built-ins, then :func:`register`'s, the installed packages'
    and ``LLOME_JAX_OPTIMIZERS``'s (each once, in that order)."""
    out = list(BUILTINS)
    for name in [*_REGISTERED, *_entry_points(), *_from_environment()]:
        if name not in out:
            out.append(name)
    return out


def _load_attr(spec: str) -> Any:
    """``"module:attr"`` or ``"path/to/file.py:attr"`` -> the object
    (:func:`llome_jax.objective.import_module_or_file`, as ``--objective`` loads).

    Raises:
      ValueError: not ``module:attr``, the module or file does not load, or has no ``attr``.
    """
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ValueError(f"{spec!r} is neither a registered optimizer nor 'module:attr'")
    try:
        module = import_module_or_file(where)
    except (ImportError, OSError) as error:
        raise ValueError(f"{spec!r}: {error}") from None
    if not hasattr(module, attr):
        raise ValueError(f"{spec!r}: {where} has no attribute {attr!r}")
    return getattr(module, attr)


def get(name: str) -> OptimizerEntry:
    """The optimizer ``name``: a registered name or ``"module:attr"`` / ``"file.py:attr"``.

    Raises:
      ValueError: an unknown name (the message lists the registered ones), or what ``module:
        attr`` names is not an optimizer.
    """
    if name in BUILTINS:
        return _builtin(name)
    if name in _REGISTERED:
        return _REGISTERED[name]
    points = _entry_points()
    if name in points:
        return _entry(points[name].load(), points[name].value)
    if (found := _from_environment().get(name)) is not None:
        return found
    if ":" in name:
        return _load(name)
    raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(names())}")


def run(
    optimizer: Any,
    cfg: Any,
    out: str | pathlib.Path,
    *,
    objective: Any = None,
    **options: Any,
) -> Any:
    """Run (or resume, ``resume=True``) an optimizer with configuration ``cfg`` into the run
    directory ``out``: :func:`llome_jax.run.runner.run` (its ``options``: ``budget``, ``resume``,
    ``progress``, ``max_rounds_this_call``, ``trackers``, ...) on ``objective`` if given, else
    ``cfg.function``. ``optimizer``: a registered name or ``module:attr`` (:func:`get`), an
    :class:`OptimizerEntry`, or an optimizer class itself (registered or not)."""
    if isinstance(optimizer, str):
        entry = get(optimizer)
    elif isinstance(optimizer, OptimizerEntry):
        entry = optimizer
    else:
        entry = _entry(optimizer, getattr(optimizer, "__qualname__", repr(optimizer)))
    return run_rounds(entry.make(cfg, objective=objective), out, **options)
