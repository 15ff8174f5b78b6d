"""LaMBO-2's configuration: :class:`Lambo2Config` and its named presets (``PRESETS``, :func:`preset`).

Re-exported by :mod:`llome_jax.lambo2.optimizer`, where the plug-in that runs it lives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from llome_jax import configs
from llome_jax.lambo2 import design as lambo_design
from llome_jax.lambo2 import model as lambo_model
from llome_jax.lambo2 import train as lambo_train
from llome_jax.optimizers.base import BenchmarkSettings

__all__ = ["KEY_DERIVATIONS", "PRESETS", "Lambo2Config", "preset"]


#: ``Lambo2Config.keys`` values.
KEY_DERIVATIONS = ("shared", "v1")


@dataclasses.dataclass(frozen=True)
class Lambo2Config(BenchmarkSettings):
    """Everything that defines a LaMBO-2 run (static, hashable, JSON-serialisable): the shared
    settings (:class:`~llome_jax.optimizers.base.BenchmarkSettings`) and LaMBO-2's own.

    Attributes:
      function / instance_seed: the Ehrlich function (``f1``..``f4``, a paper name, or
        ``Ehr(v,L)-c-k-q`` with ``instance_seed``).
      seed: run seed (GA, model init, samplers, design).
      rounds: LaMBO-2 rounds ``R`` after the GA seed rounds.
      labels_per_round: ``n`` proposals (oracle calls) per round [2000].
      alpha: FFT expansion factor (paper 0.25: top ``alpha n`` seeds tiled).
      round0_generations / round0_ga: the GA pre-solver (paper 10 generations of 1000,
        mutation 0.005; LLOME's round 0, so that both can start from one).
      model_preset / model_overrides: :meth:`ModelConfig.preset` name and field overrides.
      train / design: :class:`TrainConfig`, :class:`DesignConfig`.
      warm_start: each round's fit starts from the previous round's fitted weights (fresh Adam
        state and learning-rate schedule) instead of from ``θ0``, the initial fit, as cortex and
        poli-baselines do (off: the reference behaviour; the paper does not say).
      accounting: "pay_once" (default: a proposal already labelled is looked up, not paid, and
        joins the history once; round 0 pays the GA's distinct sequences) or "every_evaluation"
        (the paper's: every proposal paid and appended, round 0 pays ``n0 n``);
        ``llome_jax.oracle``.
      constraint_queries: "off" (default: no ``is_feasible`` call) or "free": proposals are
        screened with ``is_feasible`` (counted) and infeasible ones are not labelled.
      keys: how the run key is split. ``"shared"`` (default): round 0's GA draws from
        ``runner.round0_key`` like every other optimizer's (same seed, same seed sequences),
        and round ``r`` from ``fold_in(fold_in(key, 4), r)``; ``"v1"``: the derivation of runs
        made before one round 0 (GA ``fold_in(fold_in(key, 0), 0)``, round ``r``
        ``fold_in(key, r)``), so that those resume as they ran.

    Old names (``config_version`` 6 and before): ``num_samples`` is ``labels_per_round``,
    ``ga_generations`` ``round0_generations``, ``ga_particles`` ``round0_ga.num_particles`` and
    ``ga_mutation_prob`` ``round0_ga.mutation_prob`` (accepted with a note).
    """

    RENAMED_SETTINGS: ClassVar[Mapping[str, str]] = {
        "num_samples": "labels_per_round",
        "ga_generations": "round0_generations",
        "ga_particles": "round0_ga.num_particles",
        "ga_mutation_prob": "round0_ga.mutation_prob",
    }

    alpha: float = 0.25
    model_preset: str = "paper"
    model_overrides: tuple[tuple[str, Any], ...] = ()
    train: lambo_train.TrainConfig = dataclasses.field(default_factory=lambo_train.TrainConfig)
    design: lambo_design.DesignConfig = dataclasses.field(default_factory=lambo_design.DesignConfig)
    warm_start: bool = False
    keys: str = "shared"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.keys not in KEY_DERIVATIONS:
            raise ValueError(f"keys must be one of {KEY_DERIVATIONS}; got {self.keys!r}.")
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {self.alpha!r}.")

    def model_config(self, num_states: int, length: int) -> lambo_model.ModelConfig:
        return lambo_model.ModelConfig.preset(
            self.model_preset, num_states, length, **dict(self.model_overrides)
        )

    def replace(self, **overrides: Any) -> Lambo2Config:
        """This configuration with settings replaced (dotted keys such as ``train.epochs`` or
        nested dicts; ``llome_jax.configs.override``)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        out = configs.to_dict(self)
        out["model_overrides"] = dict(self.model_overrides)
        return out


#: Named configurations. ``smoke``: a pipeline check of about a minute on 2 cores, most of it
#: compiling (tiny model, 32 proposals, LLOME's smoke problem ``Ehr(8,8)-2-2-2`` and round 0);
#: ``cpu``: the paper's
#: protocol on f2 (10 GA generations of 1000, 10 rounds of 2000) with a smaller CNN
#: (32/32/32, 54,663 parameters) and E = 16 (bbo-bench's value; E = 8 left the MLM head too
#: weak: 0 % feasible proposals on f2) so that a round takes minutes on 2 cores; ``paper``: the
#: paper's settings.
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {
        # LLOME's smoke problem and round 0 (2 GA generations of 200, mutation 0.1), so that
        # smoke runs of the three optimizers compare (``llome-jax compare``)
        "function": "Ehr(8,8)-2-2-2",
        "instance_seed": 1,
        "labels_per_round": 32,
        "rounds": 2,
        "round0_generations": 2,
        "round0_ga": {"num_particles": 200, "mutation_prob": 0.1},
        "model_preset": "tiny",
        "train": {"epochs": 2, "batch_size": 16},
        "design": {"num_steps": 4, "num_mutations": 2, "guidance_updates": 2},
    },
    "cpu": {
        "model_preset": "cpu",
        "train": {"epochs": 16},
    },
    "paper": {},
}


def preset(name: str, **overrides: Any) -> Lambo2Config:
    """A :class:`Lambo2Config` from ``PRESETS[name]``, then ``overrides`` (dotted keys or nested
    dicts: ``train``/``design`` given as dicts update the preset's; ``configs.override``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
    return Lambo2Config().replace(**PRESETS[name]).replace(**overrides)
