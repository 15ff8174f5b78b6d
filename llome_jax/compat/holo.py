"""pytorch-holo-shaped facades: drop-ins for holo's ``Ehrlich`` and ``RoughMtFuji``.

:class:`RoughMtFuji` (at the end of this module) wraps :mod:`llome_jax.rough_mt_fuji`; what
follows first is :class:`Ehrlich`, over :mod:`llome_jax.ehrlich`.

``Ehrlich(num_states, dim, num_motifs, motif_length, quantization=None, epistasis_factor=0.0,
noise_std=0.0, negate=False, random_seed=0)`` mirrors ``holo.test_functions.closed_form.Ehrlich``
(pytorch-holo 0.0.5, holo-bench a58d03e): holo users switch with one line,
``from llome_jax.compat.holo import Ehrlich``.

**Backends.** torch is optional. When it is importable (and ``backend`` is not ``"numpy"``) the
facade speaks torch as holo does: attributes and results are tensors with holo's dtypes and
shapes (``transition_matrix`` float32 ``[v, v]``, ``stationary_dist`` float32 ``[v, 1]``,
``initial_dist`` float32 ``[v]``, ``motifs`` a tuple of int64 ``[k]``, ``spacings`` a list of int64
``[k-1]``, ``bounds`` float64 ``[2, L]``, solutions int64, values float32). Without torch (or with
``backend="numpy"``) it keeps the NumPy interface it always had (int32 solutions, ``stationary_dist``
``[v]``, ``motifs`` a list); a torch tensor given as input still gets a torch tensor back.
Evaluation is the jitted JAX evaluator either way, so values are bit-identical across backends.

**Input.** Token ids ``[..., L]`` of any integer dtype, or floats holding exact integers (holo's
``forward`` casts to float and its optimizer keeps float particles); a non-integral, non-finite
or out-of-range entry raises ``ValueError`` (holo scores a non-integral one as a mismatch).

**What still differs from holo.** The instance for a given ``random_seed`` is sampled with JAX's
PRNG, so it is not holo's torch-seeded instance; wrap an exact one with :meth:`Ehrlich.from_instance`
(e.g. ``from_instance(llome_jax.ehrlich.from_holo(...))`` or ``paper_function(...)``).
``initial_solution``, ``random_solution`` and observation noise draw from JAX's generator, not
torch's. The facade is not a ``torch.nn.Module`` / BoTorch ``SyntheticTestFunction`` subclass.
Like holo, the object is stateful (its samplers advance an internal counter); the functional core
it wraps is not.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from types import ModuleType
from typing import Any, Literal, Self

import jax
import numpy as np

from llome_jax import ehrlich as _ehrlich
from llome_jax import rough_mt_fuji as _rmf

__all__ = ["Ehrlich", "HoloSeedWarning", "RoughMtFuji"]

Backend = Literal["torch", "numpy"]


class HoloSeedWarning(UserWarning):
    """The same ``random_seed`` gives another instance than pytorch-holo's."""


