"""Ehrlich functions: the instance pytree, sampling (``make``) and import (``from_holo``).

For a sequence ``x`` in ``V^L`` (paper Sec. 4.1 and App. A; semantics of pytorch-holo 0.0.5):

    f(x) = prod_{i=1..c} r(h_i(x))   if x is feasible,   -inf otherwise,

    h_i(x) = floor(max_{l=0..L-1-s_k} sum_j [x_{l+s_j} = m_j] / qf1) / qf2,
    qf1 = ceil(k/q),  qf2 = k/qf1,   r(h) = (a h (h-1) + 1) h,

and ``x`` is feasible iff ``A[x_{t-1}, x_t] > 0`` for all ``t`` (first state free).
When ``q`` divides ``k`` the quantisation equals the paper's ``floor(q * count / k) / q``.
Values are bit-identical float32 to the reference (left-to-right product in float32).

Evaluation: :mod:`llome_jax.ehrlich.dispatch` (``evaluate``, ``motif_presence``,
``is_feasible``) over the kernel of :mod:`llome_jax.ehrlich.kernel`; special sequences:
:mod:`llome_jax.ehrlich.solutions`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.dmp import sample_chain, sample_transition_matrix, stationary_distribution

__all__ = [
    "Ehrlich",
    "from_holo",
    "make",
]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["transition_matrix", "stationary_dist", "motifs", "offsets"],
    meta_fields=["config"],
)
@dataclasses.dataclass(frozen=True)
class Ehrlich:
    """One Ehrlich function instance (a pytree: arrays are leaves, ``config`` is static).

    Attributes:
      config: the static :class:`EhrlichConfig` (shapes, quantisation, epistasis).
      transition_matrix: float32 ``[v, v]``; zeros mark infeasible transitions.
      stationary_dist: float32 ``[v]``; law of motif and initial-solution chains.
      motifs: int32 ``[c, k]`` motif elements ``m^(i)``.
      offsets: int32 ``[c, k]`` the paper's spacing vectors ``s^(i)`` (``s_1 = 0``, increasing).
    """

    config: EhrlichConfig
    transition_matrix: jax.Array
    stationary_dist: jax.Array
    motifs: jax.Array
    offsets: jax.Array

    @property
    def spacings(self) -> jax.Array:
        """holo's representation: int32 ``[c, k-1]`` gaps between consecutive motif elements."""
        return jnp.diff(self.offsets, axis=-1)

    @property
    def name(self) -> str:
        """The paper's name of the configuration, e.g. ``"Ehr(32,32)-4-4-4"``."""
        return self.config.name

    @property
    def optimal_value(self) -> float:
        """The global maximum, always 1.0."""
        return 1.0

    #: ``to_json``'s format tag (a loadable instance, the transition matrix included).
    JSON_SCHEMA = "llome_jax.ehrlich/1"

    def to_json(self) -> dict[str, Any]:
        """The whole instance as JSON-ready data; :meth:`from_json` rebuilds it bit for bit
        (float32 values are written as exact decimal floats)."""
        cfg = self.config
        return {
            "schema": self.JSON_SCHEMA,
            "config": {
                "num_states": cfg.num_states,
                "dim": cfg.dim,
                "num_motifs": cfg.num_motifs,
                "motif_length": cfg.motif_length,
                "quantization": cfg.quantization,
                "epistasis_factor": cfg.epistasis_factor,
            },
            "transition_matrix": np.asarray(self.transition_matrix, np.float32).tolist(),
            "stationary_dist": np.asarray(self.stationary_dist, np.float32).tolist(),
            "motifs": np.asarray(self.motifs).tolist(),
            "offsets": np.asarray(self.offsets).tolist(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ehrlich:
        """An instance from :meth:`to_json`'s data (other keys, e.g. a description, are ignored).

        Raises:
          ValueError: another schema, or arrays inconsistent with the configuration.
        """
        if data.get("schema") != cls.JSON_SCHEMA:
            raise ValueError(
                f"not an Ehrlich instance file: schema {data.get('schema')!r}, expected "
                f"{cls.JSON_SCHEMA!r} (write one with Ehrlich.to_json or `llome-jax ehrlich "
                "describe --json`)"
            )
        config = EhrlichConfig(**data["config"])
        config.validate()
        v, c, k = config.num_states, config.num_motifs, config.motif_length
        matrix = np.asarray(data["transition_matrix"], np.float32)
        stationary = np.asarray(data["stationary_dist"], np.float32)
        motifs = np.asarray(data["motifs"], np.int32)
        offsets = np.asarray(data["offsets"], np.int32)
        expected = {"transition_matrix": (v, v), "stationary_dist": (v,), "motifs": (c, k)}
        for name, array in zip(expected, (matrix, stationary, motifs), strict=True):
            if array.shape != expected[name]:
                raise ValueError(f"{name} has shape {array.shape}, expected {expected[name]}")
        if offsets.shape != (c, k) or np.any(offsets[:, 0] != 0) or offsets.max() >= config.dim:
            raise ValueError(f"offsets must be [c, k] = {(c, k)}, start at 0 and fit in L")
        if motifs.min() < 0 or motifs.max() >= v:
            raise ValueError(f"motif states must lie in [0, {v})")
        return _build(config, matrix, stationary, motifs, offsets)

    def __repr__(self) -> str:
        try:
            motifs = np.asarray(self.motifs).tolist()
            spacings = np.asarray(self.spacings).tolist()
        except Exception:  # traced inside a transformation
            return f"Ehrlich({self.config.name}, <traced>)"
        return f"Ehrlich({self.config.name}, motifs={motifs}, spacings={spacings})"


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------
def make(key: jax.Array, config: EhrlichConfig) -> Ehrlich:
    """Sample an instance by the paper's procedure (App. A.3-A.4), as pytorch-holo does it.

    1. Transition matrix: banded mask (half-width ``int(0.4 v)``, wrapping), rows permuted,
       diagonal forced feasible, ``softmax(N(0,1) / 0.5)`` masked and renormalised; ergodicity
       checked (Perron-Frobenius).
    2. Motifs: one chain of length ``c k`` from the stationary distribution, chunked into ``c``.
    3. Spacings: per motif, ``w ~ U(0,1)^{k-1}`` normalised to sum 1 and
       ``gap_j = 1 + floor((L - c k) // c * w_j)`` (holo's formula); ``s = [0, cumsum(gap)]``.

    The instance is a deterministic function of ``key`` (not of holo's torch seed: the paper's own
    instances ship as data, see :func:`llome_jax.ehrlich.paper_function`).

    Raises:
      ValueError: for an impossible configuration (see :meth:`EhrlichConfig.validate`).
    """
    config.validate()
    v, c, k = config.num_states, config.num_motifs, config.motif_length
    key_matrix, key_motifs, key_spacings = jax.random.split(key, 3)
    matrix = sample_transition_matrix(key_matrix, v, config.bandwidth, softmax_temp=0.5)
    stationary = stationary_distribution(matrix)
    chain = np.asarray(sample_chain(key_motifs, matrix, stationary, c * k, 1))[0]
    motifs = chain.reshape(c, k)
    weights = np.asarray(jax.random.uniform(key_spacings, (c, k - 1), dtype=jnp.float32))
    weights = weights / weights.sum(axis=-1, keepdims=True) if k > 1 else weights
    gaps = 1 + np.floor(np.float32(config.slack // c) * weights).astype(np.int32)
    offsets = np.concatenate([np.zeros((c, 1), np.int32), np.cumsum(gaps, axis=-1)], axis=-1)
    return _build(config, matrix, stationary, motifs, offsets)


def from_holo(
    transition_matrix: Any,
    motifs: Any,
    spacings: Any,
    quantization: int | None = None,
    epistasis_factor: float = 0.0,
    *,
    dim: int | None = None,
    stationary_dist: Any = None,
) -> Ehrlich:
    """Import an explicit instance in pytorch-holo's representation.

    Args:
      transition_matrix: ``[v, v]`` row-stochastic matrix (numpy, torch or list).
      motifs: ``[c, k]`` (or a list of ``c`` length-``k`` tensors) of states.
      spacings: ``[c, k-1]``: holo's gaps between consecutive motif elements (each >= 1, no
        leading 0).
      quantization: ``q`` (``None`` means ``k``).
      epistasis_factor: ``a`` of the cubic response.
      dim: sequence length ``L``; default: the shortest length holding every motif end to end,
        ``sum_i (1 + sum(spacings_i))``.
      stationary_dist: optional ``[v]``; computed from the matrix if omitted.

    Raises:
      ValueError: for inconsistent shapes, states out of range or gaps < 1.
    """
    matrix = np.asarray(_to_numpy(transition_matrix), dtype=np.float32)
    motif_arr = np.asarray([_to_numpy(m) for m in motifs], dtype=np.int64)
    gap_arr = np.asarray([_to_numpy(s) for s in spacings], dtype=np.int64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"transition_matrix must be square [v, v], got shape {matrix.shape}.")
    if motif_arr.ndim != 2:
        raise ValueError(f"motifs must be [num_motifs, motif_length], got shape {motif_arr.shape}.")
    c, k = motif_arr.shape
    gap_arr = gap_arr.reshape(c, -1) if gap_arr.size else np.zeros((c, 0), np.int64)
    if gap_arr.shape != (c, k - 1):
        raise ValueError(
            f"spacings must be [num_motifs, motif_length - 1] = {(c, k - 1)} (holo's gaps, no "
            f"leading 0), got shape {gap_arr.shape}."
        )
    if np.any(gap_arr < 1):
        raise ValueError("every spacing gap must be >= 1.")
    v = matrix.shape[0]
    if motif_arr.min() < 0 or motif_arr.max() >= v:
        raise ValueError(f"motif states must lie in [0, {v}).")
    if np.any(matrix < 0) or not np.allclose(matrix.sum(-1), 1.0, atol=1e-4):
        raise ValueError("transition_matrix must be non-negative with rows summing to 1.")
    offsets = np.concatenate([np.zeros((c, 1), np.int64), np.cumsum(gap_arr, axis=-1)], axis=-1)
    if dim is None:
        dim = int(np.sum(offsets[:, -1] + 1))
    config = EhrlichConfig(
        num_states=v,
        dim=int(dim),
        num_motifs=c,
        motif_length=k,
        quantization=quantization,
        epistasis_factor=float(epistasis_factor),
    )
    if offsets[:, -1].max() >= config.dim:
        raise ValueError(f"a motif spans {offsets[:, -1].max() + 1} positions > dim={config.dim}.")
    stationary = (
        stationary_distribution(matrix)
        if stationary_dist is None
        else np.asarray(_to_numpy(stationary_dist), np.float32).reshape(-1)
    )
    return _build(config, matrix, stationary, motif_arr, offsets)


def _build(
    config: EhrlichConfig,
    matrix: np.ndarray,
    stationary: np.ndarray,
    motifs: np.ndarray,
    offsets: np.ndarray,
) -> Ehrlich:
    return Ehrlich(
        config=config,
        transition_matrix=jnp.asarray(matrix, jnp.float32),
        stationary_dist=jnp.asarray(stationary, jnp.float32),
        motifs=jnp.asarray(motifs, jnp.int32),
        offsets=jnp.asarray(offsets, jnp.int32),
    )


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)
