"""Ehrlich functions in JAX (imports only jax and numpy).

Closed-form biophysical sequence-design test functions (Stanton et al. 2024; Chen, Stanton et al.,
ICML 2025, App. A), bit-identical to pytorch-holo 0.0.5 and evaluated in large jitted batches
(throughput: docs/benchmarks.md).
"""

from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.dispatch import (
    bucket_size,
    evaluate,
    is_feasible,
    motif_presence,
    validate_tokens,
)
from llome_jax.ehrlich.dmp import (
    banded_mask,
    is_ergodic,
    sample_chain,
    sample_transition_matrix,
    stationary_distribution,
)
from llome_jax.ehrlich.function import Ehrlich, from_holo, make
from llome_jax.ehrlich.instances import (
    PAPER_FUNCTIONS,
    configuration_name,
    paper_function,
    paper_function_names,
    paper_initial_solution,
    resolve_function,
    resolve_initial_solution,
)
from llome_jax.ehrlich.kernel import default_chunk_size
from llome_jax.ehrlich.solutions import initial_solution, optimal_solution, random_solution

__all__ = [
    "PAPER_FUNCTIONS",
    "Ehrlich",
    "EhrlichConfig",
    "banded_mask",
    "bucket_size",
    "configuration_name",
    "default_chunk_size",
    "evaluate",
    "from_holo",
    "initial_solution",
    "is_ergodic",
    "is_feasible",
    "make",
    "motif_presence",
    "optimal_solution",
    "paper_function",
    "paper_function_names",
    "paper_initial_solution",
    "random_solution",
    "resolve_function",
    "resolve_initial_solution",
    "sample_chain",
    "sample_transition_matrix",
    "stationary_distribution",
    "validate_tokens",
]
