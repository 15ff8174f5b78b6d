"""llome_jax: a JAX-native reimplementation of LLOME (Chen, Stanton et al., ICML 2025).

Subpackages: ``ehrlich`` (test functions), ``ga`` (genetic algorithm), ``lm`` (Pythia in Flax
NNX), ``losses``/``train`` (SFT, DPO, MargE, REINFORCE), ``llome`` (the bilevel loop),
``lambo2`` (the guided discrete-diffusion baseline). Import the subpackage you need; this top level
stays light so that ``llome_jax.ehrlich`` never pays for flax or transformers.
"""

__version__ = "0.1.0"
