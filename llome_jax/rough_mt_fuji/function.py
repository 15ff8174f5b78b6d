"""Rough Mt. Fuji (RMF): configuration, the instance pytree, sampling and evaluation.

For a binary sequence ``x`` in ``{0, 1}^L`` (Neidhart et al. 2014; pytorch-holo 0.0.5's
``holo.test_functions.closed_form.RoughMtFuji``, the function the paper's related-work appendix
names: "We implemented the Rough Mt. Fuji model as an additional test function and verified that
a genetic algorithm can easily optimize it"):

    f(x) = -a * d_H(x, c) + sum_l r_l x_l,      c in {0, 1}^L,  r_l ~ N(0, sigma^2),

with the centroid ``c``, the additive term ``a`` (holo: 0.25) and the random term ``r``
(``sigma`` = holo's ``random_term_std``, 1.0). Higher is better here (holo's ``negate=True``
is the minimisers' sign; :class:`llome_jax.compat.holo.RoughMtFuji` applies it). ``f`` is
separable, so its maximiser is per position (holo's ``optimal_solution``): ``x_l = 1`` where
``r_l - a > 0``, ``x_l = 0`` where ``r_l + a < 0``, else ``c_l``; its minimiser likewise.

**Bit-identical float32.** holo computes ``-a * d`` (float32; ``d`` an exact count) plus the
float32 ``torch.sum`` of ``r * x`` over the last axis. torch's CPU sum is a cascade over 8-lane
vectors (``aten/src/ATen/native/cpu/SumKernel.cpp``: ``Vectorized<float>`` has 8 lanes in every
build torch dispatches a reduction to, AVX2, AVX512 and the default; 4 interleaved accumulators,
a 4-level cascade of 16-element chunks, the lanes then added left to right; rows shorter than 8
take the scalar path with 4 accumulators). :func:`torch_sum` performs exactly these float32
additions in that order (the structure is fixed by ``L``, so it unrolls at trace time), so values
equal holo's bit for bit (checked against holo on AVX512, AVX2 and default dispatch:
``tests/test_rough_mt_fuji.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ehrlich.dispatch import _finish, _prepare

__all__ = [
    "RMFConfig",
    "RoughMtFuji",
    "evaluate",
    "from_holo",
    "initial_solution",
    "make",
    "optimal_solution",
    "optimal_value",
    "random_solution",
    "torch_sum",
    "worst_solution",
    "worst_value",
]

#: ``Vectorized<float>::size()`` of torch's CPU sum kernel (module docstring).
LANES = 8
_ILP = 4  # row_sum's interleaved accumulators
_LEVELS = 4  # multi_row_sum's cascade levels
_MIN_LEVEL_POWER = 4  # chunks of at least 2**4 = 16 elements

_NAME_RE = re.compile(
    r"^\s*RMF\(\s*(\d+)\s*(?:,\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*)?\)\s*$", re.IGNORECASE
)


@dataclasses.dataclass(frozen=True)
class RMFConfig:
    """Static parameters of a Rough Mt. Fuji function (hashable, a static jit argument).

    Attributes:
      dim: sequence length ``L``.
      additive_term: ``a >= 0``, the weight of the Hamming distance to the centroid (holo 0.25).
      random_term_std: ``sigma >= 0`` of the random term (holo 1.0).
    """

    dim: int
    additive_term: float = 0.25
    random_term_std: float = 1.0

    #: the alphabet ``{0, 1}``
    num_states = 2

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int | np.integer) or self.dim < 1:
            raise ValueError(f"RMF dim must be an int >= 1; got {self.dim!r}.")
        object.__setattr__(self, "dim", int(self.dim))
        for field in ("additive_term", "random_term_std"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
                raise ValueError(f"RMF {field} must be a number; got {value!r}.")
            if not math.isfinite(float(value)) or float(value) < 0:
                raise ValueError(f"RMF {field} must be finite and >= 0; got {value!r}.")
            object.__setattr__(self, field, float(value))

    @property
    def name(self) -> str:
        """``"RMF(L)"`` with holo's defaults, else ``"RMF(L,a,sigma)"``."""
        if (self.additive_term, self.random_term_std) == (0.25, 1.0):
            return f"RMF({self.dim})"
        return f"RMF({self.dim},{self.additive_term!r},{self.random_term_std!r})"

    @classmethod
    def from_name(cls, name: str) -> RMFConfig:
        """Parse ``"RMF(L)"`` or ``"RMF(L,a,sigma)"`` (case-insensitive ``RMF``).

        Raises:
          ValueError: not such a name, or parameters no instance has.
        """
        match = _NAME_RE.match(str(name))
        if match is None:
            raise ValueError(
                f"not a Rough Mt. Fuji name: {name!r}; expected 'RMF(L)' or 'RMF(L,a,sigma)', "
                "e.g. 'RMF(256)'"
            )
        dim, a, sigma = match.groups()
        try:
            return cls(
                int(dim), 0.25 if a is None else float(a), 1.0 if sigma is None else float(sigma)
            )
        except ValueError as error:
            raise ValueError(f"{name!r}: {error}") from None


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["centroid", "random_term"],
    meta_fields=["config"],
)
@dataclasses.dataclass(frozen=True)
class RoughMtFuji:
    """One RMF instance (a pytree: the arrays are leaves, ``config`` is static).

    Attributes:
      config: the static :class:`RMFConfig`.
      centroid: int32 ``[L]``, the centroid ``c`` in ``{0, 1}``.
      random_term: float32 ``[L]``, ``r`` (already scaled by ``random_term_std``).
    """

    config: RMFConfig
    centroid: jax.Array
    random_term: jax.Array

    @property
    def name(self) -> str:
        """The configuration's name, e.g. ``"RMF(256)"``."""
        return self.config.name

    def __repr__(self) -> str:
        return f"RoughMtFuji({self.config.name})"


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------
def make(key: jax.Array, config: RMFConfig) -> RoughMtFuji:
    """Sample an instance with JAX's PRNG (holo's law, not holo's torch stream):
    ``c ~ U{0,1}^L`` (key ``split(key)[0]``), ``r = sigma * N(0,1)^L`` in float32 (``[1]``).

    Only the shipped instances (:mod:`llome_jax.rough_mt_fuji.instances`) are holo's own."""
    key_centroid, key_random = jax.random.split(key)
    centroid = jax.random.randint(key_centroid, (config.dim,), 0, 2, dtype=jnp.int32)
    normal = jax.random.normal(key_random, (config.dim,), dtype=jnp.float32)
    return _build(
        config, np.asarray(centroid), np.asarray(normal) * np.float32(config.random_term_std)
    )


