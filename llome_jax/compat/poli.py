"""poli in both directions, without depending on poli (poli-core pins ``numpy<2``).

* **Ours as a poli black box**: :class:`EhrlichBlackBox` is shaped like poli's black boxes
  (``poli.core.abstract_black_box.AbstractBlackBox``): ``black_box(x)`` takes a ``[b, L]`` NumPy
  array of single-character strings and returns ``[b, 1]`` floats (``-inf`` infeasible); ``info``
  describes the problem (``name``, ``alphabet``, ``max_sequence_length``, ... and poli's
  ``get_alphabet()`` / ``get_max_sequence_length()``); an evaluation budget raises
  :class:`BudgetExhaustedException` when a call would exceed it (nothing is evaluated then); an
  observer (``set_observer``) sees every evaluated batch as ``observer.observe(x, y, context)``, or
  ``observer(x, y)`` for a plain callable. poli-baselines' solvers only use this surface.
* **A poli black box as ours**: :func:`objective_from_black_box` wraps any poli-style callable
  (strings ``[b, L]`` in, ``[b, 1]`` or ``[b]`` numbers out) as an
  :class:`~llome_jax.objective.Objective`, so the GA, LLOME and LaMBO-2 optimise it (its budget and
  observer keep working: every label the optimizers obtain is one call of the black box).

**numpy < 2 environments** (poli-core installed, so llome_jax cannot be imported there): run the
evaluator in this environment as a subprocess and exchange text. Each input line is one sequence,
as characters of an alphabet (``--alphabet``) or comma-separated state ids; the output is CSV
``sequence,value``::

    import csv, io, subprocess
    import numpy as np

    def ehrlich_values(x, alphabet, function="f2"):
        '''x: [b, L] array of single characters of ``alphabet`` (its i-th character is state
        i) -> [b, 1] float values (-inf infeasible).'''
        lines = "".join("".join(row) + "\\n" for row in x)
        out = subprocess.run(
            ["llome-jax", "ehrlich", "evaluate", function, "--alphabet", alphabet,
             "--input", "-", "--output", "-"],
            input=lines, capture_output=True, text=True, check=True,
        ).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        return np.array([[float(r["value"])] for r in rows])

(``llome-jax`` here is the executable of the environment with numpy >= 2, e.g.
``/path/to/venv/bin/llome-jax``; the alphabet needs at least ``v`` characters, and its first
``v`` are the states ``0 .. v-1``, e.g. ``string.ascii_letters[:32]`` for f2's 32 states.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llome_jax import ehrlich
from llome_jax.objective import Objective, ehrlich_objective

__all__ = [
    "AMINO_ACIDS",
    "BlackBoxInformation",
    "BudgetExhaustedException",
    "EhrlichBlackBox",
    "decode",
    "encode",
    "objective_from_black_box",
]

#: poli's default alphabet of 20 amino acids (``poli.core.util.proteins.defaults.AMINO_ACIDS``).
AMINO_ACIDS: tuple[str, ...] = tuple("ARNDCQEGHILKMFPSTWYV")


class BudgetExhaustedException(Exception):  # noqa: N818 (poli's name)
    """A call would exceed the black box's evaluation budget (poli's exception of this name)."""


class BlackBoxInformation:
    """What poli's ``BlackBoxInformation`` tells about a black box (the fields solvers read)."""

    def __init__(
        self,
        name: str,
        max_sequence_length: int,
        alphabet: Sequence[str],
        *,
        aligned: bool = True,
        fixed_length: bool = True,
        deterministic: bool = True,
        discrete: bool = True,
        log_transform_recommended: bool = False,
        padding_token: str = "",
    ) -> None:
        self.name = name
        self.max_sequence_length = max_sequence_length
        self.alphabet = list(alphabet)
        self.aligned = aligned
        self.fixed_length = fixed_length
        self.deterministic = deterministic
        self.discrete = discrete
        self.log_transform_recommended = log_transform_recommended
        self.padding_token = padding_token

    def get_alphabet(self) -> list[str]:
        return self.alphabet

    def get_max_sequence_length(self) -> int:
        return self.max_sequence_length

    def sequences_are_aligned(self) -> bool:
        return self.aligned

    def is_deterministic(self) -> bool:
        return self.deterministic

    def __repr__(self) -> str:
        return (
            f"BlackBoxInformation(name={self.name!r}, max_sequence_length="
            f"{self.max_sequence_length}, alphabet={''.join(self.alphabet)!r})"
        )


