"""The information contract every optimizer runs under: :class:`Oracle`.

An optimizer learns values only through labels, and every label it pays for is counted:

* **Labels** ``f(x)`` come from :meth:`Oracle.label`. With ``accounting="pay_once"`` (the default)
  the oracle keeps one label cache for the run: a proposal whose value is known is looked up, not
  paid for, and a sequence proposed twice in one call is paid once. ``num_evaluations`` in
  ``rounds.jsonl`` is the cumulative number of *paid* labels, and ``evaluated.csv`` holds exactly
  the paid sequences (each once). ``accounting="every_evaluation"`` is the paper's accounting:
  every evaluation is paid, repeats included (the GA pre-solver's ``n0 n`` = 10,000 on f2).
* **Constraint queries.** A call of the objective's ``is_feasible`` on a sequence that is not
  labelled is a *constraint query* (feasibility of a labelled sequence is known from its label:
  ``-inf`` marks an infeasible one). :meth:`Oracle.feasibility` answers from labels only unless
  ``constraint_queries="free"``, when it asks ``is_feasible`` about the unlabelled rows (each
  distinct sequence once) and counts them. :meth:`Oracle.query_feasible` always asks and counts
  (the LLOME checkpoint gate's check, as in the authors' code). Every record reports
  ``num_constraint_queries`` (this round) and ``cum_constraint_queries``.
* **The start sequence** ``x0`` is part of the problem statement: its value (the GA's first
  best-so-far) is public to every optimizer and not counted.
* **A label budget** (:attr:`Oracle.limit`, set by the round driver to round 0's labels plus the
  run's ``budget``) caps the labels paid. An optimizer cuts its last proposals to
  :meth:`Oracle.affordable` rows before it labels them, so that a run ends at exactly the budget;
  a call that would still pay past the cap pays for the affordable rows only, returns NaN for the
  others and sets :attr:`Oracle.truncated`.

A traceable objective (an Ehrlich function, a jitted ``evaluate``) is a pure function, so the GA
may recompute it inside its jitted generations: the oracle then registers the generations'
particles with :meth:`Oracle.record_labels`, which pays for the sequences it has not seen, as a
lookup would. A host objective is only ever called on sequences the oracle has not labelled
(:meth:`Oracle.cached_objective`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import numpy as np

__all__ = [
    "ACCOUNTING",
    "CONSTRAINT_QUERIES",
    "LabelAboveOptimumError",
    "LabelResult",
    "Oracle",
    "UnpaidLabelError",
    "check_contract_settings",
]

#: ``accounting`` values: pay each distinct sequence once (default) or every evaluation (paper).
ACCOUNTING = ("pay_once", "every_evaluation")
#: ``constraint_queries`` values: no ``is_feasible`` call on unlabelled sequences beyond the
#: authors' own (default), or the check given to every optimizer that can use it.
CONSTRAINT_QUERIES = ("off", "free")


def check_contract_settings(accounting: str, constraint_queries: str) -> None:
    """Raise ``ValueError`` naming the choices when either setting is unknown."""
    if accounting not in ACCOUNTING:
        raise ValueError(f"accounting must be one of {ACCOUNTING}; got {accounting!r}.")
    if constraint_queries not in CONSTRAINT_QUERIES:
        raise ValueError(
            f"constraint_queries must be one of {CONSTRAINT_QUERIES}; got {constraint_queries!r}."
        )


@dataclasses.dataclass(frozen=True)
class LabelResult:
    """What :meth:`Oracle.label` returns for ``x [n, L]``.

    Attributes:
      values: float32 ``[n]`` ``f(x)`` of every row (looked up or paid).
      paid: bool ``[n]`` the rows paid for in this call (``pay_once``: the first occurrence of
        each sequence not labelled before; ``every_evaluation``: every row).
    """

    values: np.ndarray
    paid: np.ndarray

    @property
    def num_paid(self) -> int:
        return int(self.paid.sum())


class LabelAboveOptimumError(ValueError):
    """A label exceeds the objective's declared ``optimal_value`` (a contradiction)."""


def _keys(x: np.ndarray) -> list[bytes]:
    x = np.ascontiguousarray(x, np.int32)
    return [row.tobytes() for row in x]