@functools.cache
def _find_torch() -> ModuleType | None:
    """The ``torch`` module if it can be imported, else ``None`` (looked up once per process)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _is_torch_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch: it was, if ``x`` is one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


class _HoloFacade:
    """What holo's test-function facades share: ``from_instance``, the common attributes
    (``fn``, ``dim``, noise, negation, BoTorch's parameter kinds, the draw key, the backend),
    the NumPy backend's device rule, and results placed on the right device."""

    fn: Any
    _torch: ModuleType | None
    _device: Any

    @classmethod
    def from_instance(
        cls,
        fn: Any,
        noise_std: float = 0.0,
        negate: bool = False,
        random_seed: int = 0,
        *,
        backend: Backend | None = None,
    ) -> Self:
        """Wrap an existing instance (an Ehrlich one: ``paper_function("f2")`` or
        ``from_holo(...)``; a Rough Mt. Fuji one: ``rough_mt_fuji.reference_function()``)."""
        self = cls.__new__(cls)
        self._init(fn, noise_std, negate, random_seed, _resolve_backend(backend))
        return self

    def _init(self, fn: Any, noise_std: float, negate: bool, random_seed: int, torch: Any) -> None:
        raise NotImplementedError

    def _init_common(
        self, fn: Any, noise_std: float, negate: bool, random_seed: int, torch: Any
    ) -> None:
        self.fn = fn
        self.dim = fn.config.dim
        self.noise_std = float(noise_std)
        self.negate = bool(negate)
        self._random_seed = int(random_seed)
        self.categorical_inds = list(range(self.dim))
        self.continuous_inds: list[int] = []  # BoTorch's parameter kinds: all categorical
        self.discrete_inds: list[int] = []
        self._key = jax.random.key(random_seed)
        self._calls = 0
        self._torch = torch
        self._device = None  # torch backend: where results go (None: the CPU)

    def _numpy_device(self, device: Any) -> None:
        """The NumPy backend lives on the CPU.

        Raises:
          ValueError: any other ``device``.
        """
        if device is not None and str(device) != "cpu":
            raise ValueError(
                f"the NumPy backend lives on the CPU, got device={device!r}: install torch "
                "(or pass backend='torch') for device placement."
            )

    def _place(self, device: Any) -> None:
        if device is not None:
            self._device = self._torch.device(device)

    def _next_key(self) -> jax.Array:
        self._calls += 1
        return jax.random.fold_in(self._key, self._calls)

    def _out(self, values: np.ndarray, like: Any) -> Any:
        """float32 results as a tensor on ``like``'s device (a tensor input, or the torch
        backend), else as NumPy."""
        if _is_torch_tensor(like):
            return sys.modules["torch"].from_numpy(np.array(values)).to(like.device)
        if self._torch is None:
            return values
        return self._tensor(values)

    def _tensor(self, array: np.ndarray) -> Any:
        tensor = self._torch.from_numpy(np.array(array))
        return tensor if self._device is None else tensor.to(self._device)


class Ehrlich(_HoloFacade):
    """holo-bench's ``Ehrlich`` test function, backed by the jitted JAX evaluator.

    Attributes (torch backend; NumPy backend in brackets where it differs):
      num_states, dim: ``v`` and ``L``.
      transition_matrix: float32 ``[v, v]``.
      stationary_dist: float32 ``[v, 1]`` [``[v]``].
      initial_dist: float32 ``[v]``, uniform.
      motifs: tuple of ``c`` int64 ``[k]`` [list of int32 ``[k]``].
      spacings: list of ``c`` int64 ``[k-1]`` gaps [int32].
      bounds: float64 ``[2, L]``: rows ``0`` and ``v - 1`` (BoTorch's box).
      categorical_inds: ``list(range(L))``; continuous_inds, discrete_inds: ``[]``.
      noise_std, negate, optimal_value, num_objectives: as holo/BoTorch.
      fn: the wrapped :class:`llome_jax.ehrlich.Ehrlich` instance (what is evaluated).
    """

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
        *,
        backend: Backend | None = None,
    ) -> None:
        """holo's constructor. ``backend``: ``"torch"``, ``"numpy"`` or ``None`` (torch when it
        is importable); the only argument holo does not have.

        Raises:
          ValueError: for an impossible configuration (as holo) or an unknown ``backend``.
        """
        warnings.warn(
            f"Ehrlich(random_seed={random_seed}) samples its instance with JAX's PRNG: it is not "
            "the instance pytorch-holo builds for the same seed (holo's RNG stream needs torch). "
            "For holo's instance use Ehrlich.from_instance(llome_jax.ehrlich.from_holo(...)) or "
            "paper_function(...) for the paper's.",
            HoloSeedWarning,
            stacklevel=2,
        )
        torch = _resolve_backend(backend)
        config = _ehrlich.EhrlichConfig(
            num_states=num_states,
            dim=dim,
            num_motifs=num_motifs,
            motif_length=motif_length,
            quantization=quantization,
            epistasis_factor=epistasis_factor,
        )
        self._init(
            _ehrlich.make(jax.random.key(random_seed), config),
            noise_std,
            negate,
            random_seed,
            torch,
        )

    def _init(
        self,
        fn: _ehrlich.Ehrlich,
        noise_std: float,
        negate: bool,
        random_seed: int,
        torch: ModuleType | None,
    ) -> None:
        cfg = fn.config
        self._init_common(fn, noise_std, negate, random_seed, torch)
        self.num_states = cfg.num_states
        self._motif_length = cfg.motif_length
        self._quantization = cfg.quantization
        self._epistasis_factor = float(cfg.epistasis_factor)

        v = self.num_states
        matrix = np.asarray(fn.transition_matrix)
        stationary = np.asarray(fn.stationary_dist)
        motifs = np.asarray(fn.motifs)
        spacings = np.asarray(fn.spacings)
        bounds = [(0.0, float(v - 1))] * self.dim
        if torch is None:  # the NumPy interface, unchanged
            self.transition_matrix = matrix
            self.stationary_dist = stationary
            self.initial_dist = np.full(v, 1.0 / v, np.float32)
            self.motifs: Any = list(motifs)
            self.spacings: Any = list(spacings)
            self.bounds: Any = np.asarray(bounds, np.float64).T
            return
        self.transition_matrix = torch.from_numpy(matrix.copy())
        self.stationary_dist = torch.from_numpy(stationary.reshape(v, 1).copy())
        self.initial_dist = torch.ones(v) / v  # holo's expression, bit for bit
        self.motifs = tuple(torch.from_numpy(m.astype(np.int64)) for m in motifs)
        self.spacings = [torch.from_numpy(s.astype(np.int64)) for s in spacings]
        # BoTorch's buffer: a transposed float64 [L, 2] table
        self.bounds = torch.tensor(bounds, dtype=torch.double).transpose(-1, -2)

    # ------------------------------------------------------------------ holo attributes
    @property
    def optimal_value(self) -> float:
        return -self._optimal_value if self.negate else self._optimal_value

    def to(self, device: Any = None, dtype: Any = None) -> Ehrlich:
        """holo's ``to``: the float tables (``transition_matrix``, ``initial_dist``,
        ``stationary_dist``) to ``device`` and ``dtype``, motifs and spacings (as lists, like
        holo) and ``bounds`` to ``device``; later results are placed on ``device``. Evaluation
        stays the JAX evaluator, so values are unchanged (float32). Returns ``self``.

        With the NumPy backend only ``device`` ``None``/``"cpu"`` is possible and ``dtype`` is a
        NumPy dtype.

        Raises:
          ValueError: a device other than the CPU with the NumPy backend.
        """
        if self._torch is None:
            self._numpy_device(device)
            if dtype is not None:
                for name in ("transition_matrix", "initial_dist", "stationary_dist"):
                    setattr(self, name, getattr(self, name).astype(dtype))
            return self
        for name in ("transition_matrix", "initial_dist", "stationary_dist"):
            setattr(self, name, getattr(self, name).to(device=device, dtype=dtype))
        self.motifs = [m.to(device=device) for m in self.motifs]
        self.spacings = [s.to(device=device) for s in self.spacings]
        self.bounds = self.bounds.to(device=device)
        self._place(device)
        return self

    # ------------------------------------------------------------------ evaluation
    def evaluate_true(self, X: Any) -> Any:
        """Noise-free values (``-inf`` where infeasible): float32 ``[...]`` for ``X`` ``[..., L]``
        (integer token ids, or floats holding exact integers)."""
        values = np.asarray(_ehrlich.evaluate(self.fn, _tokens(X, self.num_states)))
        return self._out(values, X)

    def forward(self, X: Any, noise: bool = True) -> Any:
        """holo's ``forward``: float32 ``[...]``, noisy if ``noise_std > 0``, negated if ``negate``."""
        values = np.asarray(_ehrlich.evaluate(self.fn, _tokens(X, self.num_states)))
        values = values.astype(np.float32)
        if noise and self.noise_std > 0:
            key = jax.random.fold_in(self._next_key(), 1)
            values = values + self.noise_std * np.asarray(jax.random.normal(key, values.shape))
        return self._out(-values if self.negate else values, X)

    __call__ = forward

    # ------------------------------------------------------------------ solutions
    def initial_solution(self, n: int = 1) -> Any:
        """``n`` chain samples, ``[L]`` for ``n == 1`` else ``[n, L]``; like holo, the same
        samples on every call (the seed is reset). int64 (torch) or int32 (NumPy)."""
        samples = np.asarray(_ehrlich.initial_solution(self._key, self.fn, n))
        return self._solution(samples[0] if n == 1 else samples)

    def random_solution(self, n: int = 1) -> Any:
        """``n`` uniform sequences, ``[L]`` for ``n == 1`` else ``[n, L]`` (a new draw each call)."""
        samples = np.asarray(_ehrlich.random_solution(self._next_key(), self.fn, n))
        return self._solution(samples[0] if n == 1 else samples)

    def optimal_solution(self) -> Any:
        """holo's constructive optimum ``[L]`` (value 1.0)."""
        return self._solution(np.asarray(_ehrlich.optimal_solution(self.fn)))

    # ------------------------------------------------------------------ conversions
    def _solution(self, tokens: np.ndarray) -> Any:
        if self._torch is None:
            return tokens
        return self._tensor(tokens.astype(np.int64))

    def __repr__(self) -> str:
        """holo's format."""
        motifs = ", ".join(f"motif_{i}: {m.tolist()}" for i, m in enumerate(self.motifs))
        spacings = ", ".join(f"spacing_{i}: {s.tolist()}" for i, s in enumerate(self.spacings))
        return (
            f"Ehrlich(num_states={self.num_states}, dim={self.dim}, "
            f"num_motifs={len(self.motifs)}, motifs=[{motifs}], spacings=[{spacings}], "
            f"quantization={self._quantization}, noise_std={self.noise_std}, "
            f"negate={self.negate}, random_seed={self._random_seed})"
        )