def from_holo(
    centroids: Any, random_term: Any, additive_term: float = 0.25, random_term_std: float = 1.0
) -> RoughMtFuji:
    """An explicit instance in holo's representation: ``centroids`` ``[1, L]`` (or ``[L]``) in
    ``{0, 1}``, ``random_term`` float32 ``[1, L]`` (holo's ``_random_term``, already scaled).
    ``random_term_std`` is recorded in the configuration only.

    Raises:
      ValueError: shapes that disagree, or a centroid outside ``{0, 1}``.
    """
    centroid = np.asarray(_to_numpy(centroids)).reshape(-1)
    random = np.asarray(_to_numpy(random_term), np.float32).reshape(-1)
    if centroid.shape != random.shape or centroid.size == 0:
        raise ValueError(
            f"centroids and random_term must both hold L values; got {centroid.size} and "
            f"{random.size}."
        )
    if not np.all((centroid == 0) | (centroid == 1)):
        raise ValueError("centroids must hold states in {0, 1}.")
    if not np.all(np.isfinite(random)):
        raise ValueError("random_term must be finite.")
    config = RMFConfig(int(centroid.size), additive_term, random_term_std)
    return _build(config, centroid.astype(np.int32), random)


def _build(config: RMFConfig, centroid: np.ndarray, random_term: np.ndarray) -> RoughMtFuji:
    return RoughMtFuji(
        config=config,
        centroid=jnp.asarray(centroid, jnp.int32),
        random_term=jnp.asarray(np.asarray(random_term, np.float32), jnp.float32),
    )


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


