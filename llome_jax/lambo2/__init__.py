"""LaMBO-2 (guided discrete diffusion with a CNN ensemble) for Ehrlich functions.

Ports cortex v0.0.4 / poli-baselines (paper App. "LaMBO-2 Model and Training Details"); design
notes in ``docs/design/lambo2_port.md``. Modules: ``model`` (CNN encoder, MLM head, regressor and
classifier ensembles in Flax NNX), ``train`` (corruption, losses, per-leaf Adam updates, rebalancing
sampler), ``design`` (seed selection, acquisition, saliency, guided design steps under ``lax.scan``),
``optimizer`` (rounds, checkpoints, run directory).
"""
