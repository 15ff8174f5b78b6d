"""Bring your own optimizer: the ask/tell base every method of a comparison plugs into, and the
registry every tool loops over.

* :class:`AskTellOptimizer` (:mod:`.base`): a method supplies a configuration (an extension of
  :class:`BenchmarkSettings`), a pytree state, ``ask`` and ``tell``; the base owns round 0,
  labelling through the oracle, the contract's checks, records, checkpoints and resume.
* :mod:`.registry`: the optimizers by name (the built-ins, any installed package's through the
  ``llome_jax.optimizers`` entry-point group, ``module:attr`` for a file of one's own);
  :func:`run` runs one into a run directory.
* :class:`LocalSearch` (:mod:`.local_search`): blind single-mutant local search on the base.

``docs/howto/own-optimizer.md`` walks through a complete one.
"""

from llome_jax.optimizers.base import (
    AskTellOptimizer,
    AskTellState,
    BenchmarkSettings,
    ContractError,
    LabelledData,
    Round0,
    first_unlabelled,
)
from llome_jax.optimizers.local_search import LocalSearch, LocalSearchConfig
from llome_jax.optimizers.registry import (
    ENTRY_POINT_GROUP,
    OptimizerEntry,
    get,
    names,
    register,
    run,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AskTellOptimizer",
    "AskTellState",
    "BenchmarkSettings",
    "ContractError",
    "LabelledData",
    "LocalSearch",
    "LocalSearchConfig",
    "OptimizerEntry",
    "Round0",
    "first_unlabelled",
    "get",
    "names",
    "register",
    "run",
]
