"""What an optimizer maximises: :class:`Objective`, an Ehrlich function or your own black box.

The GA, LLOME and LaMBO-2 need to know four things about a problem, and an :class:`Objective`
holds exactly those::

    f : {0, ..., v-1}^L -> R u {-inf}        evaluate(x: int32[n, L]) -> float32[n]
    feasible : {0, ..., v-1}^L -> {0, 1}     is_feasible(x: int32[n, L]) -> bool[n]   (optional)
    x0 in {0, ..., v-1}^L                    initial_solution: int32[L]                 (optional)
    f* = max_x f(x)                          optimal_value                              (optional)

Higher is better; ``-inf`` marks an infeasible sequence (as Ehrlich functions do). ``evaluate``
may be a jitted JAX function (the GA then keeps its generations inside one ``lax.scan``) or plain
NumPy / Python code (the GA then runs its generations on the host, one ``evaluate`` call per
generation). An Ehrlich instance becomes an objective with :meth:`Objective.from_ehrlich`; the
optimizers then use the Ehrlich kernels directly, so their results are the same as before
objectives existed, bit for bit.

**Checked calls.** ``objective(x)`` (:meth:`Objective.__call__`) is how the optimizers label
sequences: it checks the input (``int [n, L]`` with states in ``[0, v)``) and the output (shape
``[n]``, a floating dtype, no NaN, no ``+inf``) and raises one ``ValueError`` naming the
objective otherwise. :meth:`Objective.validate` makes one such call on the start sequence; every
optimizer runs it when it is constructed, before a run directory is written or jitted optimizer
code runs. An exception raised by ``evaluate`` itself passes through unchanged (with a note
naming the objective), so a run stops with the objective's own error.

**Regret.** With ``optimal_value = f*`` known, the records report the simple regret
``f* - f(x)``; an infeasible sequence counts as ``worst_value`` (the lowest value a feasible
sequence can have; Ehrlich: 0, so regret 1) or, when ``worst_value`` is ``None``, is left out of
the regret statistics. Without ``optimal_value`` the regret fields are null and ``best_value``
(``max f`` so far) is the progress measure (:func:`llome_jax.metrics.round_metrics`).

**The information contract** (``llome_jax.oracle``). Every optimizer learns values only through
labels it pays for, and every label is counted: the run's :class:`~llome_jax.oracle.Oracle` calls
``evaluate`` once per distinct sequence (a known value is looked up, not paid; ``accounting=
"every_evaluation"`` is the paper's count), and a call of ``is_feasible`` on a sequence that is not
labelled is a *constraint query*, counted in ``rounds.jsonl`` (``num_constraint_queries``). By
default the optimizers ask none beyond the authors' own (LLOME's checkpoint gate);
``constraint_queries="free"`` gives the check to LLOME's refinement and Filter and to LaMBO-2's
screening of proposals. Without ``is_feasible`` every sequence counts as feasible. The start
sequence is public: its value is not counted.

From the command line, ``--objective module:attr`` names an :class:`Objective` or a function of no
arguments that returns one (:func:`load_objective`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from llome_jax import ehrlich
from llome_jax import rough_mt_fuji as rmf
from llome_jax.ehrlich.instances import function_digest, instance_digest
from llome_jax.rough_mt_fuji.instances import is_rmf_name

__all__ = [
    "Objective",
    "as_objective",
    "ehrlich_objective",
    "feasible",
    "import_module_or_file",
    "load_objective",
    "objective_config",
    "problem_shape",
    "rmf_objective",
]


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


@dataclasses.dataclass(frozen=True, eq=False)
class Objective:
    """A black-box objective over sequences of ``length`` states in ``[0, num_states)``.

    Attributes:
      name: shown in messages, plots and ``config.json``.
      num_states: ``v``, the alphabet size (states are ``0 .. v-1``).
      length: ``L``, the sequence length.
      evaluate: ``f``: int32 ``[n, L]`` -> float ``[n]`` (higher is better, ``-inf`` infeasible);
        a jitted JAX function or plain NumPy / Python code.
      is_feasible: optional constraint check int32 ``[n, L]`` -> bool ``[n]``; asked about an
        unlabelled sequence it is a counted constraint query (module docstring). ``None``: every
        sequence counts as feasible.
      initial_solution: optional int ``[L]`` start sequence of the GA (round 0 of every
        optimizer). ``None``: :attr:`x0` draws one (Ehrlich: a feasible chain sample; otherwise
        uniform states from ``numpy.random.default_rng(0)``).
      optimal_value: ``f* = max f`` when known (Ehrlich: 1.0): regret ``f* - f`` is reported and
        a run stops once it labels ``f*``. ``None``: the best value is reported instead.
      worst_value: the lowest value a feasible sequence can have, when known (Ehrlich: 0.0); an
        infeasible sequence then has regret ``f* - worst_value``. ``None``: infeasible sequences
        are left out of ``min_regret`` / ``mean_regret``.
      traceable: whether ``evaluate`` can be traced by JAX (then the GA runs it inside its jitted
        ``lax.scan``). ``None``: true exactly when ``evaluate`` is a ``jax.jit``-wrapped function.
        Declare ``True`` only for pure functions: a traced function runs once per compilation, so
        Python side effects (counters, logging) would not happen per call.
      ehrlich: the Ehrlich instance behind the objective (set by :meth:`from_ehrlich`); the
        optimizers then use its kernels directly (identical results, no host round trips).
      source: ``"module:attr"`` when loaded by :func:`load_objective` (recorded in
        ``config.json``).

    The object is hashable by identity and is a JAX pytree without leaves, so a traceable
    objective can be passed to jitted functions (one compilation per objective object).
    """

    name: str
    num_states: int
    length: int
    evaluate: Callable[[Any], Any]
    is_feasible: Callable[[Any], Any] | None = None
    initial_solution: Any = None
    optimal_value: float | None = None
    worst_value: float | None = None
    traceable: bool | None = None
    ehrlich: Any = dataclasses.field(default=None, repr=False)
    source: str | None = None

    def __post_init__(self) -> None:
        def fail(message: str) -> None:
            raise ValueError(f"Objective {self.name!r}: {message}")

        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Objective name must be a non-empty string; got {self.name!r}.")
        for field, low in (("num_states", 2), ("length", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                fail(f"{field} must be an int >= {low}; got {value!r}.")
            object.__setattr__(self, field, int(value))
        if not callable(self.evaluate):
            fail(f"evaluate must be callable; got {type(self.evaluate).__name__}.")
        if self.is_feasible is not None and not callable(self.is_feasible):
            fail(f"is_feasible must be callable or None; got {type(self.is_feasible).__name__}.")
        for field in ("optimal_value", "worst_value"):
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                fail(f"{field} must be a finite number or None; got {value!r}.")
            if not math.isfinite(float(value)):
                fail(f"{field} must be finite; got {value!r}.")
            object.__setattr__(self, field, float(value))
        if (
            self.optimal_value is not None
            and self.worst_value is not None
            and self.worst_value > self.optimal_value
        ):
            fail(f"worst_value={self.worst_value} exceeds optimal_value={self.optimal_value}.")
        if self.initial_solution is not None:
            x0 = _to_numpy(self.initial_solution)
            if x0.ndim == 2 and x0.shape[0] == 1:
                x0 = x0[0]
            if x0.ndim != 1:
                fail(f"initial_solution must be one sequence [L]; got shape {x0.shape}.")
            x0 = self.check_sequences(x0[None], what="initial_solution")[0]
            x0.setflags(write=False)
            object.__setattr__(self, "initial_solution", x0)
        if self.traceable is None:
            traceable = self.ehrlich is not None or isinstance(self.evaluate, jax.stages.Wrapped)
            object.__setattr__(self, "traceable", traceable)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_ehrlich(
        cls, fn: Any, initial_solution: Any = None, *, name: str | None = None
    ) -> Objective:
        """The objective of an Ehrlich instance: ``ehrlich.evaluate`` / ``ehrlich.is_feasible``,
        ``f* = 1`` (``ehrlich.optimal_solution`` scores 1.0), worst feasible value 0.

        Args:
          fn: an :class:`llome_jax.ehrlich.Ehrlich` instance.
          initial_solution: the GA's start sequence ``[L]``; ``None``: a chain sample of the
            stationary law (key ``fold_in(key(0), 0x1A1)``, as for instance files).
          name: defaults to the paper name of the configuration, e.g. ``"Ehr(32,32)-4-4-4"``.
        """
        if not isinstance(fn, ehrlich.Ehrlich):
            raise ValueError(f"from_ehrlich needs an ehrlich.Ehrlich; got {type(fn).__name__}.")
        return cls(
            name=name or fn.config.name,
            num_states=fn.config.num_states,
            length=fn.config.dim,
            evaluate=functools.partial(ehrlich.evaluate, fn),
            is_feasible=functools.partial(ehrlich.is_feasible, fn),
            initial_solution=initial_solution,
            optimal_value=float(fn.optimal_value),
            worst_value=0.0,
            traceable=True,
            ehrlich=fn,
        )

    # ------------------------------------------------------------------ properties
    @functools.cached_property
    def x0(self) -> np.ndarray:
        """The start sequence: ``initial_solution`` or the default draw (class docstring).
        int32 ``[L]``."""
        if self.initial_solution is not None:
            return self.initial_solution
        if self.ehrlich is not None:
            key = jax.random.fold_in(jax.random.key(0), 0x1A1)
            x0 = np.asarray(ehrlich.initial_solution(key, self.ehrlich, 1)[0], np.int32)
        else:
            rng = np.random.default_rng(0)
            x0 = rng.integers(0, self.num_states, self.length).astype(np.int32)
        x0.setflags(write=False)
        return x0

    @property
    def is_ehrlich(self) -> bool:
        """Whether the objective is an Ehrlich instance (:meth:`from_ehrlich`)."""
        return self.ehrlich is not None

    @property
    def runs_on_host(self) -> bool:
        """Whether the GA must call ``evaluate`` from a Python loop (not traceable)."""
        return not self.traceable

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (``config.json``'s ``objective_info``)."""
        return {
            "name": self.name,
            "num_states": self.num_states,
            "length": self.length,
            "optimal_value": self.optimal_value,
            "worst_value": self.worst_value,
        }

    # ------------------------------------------------------------------ checked calls
    def check_sequences(self, x: Any, *, what: str = "x") -> np.ndarray:
        """``x`` as int32 ``[n, L]`` NumPy, checked: an integer array of states in ``[0, v)``.

        Raises:
          ValueError: naming the objective and the problem.
        """
        array = _to_numpy(x)
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(
                f"Objective {self.name!r}: {what} must hold integer states in "
                f"[0, {self.num_states}); got dtype {array.dtype}."
            )
        if array.ndim != 2 or array.shape[1] != self.length:
            raise ValueError(
                f"Objective {self.name!r}: {what} must have shape [n, {self.length}]; got "
                f"{array.shape}."
            )
        if array.size and (array.min() < 0 or array.max() >= self.num_states):
            raise ValueError(
                f"Objective {self.name!r}: {what} has states outside [0, {self.num_states}) "
                f"(min {array.min()}, max {array.max()})."
            )
        return array.astype(np.int32, copy=False)

    def check_values(self, values: Any, n: int) -> np.ndarray:
        """``evaluate``'s output as float32 ``[n]``, checked: shape ``[n]``, a floating dtype, no
        NaN, no ``+inf`` (``-inf`` marks an infeasible sequence).

        Raises:
          ValueError: naming the objective and what is wrong.
        """
        out = _to_numpy(values)
        if out.shape != (n,):
            raise ValueError(
                f"Objective {self.name!r}: evaluate returned shape {out.shape} for {n} sequences; "
                f"expected [{n}] (one value per sequence)."
            )
        if not np.issubdtype(out.dtype, np.floating):
            raise ValueError(
                f"Objective {self.name!r}: evaluate returned dtype {out.dtype}; expected floats "
                "(e.g. float32), -inf for an infeasible sequence."
            )
        bad = np.flatnonzero(np.isnan(out) | np.isposinf(out))
        if bad.size:
            kind = "NaN" if np.isnan(out[bad[0]]) else "+inf"
            raise ValueError(
                f"Objective {self.name!r}: evaluate returned {kind} for {bad.size} of {n} "
                f"sequences (first: row {bad[0]}); values must be finite, or -inf for an "
                "infeasible sequence."
            )
        return out.astype(np.float32, copy=False)

    def __call__(self, x: Any) -> np.ndarray:
        """``f(x)`` checked (module docstring): int ``[n, L]`` -> float32 ``[n]`` (NumPy).

        Raises:
          ValueError: bad input or bad output (naming the objective). An exception raised by
            ``evaluate`` passes through with a note naming the objective.
        """
        x = self.check_sequences(x)
        try:
            out = self.evaluate(x)
        except Exception as error:
            error.add_note(f"raised by the evaluate function of objective {self.name!r}")
            raise
        return self.check_values(out, x.shape[0])

    def feasible(self, x: Any) -> np.ndarray:
        """The constraint check: ``is_feasible(x)`` as bool ``[n]``, or all true without one."""
        x = self.check_sequences(x)
        if self.is_feasible is None:
            return np.ones(x.shape[0], bool)
        out = _to_numpy(self.is_feasible(x))
        if out.shape != (x.shape[0],):
            raise ValueError(
                f"Objective {self.name!r}: is_feasible returned shape {out.shape} for "
                f"{x.shape[0]} sequences; expected [{x.shape[0]}]."
            )
        return out.astype(bool)

    def validate(self) -> float:
        """One checked call on the start sequence (and a trace of ``evaluate`` when it is
        traceable, and a call of ``is_feasible``); returns ``f(x0)``.

        Raises:
          ValueError: the objective's output is malformed (naming the objective and the fix).
        """
        x = self.x0[None]
        if self.traceable and not self.is_ehrlich:
            try:
                shape = jax.eval_shape(
                    self.evaluate, jax.ShapeDtypeStruct((2, self.length), "int32")
                )
            except Exception as error:
                raise ValueError(
                    f"Objective {self.name!r}: evaluate is declared traceable but JAX cannot "
                    f"trace it ({type(error).__name__}: {error}); pass traceable=False to run it "
                    "on the host."
                ) from None
            shape = getattr(shape, "shape", None), getattr(shape, "dtype", None)
            if shape[0] != (2,) or shape[1] is None or not np.issubdtype(shape[1], np.floating):
                raise ValueError(
                    f"Objective {self.name!r}: traced evaluate returns shape {shape[0]} dtype "
                    f"{shape[1]} for 2 sequences; expected float [2]."
                )
        value = float(self(x)[0])
        self.feasible(x)
        return value