def _resolve_backend(backend: Backend | None) -> ModuleType | None:
    """The torch module for the torch backend, ``None`` for NumPy.

    Raises:
      ValueError: an unknown backend, or ``"torch"`` without torch.
    """
    if backend not in (None, "torch", "numpy"):
        raise ValueError(f"backend must be 'torch', 'numpy' or None, got {backend!r}.")
    if backend == "numpy":
        return None
    torch = _find_torch()
    if torch is None and backend == "torch":
        raise ValueError("backend='torch' needs torch: pip install torch (or the hf extra).")
    return torch


def _tokens(X: Any, num_states: int) -> Any:
    """``X`` as the evaluator's integer tokens ``[..., L]``.

    Integer arrays pass through unchanged (the evaluator validates shape and range); torch
    tensors become NumPy; float arrays must hold finite exact integers and become int64 (holo
    casts its input to float, and its optimizer keeps float particles).

    Raises:
      ValueError: float input with a non-integral or non-finite entry (the evaluator refuses
        tokens outside ``[0, v)``).
    """
    if _is_torch_tensor(X):
        torch = sys.modules["torch"]
        X = X.detach()
        if X.is_floating_point() and X.dtype not in (torch.float32, torch.float64):
            X = X.to(torch.float32)  # float16 / bfloat16: exact in float32, unknown to NumPy
        X = X.cpu().numpy()
    elif isinstance(X, list | tuple):
        X = np.asarray(X)
    dtype = getattr(X, "dtype", None)
    if dtype is None or not np.issubdtype(np.dtype(dtype), np.floating):
        return X
    if isinstance(X, jax.core.Tracer):
        raise ValueError(
            "the holo facade evaluates concrete inputs; inside a trace pass integer token ids "
            "to llome_jax.ehrlich.evaluate."
        )
    host = np.asarray(X)
    with np.errstate(invalid="ignore"):  # NaN / inf / huge values are caught just below
        tokens = host.astype(np.int64)
    inexact = tokens != host
    if inexact.any():
        bad = float(host[inexact].flat[0])
        if np.isfinite(bad) and bad == round(bad):  # an integer too large for int64
            raise ValueError(f"X holds token {bad!r} outside [0, {num_states}).")
        raise ValueError(
            f"X must hold integral token ids in [0, {num_states}): float input is accepted only "
            f"when every entry is an exact integer, got {bad!r}."
        )
    return tokens


