"""CLI subcommands, one module each (discovered by :mod:`llome_jax.cli`)."""