# JAX pytree without leaves: the object itself is the (identity-hashed) static part, so jitted
# functions take a traceable objective as an argument and compile once per objective object.
jax.tree_util.register_pytree_node(Objective, lambda o: ((), o), lambda o, _: o)


# ---------------------------------------------------------------------------------------------
# Helpers shared by the optimizers (Ehrlich instances and objectives alike)
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def rmf_objective(spec: str, instance_seed: int | None = None) -> Objective:
    """The :class:`~llome_jax.objective.Objective` of a spec: ``evaluate`` (traceable, so the GA
    keeps its generations in one ``lax.scan``), no constraint, the start sequence of
    :func:`llome_jax.rough_mt_fuji.resolve_initial_solution`, ``optimal_value = f*``,
    ``worst_value = min f``. One object per spec and seed (jitted optimizer code compiles once
    per objective object)."""
    fn = rmf.resolve_function(spec, instance_seed)
    return Objective(
        name=fn.config.name,
        num_states=2,
        length=fn.config.dim,
        evaluate=functools.partial(rmf.evaluate, fn),
        initial_solution=rmf.resolve_initial_solution(spec, instance_seed),
        optimal_value=rmf.optimal_value(fn),
        worst_value=rmf.worst_value(fn),
        traceable=True,
    )


def ehrlich_objective(function: str, instance_seed: int | None = None) -> Objective:
    """The objective of a CLI function spec (``cfg.function``): ``ehrlich.resolve_function``
    with its start sequence ``ehrlich.resolve_initial_solution``, named ``function``; a Rough
    Mt. Fuji name gives :func:`rmf_objective`."""
    if is_rmf_name(function):
        return rmf_objective(function, instance_seed)

    fn = ehrlich.resolve_function(function, instance_seed)
    x0 = ehrlich.resolve_initial_solution(function, instance_seed)
    return Objective.from_ehrlich(fn, x0, name=fn.config.name)


