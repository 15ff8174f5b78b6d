"""The training stack the language-model optimizers share (paper §4, App. "Training losses").

* :mod:`~llome_jax.training.losses`: SFT, DPO, MargE and REINFORCE as pure functions;
* :mod:`~llome_jax.training.loss_inputs` and :mod:`~llome_jax.training.loss_registry`: what a
  loss reads and the registry ``--loss`` names;
* :mod:`~llome_jax.training.step`: the jitted train step and epochs;
* :mod:`~llome_jax.training.optimizer`: the optax optimizer and its schedule;
* :mod:`~llome_jax.training.dataset_logprobs`: log-likelihoods of a dataset under a model.

Import the module you need; this package imports nothing itself.
"""
