"""Adding a loss is a one-file change: register a spec, and schedules, configs, the optimizer
choice and a LLOME round all accept it."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest

from llome_jax.llome import loop
from llome_jax.llome.config import parse_schedule
from llome_jax.llome.presets import preset
from llome_jax.training import loss_inputs, loss_registry, losses
from llome_jax.training import optimizer as train_optimizer

CALLS: list[str] = []


def toy_loss(policy, reference, batch, hparams):  # a weighted SFT, for the registry test
    CALLS.append("traced")  # runs at trace time: proves the round's train step used this loss
    per_unit, metrics = losses.sft_loss(policy, reference, batch, hparams)
    return 2.0 * per_unit, metrics


@pytest.fixture
def toy() -> Iterator[loss_registry.LossSpec]:
    spec = loss_registry.register_loss(
        loss_registry.LossSpec(
            "toy", toy_loss, loss_inputs.LossParams(token_mean=1.0), uses_reference=False
        )
    )
    yield spec
    loss_registry.unregister_loss("toy")


def test_registered_loss_runs_a_llome_round(
    toy: loss_registry.LossSpec, tmp_path: pathlib.Path
) -> None:
    assert parse_schedule("sft:1,toy:1") == (("sft", 1), ("toy", 1))
    assert (
        loss_registry.LOSSES["toy"] is toy_loss
        and loss_registry.default_params("toy") is toy.params
    )
    assert train_optimizer.paper_optimizer("toy", 10).name == "adamw"
    CALLS.clear()
    cfg = preset("smoke", schedule=(("sft", 1), ("toy", 1)), rounds=2)
    result = loop.run(cfg, tmp_path / "run", progress=False)
    records = [json.loads(x) for x in (result.path / "rounds.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in records] == ["ga", "sft", "toy"]
    assert CALLS  # the toy loss was traced into round 2's train step


def test_registry_refuses_duplicates_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="already registered"):
        loss_registry.register_loss(
            loss_registry.LossSpec("marge", toy_loss, loss_inputs.LossParams())
        )
    with pytest.raises(ValueError, match="unknown loss 'toy'"):
        parse_schedule("sft:1,toy:1")
    with pytest.raises(ValueError, match="unknown loss"):
        train_optimizer.paper_optimizer("toy", 10)
    with pytest.raises(ValueError, match="'pairs' or 'triples'"):
        loss_registry.LossSpec("x", toy_loss, loss_inputs.LossParams(), data="quads")


def test_specs_of_the_paper_losses() -> None:
    """The four paper losses: what each trains on and with (appendix "LLM Training Details")."""
    table = {
        name: (s.data, s.optimizer, s.linear_in_policy, s.uses_reference, s.kl_weighted)
        for name, s in loss_registry.LOSS_SPECS.items()
    }
    assert table == {
        "sft": ("pairs", "adamw", True, False, False),
        "marge": ("pairs", "adamw", False, True, True),
        "reinforce": ("pairs", "adamw", False, True, True),
        "dpo": ("triples", "rmsprop", False, True, False),
    }
    assert set(loss_registry.LINEAR_IN_POLICY) == {losses.sft_loss}
