"""LaMBO-2 (guided discrete diffusion with a CNN ensemble) for Ehrlich functions.

Ports cortex v0.0.4 / poli-baselines (paper App. "LaMBO-2 Model and Training Details"); design
notes in ``docs/design/lambo2_port.md``. Modules: ``model`` (CNN encoder, MLM head, regressor and
classifier ensembles in Flax NNX), ``losses`` (corruption, the three losses), ``data`` (task
tables, rebalancing sampler, minibatches), ``train`` (per-leaf Adam updates, the fused step, the
fit), ``seeds`` (seed selection), ``design`` (acquisition, saliency, guided design steps under
``lax.scan``), ``kl_term`` (the design's optional KL term and pseudo-log-likelihood),
``optimizer`` (rounds, checkpoints, run directory).
"""