# ---------------------------------------------------------------------------------------------
# torch's float32 sum, addition for addition
# ---------------------------------------------------------------------------------------------
def _ceil_log2(n: int) -> int:
    return 0 if n <= 1 else (n - 1).bit_length()


def _multi_row_sum(rows: list[jax.Array]) -> jax.Array:
    """``multi_row_sum``: the cascade over ``rows`` (each ``[..., ILP(, LANES)]``), four levels
    of ``2**max(4, ceil_log2(n) // 4)``-row chunks."""
    size = len(rows)
    power = max(_MIN_LEVEL_POWER, _ceil_log2(size) // _LEVELS)
    step, mask = 1 << power, (1 << power) - 1
    acc = [jnp.zeros_like(rows[0]) for _ in range(_LEVELS)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            acc[0] = acc[0] + rows[i]
            i += 1
        for j in range(1, _LEVELS):
            acc[j] = acc[j] + acc[j - 1]
            acc[j - 1] = jnp.zeros_like(acc[j - 1])
            if i & (mask << (j * power)):
                break
    for row in rows[i:]:
        acc[0] = acc[0] + row
    for j in range(1, _LEVELS):
        acc[0] = acc[0] + acc[j]
    return acc[0]


def _row_sum(items: list[jax.Array]) -> jax.Array:
    """``row_sum``: ``ILP`` interleaved partial sums of ``items`` (``[...]`` scalars or
    ``[..., LANES]`` vectors), the leftover items into the first, then the partials in order."""
    groups = len(items) // _ILP
    if groups:
        rows = [jnp.stack(items[_ILP * g : _ILP * (g + 1)]) for g in range(groups)]
        total = _multi_row_sum(rows)  # [ILP(, LANES)]
        partial = [total[k] for k in range(_ILP)]
    else:
        partial = [jnp.zeros_like(items[0]) for _ in range(_ILP)]
    for item in items[_ILP * groups :]:
        partial[0] = partial[0] + item
    for k in range(1, _ILP):
        partial[0] = partial[0] + partial[k]
    return partial[0]


def torch_sum(p: jax.Array) -> jax.Array:
    """``torch.sum(p, dim=-1)`` of float32 ``p [L]`` on a CPU, bit for bit: float32 ``[]``.

    ``L >= 8``: the ``L // 8`` 8-lane vectors through ``row_sum``, then the ``L % 8`` trailing
    elements and the 8 lanes added left to right to a zero; ``L < 8``: ``row_sum`` of the scalars
    (module docstring). A single sequence; :func:`evaluate` vmaps it.
    """
    length = p.shape[-1]
    if length < LANES:
        return jnp.float32(0) + _row_sum([p[k] for k in range(length)])
    vectors = length // LANES
    lanes = _row_sum([p[LANES * v : LANES * (v + 1)] for v in range(vectors)])
    total = jnp.float32(0)
    for k in range(LANES * vectors, length):
        total = total + p[k]
    for k in range(LANES):
        total = total + lanes[k]
    return total


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------
def _value(fn: RoughMtFuji, x: jax.Array) -> jax.Array:
    """``f(x)`` of one sequence ``x`` int ``[L]``: float32 ``[]`` (holo's operations in holo's
    order; a zero is +0.0, as torch's sum never returns -0.0)."""
    distance = jnp.sum(x != fn.centroid, dtype=jnp.int32)
    # holo rounds -a * d to float32 before adding the sum; a product in the traced code would be
    # contracted with that addition into one FMA (one rounding) by XLA's CPU and GPU compilers,
    # so the products come from a table made on the host
    penalty = jnp.asarray(_penalties(fn.config.additive_term, fn.config.dim))[distance]
    value = penalty + torch_sum(fn.random_term * x.astype(jnp.float32))
    return jnp.where(value == 0, jnp.float32(0), value)


@functools.cache
def _penalties(additive_term: float, dim: int) -> np.ndarray:
    """float32 ``[L + 1]``: ``fl32(fl32(-a) * d)`` for ``d = 0 .. L`` (NumPy's IEEE products)."""
    return np.float32(-additive_term) * np.arange(dim + 1, dtype=np.float32)


@jax.jit
def _evaluate_rows(fn: RoughMtFuji, x: jax.Array) -> jax.Array:
    return jax.vmap(_value, in_axes=(None, 0))(fn, x)


def evaluate(fn: RoughMtFuji, x: Any) -> jax.Array:
    """``f(x)`` (module docstring) for int ``x [..., L]`` with states in ``{0, 1}``: float32
    ``[...]``, equal to holo's ``evaluate_true`` bit for bit (and to ``-forward`` with
    ``negate=True``, noise-free).

    Validation and batching are Ehrlich's (:func:`llome_jax.ehrlich.validate_tokens`): integer
    dtype, last axis ``L``, states in range (checked for concrete arrays); a host batch is padded
    to :func:`llome_jax.ehrlich.bucket_size` rows, so that batch sizes share compilations. Works
    inside ``jit``/``vmap``/``lax.scan`` (tracers are only shape-checked).

    Raises:
      ValueError: float or one-hot input, wrong length, a state outside ``{0, 1}``.

    Example:
      >>> import llome_jax.rough_mt_fuji as rmf
      >>> fn = rmf.reference_function()
      >>> float(rmf.evaluate(fn, rmf.optimal_solution(fn))) == rmf.optimal_value(fn)
      True
    """
    flat, n, batch_shape = _prepare(fn, x)  # type: ignore[arg-type]
    if n is None:  # a tracer or a device array: validated, evaluated as it is
        shape = flat.shape[:-1]
        out = _evaluate_rows(fn, flat.reshape(-1, fn.config.dim))
        return out.reshape(shape)
    return _finish(_evaluate_rows(fn, jax.device_put(flat)), n, batch_shape)


# ---------------------------------------------------------------------------------------------
# Special sequences
# ---------------------------------------------------------------------------------------------
def optimal_solution(fn: RoughMtFuji) -> jax.Array:
    """holo's ``optimal_solution``: ``c`` with ``x_l = 1`` where ``r_l - a > 0`` and ``x_l = 0``
    where ``r_l + a < 0`` (``f`` is separable; the maximiser for ``a >= 0``): int32 ``[L]``."""
    r = np.asarray(fn.random_term, np.float32)
    a = np.float32(fn.config.additive_term)
    x = np.asarray(fn.centroid, np.int32).copy()
    x[r - a > 0] = 1
    x[r + a < 0] = 0
    return jnp.asarray(x, jnp.int32)


def worst_solution(fn: RoughMtFuji) -> jax.Array:
    """The minimiser: per position the smaller of ``f``'s two contributions (``c_l = 1``:
    ``x_l = 0`` unless ``r_l < -a``; ``c_l = 0``: ``x_l = 1`` where ``r_l < a``): int32 ``[L]``."""
    r = np.asarray(fn.random_term, np.float32)
    a = np.float32(fn.config.additive_term)
    c = np.asarray(fn.centroid, np.int32)
    x = np.where(c == 1, (r < -a).astype(np.int32), (r - a < 0).astype(np.int32))
    return jnp.asarray(x, jnp.int32)


def optimal_value(fn: RoughMtFuji) -> float:
    """``f* = f(optimal_solution)`` in float32 (holo's ``_optimal_value``; its ``optimal_value``
    is ``-f*`` with ``negate=True``)."""
    return float(evaluate(fn, optimal_solution(fn)))


def worst_value(fn: RoughMtFuji) -> float:
    """``min f = f(worst_solution)`` in float32: the objective's ``worst_value``, the bottom of
    the regret range ``[0, f* - min f]``."""
    return float(evaluate(fn, worst_solution(fn)))


def initial_solution(key: jax.Array, fn: RoughMtFuji, n: int = 1) -> jax.Array:
    """``n`` uniform binary sequences (holo's ``random_solution`` law): int32 ``[n, L]``."""
    return jax.random.randint(key, (n, fn.config.dim), 0, 2, dtype=jnp.int32)


random_solution = initial_solution
