"""The machine a run uses: its host and its devices.

* :mod:`~llome_jax.host.parallel`: the device ``Mesh`` and ``NamedSharding`` helpers;
* :mod:`~llome_jax.host.threads`: the cores a process may use and its thread pool;
* :mod:`~llome_jax.host.memory`: host memory limits and readings;
* :mod:`~llome_jax.host.compile_cache`: JAX's persistent compilation cache.

Import the module you need; this package imports nothing itself.
"""
