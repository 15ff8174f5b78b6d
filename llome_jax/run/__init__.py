"""Running an optimizer and its run directory, the parts every method shares.

* :mod:`~llome_jax.run.runner`: the round driver (round 0, rounds, stop reasons, exact resume);
* :mod:`~llome_jax.run.rundir`: the run directory's files (``config.json``, ``rounds.jsonl``,
  ``evaluated.csv``, ``stopped.json``, ``done.json``), written atomically;
* :mod:`~llome_jax.run.checkpoint`: orbax checkpoints of a pytree state;
* :mod:`~llome_jax.run.migrations`: ``config_version`` and the upgrades of older run directories;
* :mod:`~llome_jax.run.integrity`: the check that a run directory's files agree, and ``--repair``;
* :mod:`~llome_jax.run.lock`: one writer per run directory;
* :mod:`~llome_jax.run.provenance`, :mod:`~llome_jax.run.tracking`,
  :mod:`~llome_jax.run.plotting`, :mod:`~llome_jax.run.label_audit`,
  :mod:`~llome_jax.run.files`: what a run records beside its data.

Import the module you need; this package imports nothing itself.
"""