class Oracle:
    """The run's label cache and its counters (module docstring).

    Args:
      objective: the :class:`~llome_jax.objective.Objective` whose checked call labels.
      accounting: ``"pay_once"`` or ``"every_evaluation"``.
      constraint_queries: ``"off"`` or ``"free"``.

    Attributes:
      num_paid: cumulative paid labels (``num_evaluations``).
      num_constraint_queries: cumulative ``is_feasible`` calls on unlabelled sequences (rows).
    """

    def __init__(
        self,
        objective: Any,
        accounting: Literal["pay_once", "every_evaluation"] = "pay_once",
        constraint_queries: Literal["off", "free"] = "off",
    ) -> None:
        check_contract_settings(accounting, constraint_queries)
        self.objective = objective
        self.accounting = accounting
        self.constraint_queries = constraint_queries
        self._labels: dict[bytes, float] = {}
        self._start_known = False
        self._feasible: dict[bytes, bool] = {}  # answers of constraint queries
        self._paid_x: list[np.ndarray] = []
        self._paid_v: list[np.ndarray] = []
        self.num_paid = 0
        self.num_constraint_queries = 0
        #: the most labels the run may have paid in all (``None``: no cap); see ``affordable``
        self.limit: int | None = None
        #: whether a call was cut at :attr:`limit` (rows left unpaid, their values NaN)
        self.truncated = False

    @property
    def pay_once(self) -> bool:
        return self.accounting == "pay_once"

    # ------------------------------------------------------------------ state
    def restore(
        self, sequences: Any, values: Any, *, num_paid: int, num_constraint_queries: int = 0
    ) -> None:
        """Start from a run's labelled history (``evaluated.csv``) and its counters (the last
        ``rounds.jsonl`` record); forgets anything held before."""
        self._labels = {}
        self._start_known = False
        self._feasible = {}
        x = np.asarray(sequences, np.int32)
        v = np.asarray(values, np.float64)
        if x.size:
            for key, value in zip(_keys(x), v):
                self._labels.setdefault(key, float(value))
        self._paid_x, self._paid_v = [], []
        self.num_paid = int(num_paid)
        self.num_constraint_queries = int(num_constraint_queries)

    def remaining(self) -> int | None:
        """Labels left under :attr:`limit` (``None`` without a cap)."""
        return None if self.limit is None else max(0, self.limit - self.num_paid)

    def affordable(self, x: Any) -> int:
        """How many leading rows of ``x`` [n, L] can be labelled within :attr:`limit`: the
        longest prefix whose paid rows (``pay_once``: distinct sequences not labelled yet, the
        public start sequence excluded; ``every_evaluation``: every row) number at most
        :meth:`remaining`; ``n`` without a cap."""
        x = np.asarray(x, np.int32)
        left = self.remaining()
        if left is None or len(x) == 0:
            return len(x)
        if not self.pay_once:
            return min(len(x), left)
        self._know_start()
        seen: set[bytes] = set()
        for i, key in enumerate(_keys(x)):
            if key in self._labels or key in seen:
                continue
            if len(seen) == left:
                return i
            seen.add(key)
        return len(x)

    def known(self) -> tuple[np.ndarray, np.ndarray]:
        """Every label the run holds, in the order labelled, the public start sequence first
        (``pay_once``): int32 ``[N, L]`` and float64 ``[N]`` (copies). The same after a resume
        (:meth:`restore` keeps ``evaluated.csv``'s order) as in an uninterrupted run: what an
        ask/tell optimizer sees (``llome_jax.optimizers.LabelledData``)."""
        self._know_start()
        keys = list(self._labels)
        if self.pay_once:
            start = np.asarray(self.objective.x0, np.int32).tobytes()
            keys = [start, *(k for k in keys if k != start)] if start in self._labels else keys
        length = int(self.objective.length)
        if not keys:
            return np.zeros((0, length), np.int32), np.zeros(0, np.float64)
        x = np.frombuffer(b"".join(keys), np.int32).reshape(len(keys), length).copy()
        v = np.fromiter((self._labels[k] for k in keys), np.float64, len(keys))
        return x, v

    def is_labelled(self, x: Any) -> np.ndarray:
        """bool ``[n]``: which rows of ``x`` have a label."""
        return np.asarray([k in self._labels for k in _keys(np.asarray(x))], bool)

    def lookup(self, x: Any) -> np.ndarray:
        """float64 ``[n]`` the labels of ``x`` (NaN where unlabelled)."""
        return np.asarray([self._labels.get(k, np.nan) for k in _keys(np.asarray(x))], np.float64)

    def take_paid(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The sequences (int32 ``[m, L]``) and values (float64 ``[m]``) paid since the last
        call, in the order they were paid (what ``evaluated.csv`` appends)."""
        if self._paid_x:
            x = np.concatenate(self._paid_x).astype(np.int32)
            v = np.concatenate(self._paid_v).astype(np.float64)
        else:
            x, v = np.zeros((0, length), np.int32), np.zeros(0, np.float64)
        self._paid_x, self._paid_v = [], []
        return x, v

    # ------------------------------------------------------------------ labels
    def _know_start(self) -> None:
        """Put the start sequence's label in the cache, unpaid (it is public), once (``pay_once``;
        with ``every_evaluation`` every evaluation is paid, the start sequence's included)."""
        if self._start_known or not self.pay_once:
            return
        self._start_known = True
        x0 = np.asarray(self.objective.x0, np.int32)[None]
        key = x0[0].tobytes()
        if key not in self._labels:
            self._labels[key] = float(np.asarray(self.objective(x0), np.float64)[0])

    def _register(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Store labels of rows not known yet; bool ``[n]``: the rows newly stored (first
        occurrence of each unknown sequence).

        Raises:
          LabelAboveOptimumError: a label above the objective's ``optimal_value`` (its
            declared optimum is wrong, and every regret would be too)."""
        optimum = getattr(self.objective, "optimal_value", None)
        if optimum is not None and len(v):
            top = float(np.max(np.where(np.isnan(v), -np.inf, v)))
            if top > optimum + 1e-6 * max(1.0, abs(optimum)):
                raise LabelAboveOptimumError(
                    f"objective {getattr(self.objective, 'name', '?')!r} returned {top:g}, above "
                    f"its optimal_value {optimum:g}: fix optimal_value (or leave it None if "
                    "unknown)"
                )
        new = np.zeros(len(x), bool)
        for i, key in enumerate(_keys(x)):
            if key not in self._labels:
                self._labels[key] = float(v[i])
                new[i] = True
        if new.any():
            self._paid_x.append(np.asarray(x[new], np.int32))
            self._paid_v.append(np.asarray(v[new], np.float64))
        return new

    def label(self, x: Any) -> LabelResult:
        """``f(x)`` for int ``[n, L]``: known rows looked up, the others paid (one checked call
        of the objective on the distinct unknown rows; with ``every_evaluation`` one call on
        every row, each paid)."""
        x = self.objective.check_sequences(x)
        n = x.shape[0]
        self._know_start()
        cut = self.affordable(x)
        if cut < n:  # past the label budget: the rest stays unpaid (NaN)
            self.truncated = True
            head = self.label(x[:cut])
            values = np.full(n, np.nan, np.float32)
            values[:cut] = head.values
            known = self.lookup(x[cut:])  # labelled before: still known, not paid
            values[cut:] = known
            paid = np.zeros(n, bool)
            paid[:cut] = head.paid
            return LabelResult(values, paid)
        if not self.pay_once:
            values = self.objective(x) if n else np.zeros(0, np.float32)
            self._register(x, np.asarray(values, np.float64))
            self.num_paid += n
            return LabelResult(np.asarray(values, np.float32), np.ones(n, bool))
        keys = _keys(x)
        first: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key not in self._labels:
                first.setdefault(key, i)
        rows = np.fromiter(first.values(), np.int64, len(first))
        if rows.size:
            fresh = np.asarray(self.objective(x[rows]), np.float64)
            self._register(x[rows], fresh)
            self.num_paid += int(rows.size)
        values = np.asarray([self._labels[k] for k in keys], np.float32).reshape(n)
        paid = np.zeros(n, bool)
        paid[rows] = True
        return LabelResult(values, paid)

    def record_labels(self, x: Any, values: Any, *, num_paid: int | None = None) -> np.ndarray:
        """Register labels computed inside a jitted program (the GA's generations) in evaluation
        order; returns bool ``[n]``, the rows newly labelled. ``pay_once`` pays those rows;
        ``every_evaluation`` pays ``num_paid`` (default: every row). Rows past the label budget
        (:meth:`affordable`) are not registered."""
        self._know_start()
        x = np.asarray(x, np.int32)
        v = np.asarray(values, np.float64)
        v = np.where(np.isnan(v), -np.inf, v)
        n, cut = len(x), self.affordable(x)
        if cut < n:  # past the label budget: only the affordable rows are registered
            self.truncated = True
            x, v = x[:cut], v[:cut]
            if num_paid is not None:
                num_paid = min(num_paid, cut)
        new = np.zeros(n, bool)
        new[:cut] = self._register(x, v)
        self.num_paid += (
            int(new.sum()) if self.pay_once else int(len(x) if num_paid is None else num_paid)
        )
        return new

    def cached_objective(self) -> Any:
        """The objective with ``evaluate`` behind the label cache (``pay_once``, a host
        objective): the GA's host loop then calls the black box only on unlabelled sequences and
        pays each once. The objective itself otherwise.

        Past the label budget the rows left unpaid read ``-inf`` here (a GA generation must get
        a value for every particle); the GA discards a generation the budget cut
        (``ga_optimizer``), so these values never reach a selection or a record."""
        objective = self.objective
        if not self.pay_once or objective.traceable:
            return objective

        def evaluate(x: Any) -> np.ndarray:
            values = self.label(x).values
            return np.where(np.isnan(values), -np.inf, values).astype(np.float32)

        return dataclasses.replace(objective, evaluate=evaluate, source=objective.source)

    # ------------------------------------------------------------------ constraints
    def _ask_is_feasible(self, x: np.ndarray) -> np.ndarray:
        """``is_feasible`` of ``x``'s rows: labelled ones from their label, queried ones from
        the cache; one counted call on the distinct rest."""
        self._know_start()
        out = np.ones(len(x), bool)
        keys = _keys(x)
        ask: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key in self._labels or key in self._feasible:
                continue
            ask.setdefault(key, i)
        if ask:
            rows = np.fromiter(ask.values(), np.int64, len(ask))
            answers = self.objective.feasible(x[rows])
            self.num_constraint_queries += int(rows.size)
            for key, answer in zip(ask, answers):
                self._feasible[key] = bool(answer)
        for i, key in enumerate(keys):
            if key in self._labels:
                out[i] = np.isfinite(self._labels[key])
            else:
                out[i] = self._feasible[key]
        return out

    def feasibility(self, x: Any) -> np.ndarray:
        """What the optimizer may know of ``x``'s feasibility: bool ``[n]``.

        Labelled rows: from the label. Unlabelled rows: with ``constraint_queries="free"`` a
        counted ``is_feasible`` query; with ``"off"`` unknown, reported as feasible (nothing is
        asked, so a filter that caps infeasible rows leaves them in)."""
        x = np.asarray(x, np.int32)
        if self.constraint_queries == "free":
            return self._ask_is_feasible(x)
        self._know_start()
        labels = self.lookup(x)
        return np.where(np.isnan(labels), True, np.isfinite(labels))

    def query_feasible(self, x: Any) -> np.ndarray:
        """A constraint check the optimizer makes whatever ``constraint_queries`` says (the
        checkpoint gate's, as in the authors' code): counted like any other. bool ``[n]``."""
        return self._ask_is_feasible(np.asarray(x, np.int32))

    def _view(self, is_feasible: Any) -> Any:
        """The objective as code outside the oracle may hold it: the problem statement
        (``name``, ``num_states`` ``v``, ``length`` ``L``, the public start sequence ``x0``,
        ``optimal_value`` ``f*``, ``worst_value``) and the constraint check ``is_feasible``, but
        nothing that computes a label: ``evaluate`` (and so ``view(x)``) raises
        :class:`UnpaidLabelError`, and the Ehrlich instance (whose kernels would compute
        ``f(x)`` uncounted) is dropped. Labels come from :meth:`label` only."""
        objective = self.objective
        return dataclasses.replace(
            objective,
            evaluate=functools.partial(_refuse_label, objective.name),
            is_feasible=is_feasible,
            initial_solution=objective.x0,
            traceable=False,  # not a JAX function: nothing may trace it into a program
            ehrlich=None,  # code given the view must not reach the uncounted Ehrlich kernel
            source=objective.source,
        )

    def candidate_view(self) -> Any:
        """The objective with ``is_feasible`` = :meth:`feasibility` (labels, plus counted
        queries only with ``constraint_queries="free"``): what refinement and the Filter see.
        No label can be computed through it (:meth:`_view`)."""
        return self._view(self.feasibility)

    def constraint_view(self) -> Any:
        """The objective with ``is_feasible`` = :meth:`query_feasible` (always asked, counted):
        the checkpoint gate's check. No label can be computed through it (:meth:`_view`)."""
        return self._view(self.query_feasible)


class UnpaidLabelError(RuntimeError):
    """A label was asked of an oracle view (:meth:`Oracle.candidate_view`,
    :meth:`Oracle.constraint_view`): under the information contract labels come only from
    :meth:`Oracle.label`, which pays for them."""


def _refuse_label(name: str, x: Any) -> Any:
    """The ``evaluate`` of an oracle view: always raises :class:`UnpaidLabelError`."""
    raise UnpaidLabelError(
        f"objective {name!r}: this is an oracle view (candidate_view / constraint_view), which "
        "holds the constraint check only; labels f(x) come from Oracle.label, which pays for "
        "them (the information contract, llome_jax.oracle)"
    )
