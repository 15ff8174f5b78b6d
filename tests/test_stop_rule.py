"""LLOME's stop rule sized to the preset (issue 62): a round that generates fewer unique valid
candidates than ``LoopConfig.min_candidates`` stops the run. The paper's n_s = 200 is for its
200 x 10 x (1 + 6 x 10) = 122,000 outputs a round; ``min_unique_rule="scaled"`` keeps that
ratio, ``"paper"`` keeps 200 whatever a round generates, an explicit count overrides both."""

from __future__ import annotations

import pytest

from llome_jax.llome import presets
from llome_jax.llome.config import PAPER_OUTPUTS_PER_ROUND, LoopConfig
from llome_jax.run.migrations import LLOME_MIGRATIONS, migrate


def test_the_paper_round_is_122000_outputs() -> None:
    assert PAPER_OUTPUTS_PER_ROUND == 122_000
    paper = presets.preset("paper", weights="/nonexistent")
    assert paper.outputs_per_round == 122_000 and paper.min_candidates == 200


@pytest.mark.parametrize(
    ("overrides", "outputs", "threshold"),
    [
        ({}, 20_000, 33),  # cpu: 200 x 4 x (1 + 6 x 4); ceil(200 x 20,000 / 122,000) = ceil(32.8)
        ({"min_unique_rule": "paper"}, 20_000, 200),  # six times stricter than the paper's
        ({"min_unique_candidates": 7}, 20_000, 7),
        ({"refine.num_iterations": 10, "refine.num_samples": 10}, 122_000, 200),
        ({"num_seeds": 100}, 10_000, 9),  # ceil(100 x 10,000 / 122,000) = ceil(8.2)
    ],
)
def test_the_threshold_keeps_the_papers_ratio(overrides, outputs, threshold) -> None:
    cfg = presets.preset("cpu").replace(**overrides)
    assert (cfg.outputs_per_round, cfg.min_candidates) == (outputs, threshold)


def test_a_run_from_before_the_rule_resumes_with_the_papers_threshold() -> None:
    old = {**LoopConfig().to_dict(), "config_version": 6}  # written before v7, the stop rule
    del old["min_unique_rule"]
    assert migrate(old, LLOME_MIGRATIONS)["min_unique_rule"] == "paper"
    with pytest.raises(ValueError, match="min_unique_rule must be one of"):
        LoopConfig(min_unique_rule="half")
