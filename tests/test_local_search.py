"""experiments/local_search.py: the blind local-search baseline's proposals and accounting."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "local_search", ROOT / "experiments" / "local_search.py"
)
local_search = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(local_search)


def test_proposals_are_new_single_substitutions_of_the_best():
    rng = np.random.default_rng(0)
    sequences = rng.integers(0, 4, (40, 6))
    sequences = np.unique(sequences, axis=0)
    values = rng.random(len(sequences))
    seen = {s.astype(np.uint8).tobytes() for s in sequences}
    top = sequences[np.argsort(-values)[:3]]
    out = local_search.propose(rng, sequences, values, seen, 50, 3, 1, 4)
    assert out.shape == (50, 6) and len(np.unique(out, axis=0)) == 50
    # Each is one substitution from one of the 3 best and was never labelled.
    distance = (out[:, None, :] != top[None, :, :]).sum(-1).min(1)
    assert (distance == 1).all()
    assert not any((out[i] == sequences).all(1).any() for i in range(len(out)))
    # The proposals were added to the seen set, so later rounds cannot repeat them. Enumerate
    # the distinct single mutants of the 3 best that are still new: exactly those can come next.
    mutants = {
        tuple(np.where(np.arange(6) == i, t, row))
        for row in top
        for i in range(6)
        for t in range(4)
        if t != row[i]
    }
    left = {m for m in mutants if np.asarray(m, np.uint8).tobytes() not in seen}
    more = local_search.propose(rng, sequences, values, seen, len(left), 3, 1, 4)
    assert {tuple(r) for r in more} == left
    with pytest.raises(ValueError, match="new sequences found"):
        local_search.propose(rng, sequences, values, seen, 1, 3, 1, 4)


def test_a_round_labels_exactly_its_budget_and_regret_is_the_best_so_far():
    rows = local_search.run(
        "Ehr(8,8)-2-2-2", 1, 0, rounds=2, per_round=16, incumbents=4, mutations=1
    )
    assert [r[4] for r in rows] == [10_000, 10_016, 10_032]
    regrets = [r[5] for r in rows]
    assert regrets == sorted(regrets, reverse=True) and 0.0 <= regrets[-1] <= 1.0
