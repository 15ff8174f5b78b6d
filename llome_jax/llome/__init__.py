"""LLOME (paper Alg. 1, App. "Algorithms"): the bilevel loop, its data side and pretraining.

The data side (re-exported here):

* :mod:`~llome_jax.llome.neighbours`: exact Hamming kNN (bit-packed, blocked, JAX).
* :mod:`~llome_jax.llome.data`: PropEn pairs (SFT/MargE), preference triples (DPO), train/val split.
* :mod:`~llome_jax.llome.filter`: the Filter step choosing the ``j`` sequences to label.
* :mod:`~llome_jax.llome.temperature`: the Hamming-driven temperature schedule.
* :mod:`~llome_jax.llome.seeds`: refinement seeds and the next-input rule.

The loop (``LoopConfig``, ``LoopState``, ``llome_round`` and the presets re-exported here):
:mod:`~llome_jax.llome.config`, :mod:`~llome_jax.llome.runtime`, :mod:`~llome_jax.llome.state`,
:mod:`~llome_jax.llome.finetune`, :mod:`~llome_jax.llome.selection`,
:mod:`~llome_jax.llome.refine`, :mod:`~llome_jax.llome.round`, :mod:`~llome_jax.llome.loop` (the
round-driver plug-in and ``run``), :mod:`~llome_jax.llome.presets`. Pretraining:
:mod:`~llome_jax.llome.pretrain` and its ``pretrain_config``, ``pretrain_data``,
``pretrain_weights`` and ``pretrain_loss_log`` modules.

Paper-vs-reference choices are listed in docs/design/llome_data.md and docs/design/llome_loop.md.
"""

from llome_jax.llome.data import (
    PreferenceTriples,
    PropEnConfig,
    PropEnPairs,
    cap_infeasible_inputs,
    first_occurrences,
    preference_triples,
    propen_pairs,
    train_val_split,
)
from llome_jax.llome.filter import FilterConfig, FilterResult, filter_candidates
from llome_jax.llome.neighbours import HammingNeighbours, hamming_neighbours, max_differences
from llome_jax.llome.seeds import next_refinement_inputs, select_seeds, select_seeds_reference
from llome_jax.llome.temperature import (
    DEFAULT_TEMPERATURES,
    TemperatureSchedule,
    temperature_offset,
    temperatures,
)
from llome_jax.metrics import (
    frac_improved,
    frac_novel,
    frac_unique,
    generation_metrics,
    hamming_distance,
    mean_hamming_distance,
    mean_reward,
)

__all__ = [
    "DEFAULT_TEMPERATURES",
    "FilterConfig",
    "FilterResult",
    "HammingNeighbours",
    "PreferenceTriples",
    "PropEnConfig",
    "PropEnPairs",
    "TemperatureSchedule",
    "cap_infeasible_inputs",
    "filter_candidates",
    "first_occurrences",
    "frac_improved",
    "frac_novel",
    "frac_unique",
    "generation_metrics",
    "hamming_distance",
    "hamming_neighbours",
    "max_differences",
    "mean_hamming_distance",
    "mean_reward",
    "next_refinement_inputs",
    "preference_triples",
    "propen_pairs",
    "select_seeds",
    "select_seeds_reference",
    "temperature_offset",
    "temperatures",
    "train_val_split",
]

# The bilevel loop (llome_jax.llome.loop) and its named configurations (presets).
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.presets import PRESETS, preset
from llome_jax.llome.round import llome_round
from llome_jax.llome.state import LoopState

__all__ += ["PRESETS", "LoopConfig", "LoopState", "llome_round", "preset"]
