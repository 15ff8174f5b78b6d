"""Names that moved keep importing from where earlier releases and docs showed them.

:func:`moved_names` builds a module's ``__getattr__`` (PEP 562): each old name resolves, on first
use, to its new home and warns once (a :class:`DeprecationWarning` naming the new path), so a
user's script from an earlier release keeps running and says where to go. The new home is
imported only then, so an alias never adds an import to the module that holds it (``ga`` stays
jax-only; ``lm.pythia`` never imports the converter it would circle back to).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_names"]


def moved_names(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``module`` that maps each of ``names`` (old name -> ``"new.module"``,
    where the object has the same name) to the new module's object, warning once per name.

    Example: in ``llome_jax/ga.py``, ``__getattr__ = moved_names(__name__, {"run":
    "llome_jax.ga_loop"})``; then ``llome_jax.ga.run`` is ``llome_jax.ga_loop.run``.
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
