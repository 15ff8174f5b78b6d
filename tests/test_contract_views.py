"""The oracle's views of the objective (``Oracle.candidate_view`` / ``constraint_view``, issue 53):
code that holds a view (refinement, the Filter, the checkpoint gate) keeps the problem statement
and the constraint check, and nothing that computes a label ``f(x)`` without paying for it."""

from __future__ import annotations

import numpy as np
import pytest

from llome_jax import Objective, ehrlich
from llome_jax.oracle import Oracle, UnpaidLabelError

X = np.asarray([[1, 2, 3], [0, 3, 3]], np.int32)


def _toy(calls: list) -> Objective:
    def evaluate(x):
        calls.append(np.asarray(x).copy())
        x = np.asarray(x)
        return np.where(x[:, 0] == 0, -np.inf, x.sum(1)).astype(np.float32)

    return Objective(
        "toy",
        4,
        3,
        evaluate,
        is_feasible=lambda x: np.asarray(x)[:, 0] != 0,
        initial_solution=[1, 1, 1],
        optimal_value=9.0,
        worst_value=3.0,
    )


def _views(oracle: Oracle) -> list[Objective]:
    return [oracle.candidate_view(), oracle.constraint_view()]


#: every public callable of an Objective, with arguments; a new one fails
#: ``test_every_public_callable_of_a_view_is_classified`` until it is listed here
_CALLS = {
    "__call__": (X,),
    "validate": (),
    "feasible": (X,),
    "check_sequences": (X,),
    "check_values": (np.zeros(2, np.float32), 2),
    "describe": (),
    "evaluate": (X,),
    "is_feasible": (X,),
    "from_ehrlich": None,  # a constructor (classmethod), not a property of the view
}
_LABELLING = {"__call__", "validate", "evaluate"}


def test_every_public_callable_of_a_view_is_classified() -> None:
    view = Oracle(_toy([])).candidate_view()
    public = {
        name
        for name in dir(view)
        if (not name.startswith("_") or name == "__call__") and callable(getattr(view, name))
    }
    assert public == set(_CALLS)


@pytest.mark.parametrize("which", ["candidate_view", "constraint_view"])
def test_nothing_on_a_view_computes_a_label(which: str) -> None:
    """Calling every public callable of the view never reaches the black box; the labelling ones
    raise ``UnpaidLabelError`` naming the contract, and no counter moves."""
    calls: list = []
    oracle = Oracle(_toy(calls))
    oracle.feasibility(X)  # the oracle learns the public start value x0 = [1, 1, 1] (unpaid)
    assert [c.tolist() for c in calls] == [[[1, 1, 1]]]
    calls.clear()
    view = getattr(oracle, which)()
    for name, args in _CALLS.items():
        if args is None:
            continue
        if name in _LABELLING:
            with pytest.raises(UnpaidLabelError, match=r"Oracle\.label.*information contract"):
                getattr(view, name)(*args)
        else:
            getattr(view, name)(*args)
    assert calls == []  # the black box was never asked
    assert oracle.num_paid == 0
    assert np.isnan(oracle.lookup(X)).all()  # nothing was labelled through the view


def test_a_view_keeps_the_problem_statement_and_the_counted_check() -> None:
    calls: list = []
    oracle = Oracle(_toy(calls), constraint_queries="off")
    oracle.feasibility(X)  # the oracle learns the public start value (unpaid)
    calls.clear()
    candidate, constraint = _views(oracle)
    for view in (candidate, constraint):
        assert (view.name, view.num_states, view.length) == ("toy", 4, 3)
        assert (view.optimal_value, view.worst_value) == (9.0, 3.0)
        assert view.x0.tolist() == [1, 1, 1]
        assert view.ehrlich is None and not view.is_ehrlich and view.traceable is False
    # off: the candidate view asks nothing (unlabelled rows count as feasible) ...
    np.testing.assert_array_equal(candidate.feasible(X), [True, True])
    assert oracle.num_constraint_queries == 0
    # ... the constraint view asks, counted (the gate's check)
    np.testing.assert_array_equal(constraint.feasible(X), [True, False])
    assert oracle.num_constraint_queries == 2 and calls == []


def test_a_view_of_an_ehrlich_objective_drops_the_kernel_and_keeps_x0() -> None:
    """The Ehrlich objective's default start sequence is a property of the instance: the view
    holds it as data, without the instance whose kernel would label for free."""
    fn = ehrlich.resolve_function("Ehr(8,8)-2-2-2", 1)
    objective = Objective.from_ehrlich(fn)
    oracle = Oracle(objective)
    for view in _views(oracle):
        assert view.ehrlich is None and view.initial_solution is not None
        np.testing.assert_array_equal(view.x0, objective.x0)
        with pytest.raises(UnpaidLabelError):
            view(objective.x0[None])
        with pytest.raises(UnpaidLabelError):
            view.evaluate(objective.x0[None])
    assert oracle.num_paid == 0
    # the oracle itself still labels (and pays)
    value = oracle.label(np.asarray(ehrlich.optimal_solution(fn))[None]).values
    assert value.tolist() == [1.0] and oracle.num_paid == 1
