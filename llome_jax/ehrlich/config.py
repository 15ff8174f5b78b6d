"""Static configuration of an Ehrlich function (shapes and quantisation).

The names follow pytorch-holo's ``Ehrlich`` constructor (``num_states``, ``dim``, ``num_motifs``,
``motif_length``, ``quantization``, ``epistasis_factor``); ``name`` gives the paper's notation
``Ehr(|V|,L)-c-k-q`` (Chen, Stanton et al., ICML 2025, Sec. 4.2).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

__all__ = ["EhrlichConfig", "InvalidEhrlichNameError"]

_NAME_RE = re.compile(
    r"^\s*Ehr\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*-\s*(\d+)\s*-\s*(\d+)\s*-\s*(\d+)\s*"
    r"(?:-\s*a\s*([0-9.eE+-]+))?\s*$"
)


class InvalidEhrlichNameError(ValueError):
    """A well-formed ``"Ehr(v,L)-c-k-q"`` name whose parameters admit no instance (e.g. motifs
    longer than the sequence); the message names the parameter to change."""


@dataclasses.dataclass(frozen=True)
class EhrlichConfig:
    """Shape-fixing parameters of an Ehrlich function (hashable, usable as a static jit argument).

    Attributes:
      num_states: vocabulary size ``v`` (states ``0 .. v-1``).
      dim: sequence length ``L``.
      num_motifs: number of spaced motifs ``c``.
      motif_length: motif length ``k``.
      quantization: number of quantisation levels ``q`` in ``[1, k]``; ``None`` means ``k``.
      epistasis_factor: ``a`` in holo's cubic response ``r(h) = (a h (h - 1) + 1) h``; 0 gives ``r(h)=h``.
    """

    num_states: int
    dim: int
    num_motifs: int
    motif_length: int
    quantization: int | None = None
    epistasis_factor: float = 0.0

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ derived quantities
    @property
    def q(self) -> int:
        """The effective quantisation (``quantization`` or, when ``None``, ``motif_length``)."""
        return self.motif_length if self.quantization is None else self.quantization

    @property
    def quant_divisor(self) -> int:
        """holo's ``qf1 = ceil(k / q)``: a window's match count is floor-divided by this."""
        return math.ceil(self.motif_length / self.q)

    @property
    def quant_scale(self) -> float:
        """holo's ``qf2 = k / qf1``: the floor-divided count is divided by this (float32)."""
        return self.motif_length / self.quant_divisor

    @property
    def num_levels(self) -> int:
        """Largest integer level ``k // qf1``; a complete motif has level ``num_levels``."""
        return self.motif_length // self.quant_divisor

    @property
    def bandwidth(self) -> int:
        """Half-width of the banded feasibility mask, ``int(0.4 v)`` as in the reference."""
        return int(self.num_states * 0.4)

    @property
    def slack(self) -> int:
        """Positions not fixed by the motifs: ``L - c k``."""
        return self.dim - self.num_motifs * self.motif_length

    @property
    def name(self) -> str:
        """The paper's name, e.g. ``"Ehr(32,32)-4-4-4"`` (``-a<factor>`` appended if epistatic)."""
        base = f"Ehr({self.num_states},{self.dim})-{self.num_motifs}-{self.motif_length}-{self.q}"
        if self.epistasis_factor:
            base += f"-a{self.epistasis_factor:g}"
        return base

    @classmethod
    def from_name(cls, name: str) -> EhrlichConfig:
        """Parse ``"Ehr(v,L)-c-k-q"`` (spaces allowed, optional ``-a<epistasis>`` suffix).

        Raises:
          ValueError: the text is not such a name; :class:`InvalidEhrlichNameError` (a
            ``ValueError``) when it is one but no instance can have these parameters (the
            reason is named).
        """
        match = _NAME_RE.match(name)
        if match is None:
            raise ValueError(
                f"cannot parse Ehrlich name {name!r}: expected 'Ehr(v,L)-c-k-q', "
                "for example 'Ehr(32,32)-4-4-4' (optionally '-a2' for epistasis factor 2)."
            )
        v, length, c, k, q, a = match.groups()
        try:
            return cls(
                num_states=int(v),
                dim=int(length),
                num_motifs=int(c),
                motif_length=int(k),
                quantization=int(q),
                epistasis_factor=float(a) if a is not None else 0.0,
            )
        except ValueError as error:  # a well-formed name of a function that cannot exist
            raise InvalidEhrlichNameError(
                f"{name.strip()!r} is not a valid Ehrlich function: {error}"
            ) from None

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ``ValueError`` naming what to change if no valid instance can exist."""
        for field in ("num_states", "dim", "num_motifs", "motif_length"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{field} must be an int, got {value!r} ({type(value).__name__}).")
        if self.quantization is not None and (
            isinstance(self.quantization, bool) or not isinstance(self.quantization, int)
        ):
            raise ValueError(f"quantization must be an int or None, got {self.quantization!r}.")
        v, length, c, k = self.num_states, self.dim, self.num_motifs, self.motif_length
        if v < 2:
            raise ValueError(f"num_states={v}: an Ehrlich function needs at least 2 states.")
        if v > 32767:
            raise ValueError(f"num_states={v}: at most 32767 states are supported.")
        if c < 1:
            raise ValueError(f"num_motifs={c}: need at least one motif.")
        if k < 1:
            raise ValueError(f"motif_length={k}: motifs need at least one element.")
        if length < c * k:
            raise ValueError(
                f"dim={length} < num_motifs * motif_length = {c * k}: the motifs cannot all fit; "
                f"increase dim to at least {c * k} or use fewer/shorter motifs."
            )
        if not 1 <= self.q <= k:
            raise ValueError(
                f"quantization={self.quantization} must lie in [1, motif_length={k}] "
                "(None means motif_length)."
            )
        if not math.isfinite(self.epistasis_factor):
            raise ValueError(f"epistasis_factor must be finite, got {self.epistasis_factor}.")


#: Instance seeds are integers in ``[0, MAX_INSTANCE_SEED]``: ``jax.random.key`` keeps only a
#: seed's low 32 bits (``s`` and ``s + 2**32`` draw the same instance, ``-1`` is ``2**32 - 1``),
#: and pretraining folds seeds into keys as 32-bit integers; below ``2**31`` every seed names its
#: own instance.
MAX_INSTANCE_SEED = 2**31 - 1


def check_instance_seed(instance_seed: Any) -> int:
    """``instance_seed`` as an int, checked: an integer in ``[0, 2**31)`` (:data:`MAX_INSTANCE_SEED`).

    Raises:
      ValueError: one line naming the seed (and, past ``2**32``, the instance it would alias).
    """
    if isinstance(instance_seed, bool) or not isinstance(instance_seed, int | np.integer):
        raise ValueError(f"instance seed must be an integer; got {instance_seed!r}")
    seed = int(instance_seed)
    if not 0 <= seed <= MAX_INSTANCE_SEED:
        alias = seed % 2**32
        aliased = (
            f" (JAX keeps its low 32 bits: it would draw instance {alias:,})"
            if seed >= 2**32
            else ""
        )
        raise ValueError(
            f"instance seed {seed:,} is outside [0, 2**31){aliased}; use a seed from 0 to "
            f"{MAX_INSTANCE_SEED:,}"
        )
    return seed


#: A Rough Mt. Fuji function name (``rmf``, ``RMF(...)``): the resolvers of every function spec
#: (Ehrlich's, Rough Mt. Fuji's, the objective's) ask here, so that ``llome_jax.ehrlich`` need
#: not import ``llome_jax.rough_mt_fuji`` to tell the two apart.
_RMF_SPEC_RE = re.compile(r"^\s*(rmf|RMF\s*\(.*\))\s*$", re.IGNORECASE)


def is_rmf_name(spec: Any) -> bool:
    """Whether ``spec`` is meant as a Rough Mt. Fuji function (``rmf``, ``RMF(...)``), valid
    or not (a malformed one then gets RMF's own error from
    :func:`llome_jax.rough_mt_fuji.resolve_function`). Re-exported as
    ``llome_jax.rough_mt_fuji.is_rmf_name``."""
    return isinstance(spec, str) and _RMF_SPEC_RE.match(spec) is not None