def objective_config(config: dict[str, Any], objective: Objective | None) -> dict[str, Any]:
    """``config.json``'s configuration of a run, pinned to the function it optimises.

    Without a custom objective: ``config`` plus ``"function_digest"``
    (``ehrlich.instances.function_digest`` of ``config["function"]`` / ``"instance_seed"``: the
    instance's arrays and start sequence), so a resume on another instance behind the same name
    (an instance file replaced) is refused. With one, ``function`` / ``instance_seed`` (which it
    replaces) give way to ``"objective"`` (its ``source`` ``"module:attr"``, else its name),
    ``"objective_info"`` (:meth:`Objective.describe`) and, where something identifies its code or
    data, ``"objective_digest"`` (:func:`_objective_digest`), so a resume on another objective, or
    on an edited module, is refused.
    """
    if objective is None:
        if config.get("function") is None:
            return config
        digest = function_digest(config["function"], config.get("instance_seed"))
        return {**config, "function_digest": digest}
    rest = {k: v for k, v in config.items() if k not in ("function", "instance_seed")}
    pinned = {
        **rest,
        "objective": objective.source or objective.name,
        "objective_info": objective.describe(),
    }
    digest = _objective_digest(objective)
    return pinned if digest is None else {**pinned, "objective_digest": digest}