def _alphabet(alphabet: Sequence[str] | str, num_states: int | None = None) -> list[str]:
    letters = list(alphabet)
    if any(not isinstance(c, str) or len(c) != 1 for c in letters):
        raise ValueError("the alphabet must be single characters, e.g. 'ACDE' or ['A', 'C'].")
    if len(set(letters)) != len(letters):
        raise ValueError(f"the alphabet {''.join(letters)!r} repeats a character.")
    if num_states is not None:
        if len(letters) < num_states:
            raise ValueError(
                f"the alphabet has {len(letters)} characters; the problem has {num_states} states."
            )
        letters = letters[:num_states]
    return letters


def encode(x: Any, alphabet: Sequence[str]) -> np.ndarray:
    """Strings to states: ``[b, L]`` single characters (or ``[b]`` strings) -> int32 ``[b, L]``
    (``alphabet[i]`` is state ``i``).

    Raises:
      ValueError: a character outside the alphabet, or rows of different lengths.
    """
    index = {c: i for i, c in enumerate(alphabet)}
    array = np.asarray(x)
    if array.ndim == 1:  # one string per sequence
        rows = [list(str(s)) for s in array]
        if len({len(r) for r in rows}) > 1:
            raise ValueError("the sequences have different lengths.")
        array = np.asarray(rows, dtype=str).reshape(len(rows), -1)
    if array.ndim != 2:
        raise ValueError(f"sequences must be [b, L] characters or [b] strings; got {array.shape}.")
    try:
        return np.vectorize(index.__getitem__, otypes=[np.int32])(array).reshape(array.shape)
    except KeyError as error:
        raise ValueError(
            f"character {error.args[0]!r} is not in the alphabet {''.join(alphabet)!r}."
        ) from None


def decode(x: Any, alphabet: Sequence[str]) -> np.ndarray:
    """States to strings: int ``[b, L]`` -> ``[b, L]`` array of single characters."""
    return np.asarray(list(alphabet))[np.asarray(x)]