# ---------------------------------------------------------------------------------------------
# Rough Mt. Fuji
# ---------------------------------------------------------------------------------------------
class RoughMtFuji(_HoloFacade):
    """holo's ``RoughMtFuji`` (pytorch-holo 0.0.5), backed by the jitted JAX evaluator.

    ``RoughMtFuji(dim=2, additive_term=0.25, random_term_std=1.0, noise_std=0.0, negate=False,
    random_seed=0)`` is holo's constructor. **The instance** is holo's, bit for bit, whenever it
    can be: the shipped one (``dim=256, additive_term=0.25, random_term_std=1.0,
    random_seed=0``, the authors' configuration) without torch; any other with torch installed,
    drawn as holo draws it (``torch.Generator().manual_seed(random_seed)``: ``randint(0, 2, (1,
    dim))`` then ``randn(1, dim) * random_term_std``; exact for the installed torch). Without
    torch another instance is sampled with JAX's PRNG (:func:`llome_jax.rough_mt_fuji.make`)
    and a :class:`HoloSeedWarning` says so.

    **Values** (``evaluate_true``, ``forward``) are holo's float32 bit for bit
    (:mod:`llome_jax.rough_mt_fuji.function`), ``-f`` with ``negate=True``; noise draws from
    torch's global generator (torch backend) or JAX's (NumPy backend). ``initial_solution`` and
    ``random_solution`` draw ``torch.randint(2, (n, dim))`` from torch's global generator as holo
    does (so ``torch.manual_seed(s)`` first gives holo's draws); the NumPy backend draws with
    JAX's PRNG. Backends and input rules are :class:`Ehrlich`'s.

    Attributes (torch backend; NumPy backend in brackets): ``num_states`` (2), ``dim``,
    ``centroids`` int64 ``[1, L]`` [int32], ``_random_term`` float32 ``[1, L]``, ``bounds``
    float64 ``[2, L]`` (rows 0 and 1), ``categorical_inds``, ``noise_std``, ``negate``,
    ``optimal_value``, ``num_objectives``; ``fn``: the wrapped
    :class:`llome_jax.rough_mt_fuji.RoughMtFuji`.
    """

    num_states = 2
    num_centroids = 1
    num_objectives = 1

    def __init__(
        self,
        dim: int = 2,
        additive_term: float = 0.25,
        random_term_std: float = 1.0,
        noise_std: float = 0.0,
        negate: bool = False,
        random_seed: int = 0,
        *,
        backend: Backend | None = None,
    ) -> None:
        """holo's constructor (``backend`` as :class:`Ehrlich`'s).

        Raises:
          ValueError: ``dim < 1``, a negative or non-finite term, or an unknown ``backend``.
        """
        torch = _resolve_backend(backend)
        config = _rmf.RMFConfig(dim, additive_term, random_term_std)
        self._init(
            _holo_rmf(config, int(random_seed), torch), noise_std, negate, random_seed, torch
        )

    def _init(
        self,
        fn: _rmf.RoughMtFuji,
        noise_std: float,
        negate: bool,
        random_seed: int,
        torch: ModuleType | None,
    ) -> None:
        self._init_common(fn, noise_std, negate, random_seed, torch)
        self._additive_term = fn.config.additive_term
        self._random_term_std = fn.config.random_term_std
        centroid = np.asarray(fn.centroid).reshape(1, -1)
        random_term = np.asarray(fn.random_term, np.float32).reshape(1, -1)
        bounds = np.asarray([(0.0, 1.0)] * self.dim, np.float64).T
        if torch is None:
            self.centroids: Any = centroid.astype(np.int32)
            self._random_term: Any = random_term
            self.bounds: Any = bounds
            return
        self.centroids = torch.from_numpy(centroid.astype(np.int64))
        self._random_term = torch.from_numpy(random_term.copy())
        self.bounds = torch.from_numpy(bounds.copy())

    @property
    def optimal_value(self) -> float:
        """holo's: ``f(optimal_solution())``, negated with ``negate``."""
        value = _rmf.optimal_value(self.fn)
        return -value if self.negate else value

    def to(self, device: Any = None, dtype: Any = None) -> RoughMtFuji:
        """holo's ``to``: ``centroids`` to ``device`` and ``dtype``, ``_random_term`` to
        ``device``; results are placed on ``device``. Values are unchanged (float32).

        Raises:
          ValueError: a device other than the CPU with the NumPy backend.
        """
        if self._torch is None:
            self._numpy_device(device)
            if dtype is not None:
                self.centroids = self.centroids.astype(dtype)
            return self
        self.centroids = self.centroids.to(device=device, dtype=dtype)
        self._random_term = self._random_term.to(device=device)
        self.bounds = self.bounds.to(device=device)
        self._place(device)
        return self

    def evaluate_true(self, X: Any) -> Any:
        """Noise-free values: float32 ``[...]`` for ``X`` ``[..., L]`` (0/1 integers, or floats
        holding them)."""
        values = np.asarray(_rmf.evaluate(self.fn, _tokens(X, self.num_states)))
        return self._out(values, X)

    def forward(self, X: Any, noise: bool = True) -> Any:
        """holo's ``forward``: float32 ``[...]``, noisy if ``noise_std > 0``, negated if
        ``negate``."""
        values = np.asarray(_rmf.evaluate(self.fn, _tokens(X, self.num_states)), np.float32)
        if noise and self.noise_std > 0:
            if self._torch is not None:
                draw = self._torch.randn(values.shape).numpy()
            else:
                draw = np.asarray(jax.random.normal(self._next_key(), values.shape))
            values = (values + np.float32(self.noise_std) * draw).astype(np.float32)
        return self._out(-values if self.negate else values, X)

    __call__ = forward

    def initial_solution(self, n: int = 1) -> Any:
        """holo's: :meth:`random_solution` (holo resets only its instance generator, which the
        draw does not use); ``[L]`` for ``n == 1`` else ``[n, L]``."""
        return self.random_solution(n)

    def random_solution(self, n: int = 1) -> Any:
        """``n`` uniform binary sequences, ``[L]`` for ``n == 1`` else ``[n, L]``: torch's global
        generator (torch backend, as holo) or JAX's PRNG (NumPy backend)."""
        if self._torch is not None:
            samples = self._torch.randint(self.num_states, (n, self.dim))
            samples = samples if self._device is None else samples.to(self._device)
            return samples.squeeze(0) if n == 1 else samples
        samples = np.asarray(_rmf.random_solution(self._next_key(), self.fn, n))
        return samples[0] if n == 1 else samples

    def optimal_solution(self) -> Any:
        """holo's optimum, shape ``[1, L]`` as holo's (int64 torch / int32 NumPy)."""
        solution = np.asarray(_rmf.optimal_solution(self.fn)).reshape(1, -1)
        if self._torch is None:
            return solution
        return self._tensor(solution.astype(np.int64))

    def __repr__(self) -> str:
        """holo's format."""
        return (
            f"RoughMtFuji(num_states={self.num_states}, dim={self.dim}, "
            f"additive_term={self._additive_term}, random_term={self._random_term}, "
            f"random_term_std={self._random_term_std}, centroids={self.centroids}, "
            f"noise_std={self.noise_std}, negate={self.negate}, "
            f"random_seed={self._random_seed})"
        )