def _objective_digest(objective: Objective) -> str | None:
    """``"sha256:<hex>"`` identifying a custom objective beyond its name: the Ehrlich instance
    and start sequence of :meth:`Objective.from_ehrlich`, else the file of the module its
    ``source`` (``"module:attr"``) names (a ``path/to/file.py`` or an importable module's file).
    ``None`` when neither exists (an objective built in Python, a module without a file)."""
    import hashlib

    if objective.is_ehrlich:
        return instance_digest(objective.ehrlich, objective.x0)
    if not objective.source or ":" not in objective.source:
        return None
    module_name = objective.source.rsplit(":", 1)[0]
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        path = pathlib.Path(module_name)
    else:
        module = sys.modules.get(module_name)
        origin = getattr(module, "__file__", None)
        if origin is None:
            try:
                spec = importlib.util.find_spec(module_name)
            except (ImportError, ValueError):
                spec = None
            origin = None if spec is None else spec.origin
        if origin is None:
            return None
        path = pathlib.Path(origin)
    if not path.is_file():
        return None
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def as_objective(fn: Any) -> Objective:
    """``fn`` itself if it is an :class:`Objective`; an Ehrlich instance as one
    (:meth:`from_ehrlich`)."""
    if isinstance(fn, Objective):
        return fn
    return Objective.from_ehrlich(fn)


