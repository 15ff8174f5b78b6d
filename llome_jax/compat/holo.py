"""A pytorch-holo-shaped facade over :mod:`llome_jax.ehrlich` (numpy in, numpy out).

``Ehrlich(num_states, dim, num_motifs, motif_length, quantization=None, epistasis_factor=0.0,
noise_std=0.0, negate=False, random_seed=0)`` mirrors ``holo.test_functions.closed_form.Ehrlich``.
The instance for a given ``random_seed`` is sampled with JAX's PRNG, so it differs from holo's
torch-seeded instance; use :meth:`Ehrlich.from_instance` (or ``paper_function``) to wrap an exact
instance. Like holo, the object is stateful (its solution samplers advance an internal counter);
the functional core it wraps is not.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from llome_jax import ehrlich as _ehrlich

__all__ = ["Ehrlich", "HoloSeedWarning"]


class HoloSeedWarning(UserWarning):
    """The same ``random_seed`` gives another instance than pytorch-holo's."""


class Ehrlich:
    """holo-bench's ``Ehrlich`` test function, backed by the jitted JAX evaluator."""

    _optimal_value = 1.0
    num_objectives = 1

    def __init__(
        self,
        num_states: int = 5,
        dim: int = 7,
        num_motifs: int = 1,
        motif_length: int = 3,
        quantization: int | None = None,
        epistasis_factor: float = 0.0,
        noise_std: float = 0.0,
        negate: bool = False,
        random_seed: int = 0,
    ) -> None:
        warnings.warn(
            f"Ehrlich(random_seed={random_seed}) samples its instance with JAX's PRNG: it is not "
            "the instance pytorch-holo builds for the same seed (holo's RNG stream needs torch). "
            "For holo's instance use Ehrlich.from_instance(llome_jax.ehrlich.from_holo(...)) or "
            "paper_function(...) for the paper's.",
            HoloSeedWarning,
            stacklevel=2,
        )
        config = _ehrlich.EhrlichConfig(
            num_states=num_states,
            dim=dim,
            num_motifs=num_motifs,
            motif_length=motif_length,
            quantization=quantization,
            epistasis_factor=epistasis_factor,
        )
        self._init(
            _ehrlich.make(jax.random.key(random_seed), config), noise_std, negate, random_seed
        )

    @classmethod
    def from_instance(
        cls,
        fn: _ehrlich.Ehrlich,
        noise_std: float = 0.0,
        negate: bool = False,
        random_seed: int = 0,
    ) -> Ehrlich:
        """Wrap an existing instance (e.g. ``paper_function("f2")`` or ``from_holo(...)``)."""
        self = cls.__new__(cls)
        self._init(fn, noise_std, negate, random_seed)
        return self

    def _init(self, fn: _ehrlich.Ehrlich, noise_std: float, negate: bool, random_seed: int) -> None:
        self.fn = fn
        self.num_states = fn.config.num_states
        self.dim = fn.config.dim
        self.noise_std = float(noise_std)
        self.negate = bool(negate)
        self._random_seed = int(random_seed)
        self._key = jax.random.key(random_seed)
        self._calls = 0

    # ------------------------------------------------------------------ holo attributes
    @property
    def optimal_value(self) -> float:
        return -self._optimal_value if self.negate else self._optimal_value

    @property
    def transition_matrix(self) -> np.ndarray:
        return np.asarray(self.fn.transition_matrix)

    @property
    def initial_dist(self) -> np.ndarray:
        return np.full(self.num_states, 1.0 / self.num_states, np.float32)

    @property
    def stationary_dist(self) -> np.ndarray:
        return np.asarray(self.fn.stationary_dist)

    @property
    def motifs(self) -> list[np.ndarray]:
        return list(np.asarray(self.fn.motifs))

    @property
    def spacings(self) -> list[np.ndarray]:
        return list(np.asarray(self.fn.spacings))

    # ------------------------------------------------------------------ evaluation
    def evaluate_true(self, X: Any) -> np.ndarray:
        """Noise-free values (``-inf`` where infeasible), float32 ``[n]``."""
        return np.asarray(_ehrlich.evaluate(self.fn, _as_int_array(X)))

    def forward(self, X: Any, noise: bool = True) -> np.ndarray:
        """holo's ``forward``: noisy if ``noise_std > 0``, negated if ``negate``."""
        values = self.evaluate_true(X).astype(np.float32)
        if noise and self.noise_std > 0:
            key = jax.random.fold_in(self._next_key(), 1)
            values = values + self.noise_std * np.asarray(jax.random.normal(key, values.shape))
        return -values if self.negate else values

    __call__ = forward

    # ------------------------------------------------------------------ solutions
    def initial_solution(self, n: int = 1) -> np.ndarray:
        """Chain samples; like holo, the same sequence on every call (the seed is reset)."""
        samples = np.asarray(_ehrlich.initial_solution(self._key, self.fn, n))
        return samples[0] if n == 1 else samples

    def random_solution(self, n: int = 1) -> np.ndarray:
        samples = np.asarray(_ehrlich.random_solution(self._next_key(), self.fn, n))
        return samples[0] if n == 1 else samples

    def optimal_solution(self) -> np.ndarray:
        return np.asarray(_ehrlich.optimal_solution(self.fn))

    def _next_key(self) -> jax.Array:
        self._calls += 1
        return jax.random.fold_in(self._key, self._calls)

    def __repr__(self) -> str:
        return (
            f"Ehrlich(num_states={self.num_states}, dim={self.dim}, "
            f"num_motifs={self.fn.config.num_motifs}, motifs={[m.tolist() for m in self.motifs]}, "
            f"spacings={[s.tolist() for s in self.spacings]}, quantization={self.fn.config.q}, "
            f"noise_std={self.noise_std}, negate={self.negate}, random_seed={self._random_seed})"
        )


def _as_int_array(X: Any) -> np.ndarray:
    if hasattr(X, "detach"):
        X = X.detach().cpu().numpy()
    return np.asarray(X)
