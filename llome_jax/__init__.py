"""llome_jax: a JAX-native reimplementation of LLOME (Chen, Stanton et al., ICML 2025).

Subpackages: ``ehrlich`` and ``rough_mt_fuji`` (test functions), ``optimizers`` (the ask/tell
base, the registry, local search), ``ga`` (the genetic algorithm), ``llome`` (the bilevel loop),
``lambo2`` (the guided discrete-diffusion baseline), ``lm`` (Pythia in Flax NNX), ``training``
(SFT, DPO, MargE, REINFORCE and their train step), ``run`` (the round driver and the run
directory), ``host`` (threads, memory, the device mesh), ``bench`` (the paper's figures),
``sweep``, ``compat`` (holo-bench and poli facades), ``commands`` (the CLI). BUILD.md §1 lists
every module by concern.
:class:`Objective` (``llome_jax.objective``) is what every optimizer maximises: an Ehrlich function
or your own black box. Import the subpackage you need; this top level stays light so that
``llome_jax.ehrlich`` never pays for flax or transformers (``Objective`` is imported on first use).
"""

from typing import Any

from llome_jax.moved import install_module_aliases

__version__ = "0.1.0"

__all__ = ["Objective", "__version__"]

install_module_aliases()  # llome_jax.runner and the other moved modules keep importing


def __getattr__(name: str) -> Any:
    if name == "Objective":
        from llome_jax.objective import Objective

        return Objective
    raise AttributeError(f"module 'llome_jax' has no attribute {name!r}")
