"""llome_jax: a JAX-native reimplementation of LLOME (Chen, Stanton et al., ICML 2025).

Subpackages and modules: ``ehrlich`` (test functions), ``ga`` / ``ga_loop`` (the genetic
algorithm's operators / whole runs), ``lm`` (Pythia in Flax NNX), ``losses``, ``loss_inputs``,
``loss_registry``, ``train``, ``train_optimizer``, ``dataset_logprobs`` (SFT, DPO, MargE,
REINFORCE and their training), ``llome`` (the bilevel loop), ``lambo2`` (the guided
discrete-diffusion baseline), ``runner`` / ``plugin`` (the round driver and the plug-ins' shared
base), ``bench`` (the paper's figures), ``compat`` (holo-bench and poli facades). BUILD.md §1
lists every module by concern.
:class:`Objective` (``llome_jax.objective``) is what every optimizer maximises: an Ehrlich function
or your own black box. Import the subpackage you need; this top level stays light so that
``llome_jax.ehrlich`` never pays for flax or transformers (``Objective`` is imported on first use).
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["Objective", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Objective":
        from llome_jax.objective import Objective

        return Objective
    raise AttributeError(f"module 'llome_jax' has no attribute {name!r}")
