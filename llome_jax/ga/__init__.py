"""The paper's genetic algorithm (App. "Genetic Algorithm", Algs. 2-4), as one package:

* :mod:`~llome_jax.ga.operators`: one generation at a time (config, state, mutation,
  recombination, survival, ``ask``/``tell``; jax only), re-exported here;
* :mod:`~llome_jax.ga.loop`: whole runs of many generations (``run``, ``start``/``advance``,
  ``run_archive``: round 0's shared archive);
* :mod:`~llome_jax.ga.optimizer`: the GA as a plug-in of the ask/tell base
  (:class:`~llome_jax.ga.optimizer.GeneticAlgorithm`) and the many-seeds mode.

``import llome_jax.ga`` imports only jax; ``ga.run`` and the other whole-run names resolve to
:mod:`llome_jax.ga.loop` on first use (where earlier releases showed them), warning once.
"""

from llome_jax.ga.operators import (
    GAConfig,
    GAState,
    approx_count_unique_rows,
    ask,
    count_unique_rows,
    init,
    mutate,
    random_bits,
    recombine,
    sorted_unique_rows,
    survival_mask,
    tell,
)
from llome_jax.moved import moved_names

__all__ = [
    "GAConfig",
    "GAState",
    "approx_count_unique_rows",
    "ask",
    "count_unique_rows",
    "init",
    "mutate",
    "random_bits",
    "recombine",
    "sorted_unique_rows",
    "survival_mask",
    "tell",
]

#: Whole runs live in :mod:`llome_jax.ga.loop`; the old names still import (and warn once).
__getattr__ = moved_names(
    __name__,
    {name: "llome_jax.ga.loop" for name in ("run", "start", "advance", "run_archive")},
)
