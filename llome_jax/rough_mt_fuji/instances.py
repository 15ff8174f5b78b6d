"""The shipped holo instance of Rough Mt. Fuji, name resolution and the :class:`Objective`.

**Names.** ``--function 'RMF(L)'`` (holo's ``additive_term=0.25, random_term_std=1.0``) or
``'RMF(L,a,sigma)'``; ``rmf`` is the reference, ``RMF(256)``. Without ``--instance-seed`` a name
is the shipped holo instance; only ``RMF(256)`` is shipped: the authors' LLOME configuration
``test_function/rough_mt_fuji.yaml`` (``dim=256``, ``random_seed=0``, ``negate=True``), drawn by
pytorch-holo 0.0.5 from ``torch.Generator().manual_seed(0)`` and stored in
``data/holo_instances.json`` (``scripts/make_rough_mt_fuji_fixtures.py``), so it works offline
without torch. With ``--instance-seed N`` any name is sampled with JAX's PRNG
(:func:`~llome_jax.rough_mt_fuji.function.make` of ``jax.random.key(N)``): holo's law, not holo's
instance (for holo's own instance of another seed use :class:`llome_jax.compat.holo.RoughMtFuji`
with torch installed).

**Start sequence.** The shipped instance starts where holo-bench's ``benchmark_optimizer.py``
starts: ``torch.manual_seed(0)`` then ``initial_solution()``, a ``torch.randint(2, (1, 256))`` from
torch's global generator; seeded with the instance's seed it draws the centroid's own bits, so
the start *is* the centroid ``c``. A sampled instance starts from uniform bits (key
``fold_in(key(N), 0x1A1)``, as sampled Ehrlich instances).

**Regret.** Values are holo's, so they are not in ``[0, 1]``: ``RMF(256)`` has ``f* = 90.4666``.
The objective declares ``optimal_value = f*`` and ``worst_value = min f`` (exact: ``f`` is
separable, :func:`~llome_jax.rough_mt_fuji.function.worst_value`); every sequence is feasible,
so the records' simple regret ``f* - f(x)`` lies in ``[0, f* - min f]`` (``RMF(256)``: ``[0,
219.54]``, min f = -129.0757), in the function's own units. Divide by ``f* - min f`` to put it on Ehrlich's
``[0, 1]`` scale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from typing import Any

import jax
import numpy as np

from llome_jax.ehrlich.config import check_instance_seed, is_rmf_name
from llome_jax.rough_mt_fuji.function import (
    RMFConfig,
    RoughMtFuji,
    from_holo,
    initial_solution,
    make,
)

__all__ = [
    "ALIASES",
    "function_digest",
    "instance_digest",
    "is_rmf_name",
    "reference_function",
    "resolve_function",
    "resolve_initial_solution",
    "shipped_names",
    "shipped_record",
]

_DATA = pathlib.Path(__file__).with_name("data") / "holo_instances.json"

#: Short names: ``rmf`` is the authors' reference instance.
ALIASES: dict[str, str] = {"rmf": "RMF(256)"}


def _config(spec: str) -> RMFConfig:
    name = ALIASES.get(spec.strip().lower(), spec)
    return RMFConfig.from_name(name)


@functools.cache
def _records() -> dict[str, dict]:
    return json.loads(_DATA.read_text())


def shipped_names() -> list[str]:
    """Names of the shipped holo instances (``["RMF(256)"]``)."""
    return list(_records())


def shipped_record(name: str) -> dict | None:
    """The stored holo data of a shipped instance (``centroid``, ``random_term``,
    ``optimal_solution``, ``optimal_value``, ``initial_solution``, ``random_seed``, ...), or
    ``None``."""
    return _records().get(name)


@functools.cache
def _shipped(name: str) -> RoughMtFuji:
    record = _records()[name]
    return from_holo(
        [int(b) for b in record["centroid"]],
        np.asarray(record["random_term"], np.float32),
        record["additive_term"],
        record["random_term_std"],
    )


def reference_function() -> RoughMtFuji:
    """The authors' reference instance ``RMF(256)`` (holo ``random_seed=0``)."""
    return _shipped("RMF(256)")


def resolve_function(spec: str, instance_seed: int | None = None) -> RoughMtFuji:
    """The instance of a CLI function spec (module docstring): the shipped holo instance without
    a seed, JAX's sample with one.

    Raises:
      ValueError: a malformed name, a name that is not shipped given without a seed, or a seed
        outside ``[0, 2**31)``.
    """
    config = _config(spec)
    if instance_seed is None:
        if config.name not in _records():
            raise ValueError(
                f"{spec!r} is not a shipped Rough Mt. Fuji instance (shipped: "
                f"{', '.join(shipped_names())}); pass --instance-seed N to sample one."
            )
        return _shipped(config.name)
    return _sampled(config, check_instance_seed(instance_seed))


@functools.lru_cache(maxsize=16)
def _sampled(config: RMFConfig, instance_seed: int) -> RoughMtFuji:
    return make(jax.random.key(instance_seed), config)


def resolve_initial_solution(spec: str, instance_seed: int | None = None) -> np.ndarray:
    """The start sequence of ``resolve_function(spec, instance_seed)``: holo-bench's (the
    centroid) for the shipped instance, uniform bits for a sampled one: int32 ``[L]``."""
    fn = resolve_function(spec, instance_seed)
    if instance_seed is None:
        stored = _records()[fn.config.name]["initial_solution"]
        return np.asarray([int(b) for b in stored], np.int32)
    key = jax.random.fold_in(jax.random.key(int(instance_seed)), 0x1A1)
    return np.asarray(initial_solution(key, fn, 1)[0], np.int32)


def instance_digest(fn: RoughMtFuji, initial: Any = None) -> str:
    """``"sha256:<hex>"`` of what defines an instance (configuration, centroid, random term as
    exact float32 decimals) and, when given, its start sequence."""
    data: dict[str, Any] = {
        "schema": "llome_jax.rough_mt_fuji/1",
        "config": [fn.config.dim, fn.config.additive_term, fn.config.random_term_std],
        "centroid": np.asarray(fn.centroid).astype(int).tolist(),
        "random_term": [float(v) for v in np.asarray(fn.random_term, np.float32)],
    }
    if initial is not None:
        data["initial_solution"] = np.asarray(initial).astype(int).tolist()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def function_digest(spec: str, instance_seed: int | None = None) -> str:
    """:func:`instance_digest` of the spec's instance and start sequence (``config.json``'s
    ``function_digest``: a resume on another instance is refused)."""
    return instance_digest(
        resolve_function(spec, instance_seed), resolve_initial_solution(spec, instance_seed)
    )