# ---------------------------------------------------------------------------------------------
# Ours as a poli black box
# ---------------------------------------------------------------------------------------------
class EhrlichBlackBox:
    """An Ehrlich function (or any :class:`~llome_jax.objective.Objective`) with poli's black-box
    interface (module docstring).

    Args:
      function: an :class:`llome_jax.ehrlich.Ehrlich` instance, an Objective, or a function spec
        (``"f2"``, ``"Ehr(v,L)-c-k-q"`` with ``instance_seed``, an instance file).
      alphabet: the characters of states ``0 .. v-1`` (default: the first ``v`` of poli's
        amino acids ``ARNDCQEGHILKMFPSTWYV``; a longer alphabet is cut to ``v``).
      evaluation_budget: the most sequences the black box evaluates in its lifetime.
      batch_size: sequences per call of the evaluator (``None``: all at once); the observer sees
        each batch.
      return_value_on_unfeasible: the value of an infeasible sequence (poli's default ``-inf``).
      instance_seed: with a function spec, as ``llome-jax --instance-seed``.

    Attributes:
      num_evaluations: sequences evaluated so far.
      objective: the wrapped Objective (its ``x0``, ``optimal_value``, ...).
    """

    def __init__(
        self,
        function: Any = "f2",
        alphabet: Sequence[str] | str | None = None,
        *,
        evaluation_budget: float = math.inf,
        batch_size: int | None = None,
        return_value_on_unfeasible: float = -math.inf,
        instance_seed: int | None = None,
    ) -> None:
        if isinstance(function, str):
            objective = ehrlich_objective(function, instance_seed)
        elif isinstance(function, Objective):
            objective = function
        else:
            objective = Objective.from_ehrlich(function)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None; got {batch_size!r}.")
        self.objective = objective
        v = objective.num_states
        if alphabet is None:
            if v > len(AMINO_ACIDS):
                raise ValueError(f"{objective.name} has {v} states: pass an alphabet of {v}.")
            alphabet = AMINO_ACIDS
        self.alphabet = _alphabet(alphabet, v)
        self.sequence_length = objective.length
        self.evaluation_budget = evaluation_budget
        self.batch_size = batch_size
        self.return_value_on_unfeasible = float(return_value_on_unfeasible)
        self.num_evaluations = 0
        self.observer: Any = None
        self.observer_info: Any = None

    # ------------------------------------------------------------------ poli's surface
    def get_black_box_info(self) -> BlackBoxInformation:
        return BlackBoxInformation(
            name="ehrlich_holo" if self.objective.is_ehrlich else self.objective.name,
            max_sequence_length=self.sequence_length,
            alphabet=self.alphabet,
            deterministic=True,
        )

    @property
    def info(self) -> BlackBoxInformation:
        return self.get_black_box_info()

    def set_observer(self, observer: Any) -> None:
        """``observer.observe(x, y, context)`` (poli's ``AbstractObserver``) or ``observer(x, y)``
        is called after every evaluated batch, with the batch's strings ``[b, L]`` and values
        ``[b, 1]``."""
        self.observer = observer

    def set_observer_info(self, observer_info: Any) -> None:
        self.observer_info = observer_info

    def set_evaluation_budget(self, evaluation_budget: float) -> None:
        self.evaluation_budget = evaluation_budget

    def reset_evaluation_budget(self) -> None:
        self.num_evaluations = 0

    def __call__(self, x: Any, context: Any = None) -> np.ndarray:
        """Values of ``[b, L]`` single-character strings (or ``[b]`` strings): float64 ``[b, 1]``.

        Raises:
          BudgetExhaustedException: the call would exceed ``evaluation_budget`` (nothing is
            evaluated or counted).
          ValueError: a character outside the alphabet or a wrong length.
        """
        states = encode(x, self.alphabet)
        if states.shape[1] != self.sequence_length:
            raise ValueError(
                f"sequences must have length {self.sequence_length}; got {states.shape[1]}."
            )
        strings = decode(states, self.alphabet)
        if self.num_evaluations + states.shape[0] > self.evaluation_budget:
            raise BudgetExhaustedException(
                f"Exhausted the evaluation budget of {self.evaluation_budget} evaluations (tried "
                f"to evaluate {states.shape[0]}, {self.num_evaluations} evaluated already)."
            )
        size = self.batch_size or max(states.shape[0], 1)
        out = []
        for start in range(0, states.shape[0], size):
            y = self._black_box(states[start : start + size])
            if self.observer is not None:
                observe = getattr(self.observer, "observe", None)
                if observe is not None:
                    observe(strings[start : start + size], y, context)
                else:
                    self.observer(strings[start : start + size], y)
            self.num_evaluations += y.shape[0]
            out.append(y)
        return np.concatenate(out) if out else np.zeros((0, 1))

    def _black_box(self, states: np.ndarray) -> np.ndarray:
        values = self.objective(states).astype(np.float64)
        values[np.isneginf(values)] = self.return_value_on_unfeasible
        return values[:, None]

    # ------------------------------------------------------------------ solutions (strings)
    def initial_solution(self, n_samples: int = 1) -> np.ndarray:
        """The optimizers' start sequence, repeated: ``[n, L]`` characters."""
        return decode(np.tile(self.objective.x0, (n_samples, 1)), self.alphabet)

    def optimal_solution(self) -> np.ndarray:
        """An optimum ``[1, L]`` (``ehrlich.optimal_solution``; Ehrlich functions only)."""
        if not self.objective.is_ehrlich:
            raise ValueError("optimal_solution is known for Ehrlich functions only.")

        return decode(
            np.asarray(ehrlich.optimal_solution(self.objective.ehrlich))[None], self.alphabet
        )

    def terminate(self) -> None:
        """Nothing to release (poli's interface)."""

    def __enter__(self) -> EhrlichBlackBox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()

    def __repr__(self) -> str:
        return (
            f"<EhrlichBlackBox({self.objective.name}, L={self.sequence_length}, "
            f"alphabet={''.join(self.alphabet)!r}, num_evaluations={self.num_evaluations}, "
            f"evaluation_budget={self.evaluation_budget})>"
        )


