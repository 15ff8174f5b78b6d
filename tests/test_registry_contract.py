"""Every registered optimizer is held to the information contract, the budget and exact resume
(``llome_jax.optimizers.contract``): the tests loop over the registry, so an optimizer added to
it (built in, ``register()``-ed, an installed package's entry point, or named in
``LLOME_JAX_OPTIMIZERS``) is tested with no test edited. Two deliberately cheating optimizers
show that the checks catch what they are for."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from llome_jax import optimizers
from llome_jax.optimizers import AskTellOptimizer, BenchmarkSettings, ContractError, contract

SLOW = {"llome", "lambo2"}  # model training: marked slow (CI runs them; -m "not slow" skips)


def _params() -> list:
    return [
        pytest.param(name, check, marks=[pytest.mark.slow] if name in SLOW else [])
        for name in optimizers.names()
        for check in contract.CHECKS
    ]


@pytest.mark.parametrize(("name", "check"), _params())
def test_every_registered_optimizer_keeps_the_contract(name, check, tmp_path) -> None:
    contract.CHECKS[check](name, tmp_path)


def test_the_registry_lists_the_built_ins_first() -> None:
    assert optimizers.names()[:4] == ["ga", "llome", "lambo2", "local_search"]
    with pytest.raises(ValueError, match="unknown optimizer 'nope'; registered: ga, llome"):
        optimizers.get("nope")


# ------------------------------------------------------------------------------------------
# Cheaters: each is caught by the check meant for it
# ------------------------------------------------------------------------------------------
class _Mutant(AskTellOptimizer):
    """Two random substitutions of one of the 8 best labelled sequences per proposal
    (honest)."""

    name = "honest_mutant"

    def ask(self, key, state, data, num):
        rng = self.numpy_rng(key)
        top = data.sequences[np.argsort(-data.values, kind="stable")[:8]]
        seen = {row.tobytes() for row in data.sequences}
        out = []
        for _ in range(100 * num):
            if len(out) == num:
                break
            child = top[rng.integers(len(top))].copy()
            child[rng.integers(len(child), size=2)] = rng.integers(data.num_states, size=2)
            if child.tobytes() not in seen:
                seen.add(child.tobytes())
                out.append(child)
        return np.asarray(out, np.int32).reshape(-1, data.sequences.shape[1]), state


class _Peeker(_Mutant):
    """Evaluates the objective itself to keep only improving proposals: learns unpaid values."""

    name = "peeker"

    def ask(self, key, state, data, num):
        candidates, state = super().ask(key, state, data, 4 * num)
        values = np.asarray(self.objective(candidates))  # not through the oracle
        return candidates[np.argsort(-values)[:num]], state


class _Repeater(_Mutant):
    """Re-proposes the labelled best sequence beside new ones."""

    name = "repeater"

    def ask(self, key, state, data, num):
        fresh, state = super().ask(key, state, data, num - 1)
        return np.concatenate([data.best[0][None], fresh]), state


def _harder(cls):
    """The class's test configuration on a function it does not solve in two rounds."""
    return lambda **o: cls.test_config(**{"function": "Ehr(32,32)-4-4-4", "instance_seed": 7, **o})


def test_an_honest_optimizer_passes_every_check(tmp_path) -> None:
    entry = optimizers.OptimizerEntry("honest_mutant", _Mutant, BenchmarkSettings, _harder(_Mutant))
    contract.check_all(entry, tmp_path)


def test_an_optimizer_that_evaluates_the_objective_itself_is_caught(tmp_path) -> None:
    entry = optimizers.OptimizerEntry("peeker", _Peeker, BenchmarkSettings, _Peeker.test_config)
    with pytest.raises(AssertionError, match="learnt values it did not pay for"):
        contract.check_pays_once(entry, tmp_path)


def test_an_optimizer_that_reproposes_a_labelled_sequence_is_stopped(tmp_path) -> None:
    entry = optimizers.OptimizerEntry(
        "repeater", _Repeater, BenchmarkSettings, _Repeater.test_config
    )
    with pytest.raises(ContractError, match=r"repeater.s ask returned 1 sequence\(s\) already"):
        contract.check_pays_once(entry, tmp_path)


def test_a_registered_optimizer_joins_the_loop(monkeypatch) -> None:
    monkeypatch.setattr(optimizers.registry, "_REGISTERED", {})
    optimizers.register(_Mutant)
    assert "honest_mutant" in optimizers.names()
    assert ("honest_mutant", "resume") in [tuple(p.values) for p in _params()]
    with pytest.raises(ValueError, match="'ga' is a built-in optimizer's name"):
        optimizers.register(dataclasses.replace(optimizers.get("honest_mutant"), name="ga"))


def test_a_file_of_ones_own_is_found_by_module_attr_and_by_the_environment(
    tmp_path: pathlib.Path, monkeypatch
) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "from llome_jax.optimizers import AskTellOptimizer\n"
        "class Mine(AskTellOptimizer):\n"
        "    name = 'mine'\n"
        "    def ask(self, key, state, data, num):\n"
        "        return data.sequences[:0], state\n"
    )
    entry = optimizers.get(f"{path}:Mine")
    assert (entry.name, entry.source) == ("mine", f"{path}:Mine")
    monkeypatch.setenv("LLOME_JAX_OPTIMIZERS", f"{path}:Mine")
    assert optimizers.names()[-1] == "mine" and optimizers.get("mine").name == "mine"
    with pytest.raises(ValueError, match="has no attribute 'Missing'"):
        optimizers.get(f"{path}:Missing")