def problem_shape(fn: Any) -> tuple[int, int, str]:
    """``(num_states, length, name)`` of an Ehrlich instance or an :class:`Objective`."""
    if isinstance(fn, Objective):
        return fn.num_states, fn.length, fn.name
    return fn.config.num_states, fn.config.dim, fn.config.name


def feasible(fn: Any, x: Any) -> np.ndarray:
    """The constraint check of an Ehrlich instance (``ehrlich.is_feasible``) or an
    :class:`Objective` (``is_feasible``, all true without one): bool ``[n]`` NumPy."""
    if isinstance(fn, Objective):
        return fn.feasible(x)
    return np.asarray(ehrlich.is_feasible(fn, x)).astype(bool)


# ---------------------------------------------------------------------------------------------
# module:attr
# ---------------------------------------------------------------------------------------------
def import_module_or_file(module_name: str) -> Any:
    """The module ``module_name``, or the Python file it names (``path/to/file.py``), loaded once
    under a private name; a module in the working directory imports as under ``python -m``
    (``load_objective`` and ``llome_jax.optimizers.get`` read ``MODULE:ATTR`` through this).

    Raises:
      FileNotFoundError / ImportError: no such file, or it cannot be loaded or imported.
    """
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        path = pathlib.Path(module_name)
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        spec = importlib.util.spec_from_file_location(f"_llome_objective_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if "" in sys.path or str(pathlib.Path.cwd()) in sys.path:
        return importlib.import_module(module_name)
    sys.path.insert(0, "")  # as `python -m` does: modules in the working directory import
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove("")


def load_objective(spec: str) -> Objective:
    """The :class:`Objective` named by ``"module:attr"`` (``attr`` may be dotted; ``module`` may
    also be a ``path/to/file.py``): the attribute itself, or the result of calling it with no
    arguments. Its ``source`` is set to ``spec``.

    Raises:
      ValueError: the spec is malformed, the module does not import (the import error is
        quoted), the attribute is missing, or it does not give an :class:`Objective`.
    """
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rsplit(":", 1)):
        raise ValueError(f"--objective {spec!r}: expected MODULE:ATTR, e.g. my_objectives:onemax")
    module_name, attr = spec.rsplit(":", 1)
    try:
        target = import_module_or_file(module_name)
    except Exception as error:
        raise ValueError(
            f"--objective {spec}: cannot import {module_name!r} ({type(error).__name__}: {error})"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"--objective {spec}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not isinstance(target, Objective):
        if not callable(target):
            raise ValueError(
                f"--objective {spec}: {attr!r} is a {type(target).__name__}, not an Objective or a "
                "function returning one"
            )
        try:
            target = target()
        except Exception as error:
            raise ValueError(
                f"--objective {spec}: calling {attr}() failed ({type(error).__name__}: {error})"
            ) from None
        if not isinstance(target, Objective):
            raise ValueError(
                f"--objective {spec}: {attr}() returned a {type(target).__name__}, not a "
                "llome_jax.Objective"
            )
    return dataclasses.replace(target, source=spec) if target.source != spec else target