def _holo_rmf(config: _rmf.RMFConfig, seed: int, torch: ModuleType | None) -> _rmf.RoughMtFuji:
    """holo's instance of ``config`` and ``seed``: the shipped data, else torch's draw (torch
    importable, whatever the backend), else JAX's sample with a :class:`HoloSeedWarning`."""
    record = _rmf.shipped_record(config.name)
    if record is not None and record["random_seed"] == seed:
        return _rmf.resolve_function(config.name)
    torch = torch or _find_torch()
    if torch is not None:
        generator = torch.Generator().manual_seed(seed)
        centroids = torch.randint(0, 2, (1, config.dim), generator=generator)
        random_term = torch.randn(1, config.dim, generator=generator) * config.random_term_std
        return _rmf.from_holo(centroids, random_term, config.additive_term, config.random_term_std)
    warnings.warn(
        f"RoughMtFuji(dim={config.dim}, random_seed={seed}) without torch samples its instance "
        "with JAX's PRNG: it is not the instance pytorch-holo builds for the same seed (only "
        f"{', '.join(_rmf.shipped_names())} with random_seed=0 is shipped). Install torch for "
        "holo's instance.",
        HoloSeedWarning,
        stacklevel=3,
    )
    return _rmf.make(jax.random.key(seed), config)
