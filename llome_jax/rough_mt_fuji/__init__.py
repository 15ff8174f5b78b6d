"""Rough Mt. Fuji in JAX (imports only jax and numpy): bit-identical to pytorch-holo 0.0.5.

The paper's other test function (App. related work: "We implemented the Rough Mt. Fuji model
as an additional test function and verified that a genetic algorithm can easily optimize it"):
``f(x) = -a d_H(x, c) + sum_l r_l x_l`` over ``{0, 1}^L`` (:mod:`.function`), with the authors'
reference instance ``RMF(256)`` shipped (:mod:`.instances`) and usable by name in every
optimizer: ``--function 'RMF(256)'`` (docs/how-to/rough-mt-fuji.md).
"""

from llome_jax.rough_mt_fuji.function import (
    RMFConfig,
    RoughMtFuji,
    evaluate,
    from_holo,
    initial_solution,
    make,
    optimal_solution,
    optimal_value,
    random_solution,
    torch_sum,
    worst_solution,
    worst_value,
)
from llome_jax.rough_mt_fuji.instances import (
    function_digest,
    instance_digest,
    is_rmf_name,
    reference_function,
    resolve_function,
    resolve_initial_solution,
    shipped_names,
    shipped_record,
)

__all__ = [
    "RMFConfig",
    "RoughMtFuji",
    "evaluate",
    "from_holo",
    "function_digest",
    "initial_solution",
    "instance_digest",
    "is_rmf_name",
    "make",
    "optimal_solution",
    "optimal_value",
    "random_solution",
    "reference_function",
    "resolve_function",
    "resolve_initial_solution",
    "shipped_names",
    "shipped_record",
    "torch_sum",
    "worst_solution",
    "worst_value",
]