# ---------------------------------------------------------------------------------------------
# A poli black box as ours
# ---------------------------------------------------------------------------------------------
def objective_from_black_box(
    black_box: Callable[[np.ndarray], Any],
    alphabet: Sequence[str] | str | None = None,
    *,
    length: int | None = None,
    name: str | None = None,
    initial_solution: Any = None,
    optimal_value: float | None = None,
    worst_value: float | None = None,
    is_feasible: Callable[[np.ndarray], Any] | None = None,
) -> Any:
    """A poli-style black box as an :class:`~llome_jax.objective.Objective`.

    ``evaluate(x)`` turns int32 states ``[n, L]`` into ``[n, L]`` single characters
    (``alphabet[state]``), calls ``black_box`` and returns its ``[n, 1]`` (or ``[n]``) output as
    ``[n]`` (integer outputs are cast to float; anything else malformed is reported by the
    objective's checks, naming it). Every label an optimizer obtains is a call of the black box,
    so its budget, observer and counters keep working.

    Args:
      black_box: ``f(x: [n, L] str) -> [n, 1]`` (a poli ``AbstractBlackBox`` or any callable).
      alphabet: the characters of states ``0 .. v-1``; default ``black_box.info.alphabet``.
      length: ``L``; default ``black_box.info.max_sequence_length``.
      name: default ``black_box.info.name`` (else the class name).
      initial_solution: the start sequence, as states ``[L]`` or characters (a string or
        ``[L]`` / ``[1, L]`` characters); default ``black_box.initial_solution()`` when the black
        box has one (poli's Ehrlich black boxes), else the objective's default draw.
      optimal_value / worst_value / is_feasible: as :class:`~llome_jax.objective.Objective`
        (``is_feasible`` receives states ``[n, L]``).

    Raises:
      ValueError: no alphabet or length can be found, or the start sequence is not in it.
    """
    info = getattr(black_box, "info", None)
    if alphabet is None:
        alphabet = getattr(info, "alphabet", None)
        if alphabet is None:
            raise ValueError("pass the alphabet (the black box has no info.alphabet).")
    letters = _alphabet(alphabet)
    if length is None:
        length = getattr(info, "max_sequence_length", None)
        if not isinstance(length, int | np.integer):
            raise ValueError(
                "pass length=L (the black box has no finite info.max_sequence_length)."
            )
    name = name or getattr(info, "name", None) or type(black_box).__name__
    if initial_solution is None and callable(getattr(black_box, "initial_solution", None)):
        initial_solution = black_box.initial_solution()
    if initial_solution is not None:
        start = np.asarray(initial_solution)
        if start.dtype.kind in "USO":
            if start.ndim == 0:
                start = np.asarray(list(str(start)))
            start = encode(start.reshape(1, -1) if start.ndim == 1 else start, letters)[0]
        initial_solution = start
    table = np.asarray(letters)

    def evaluate(x: np.ndarray) -> np.ndarray:
        y = np.asarray(black_box(table[np.asarray(x)]))
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if np.issubdtype(y.dtype, np.integer):
            y = y.astype(np.float64)
        return y

    return Objective(
        name=str(name),
        num_states=len(letters),
        length=int(length),
        evaluate=evaluate,
        is_feasible=is_feasible,
        initial_solution=initial_solution,
        optimal_value=optimal_value,
        worst_value=worst_value,
        traceable=False,
    )
