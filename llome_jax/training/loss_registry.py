"""The loss registry: one :class:`LossSpec` per loss, everything else derives from it.

A spec says what a LLOME round trains the loss on, with which optimizer, and how the loop's
settings reach its hyper-parameters; configs, schedules and the CLI accept every registered name
(BUILD.md §3.6, and §4 "A loss"). Importing this module registers the paper's four
losses (:mod:`llome_jax.training.losses`) with their default hyper-parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from llome_jax.training.loss_inputs import LossParams
from llome_jax.training.losses import LossFn, dpo_loss, marge_loss, reinforce_loss, sft_loss

__all__ = [
    "DEFAULT_PARAMS",
    "LINEAR_IN_POLICY",
    "LOSSES",
    "LOSS_SPECS",
    "LossSpec",
    "default_params",
    "get_loss",
    "loss_spec",
    "register_loss",
    "unregister_loss",
]


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """Everything the rest of the package needs to know about a loss (``register_loss``).

    Attributes:
      name: the name configs and ``--schedule`` use.
      fn: the loss function (the signature of :class:`~llome_jax.training.losses.LossFn`).
      params: its default :class:`LossParams` (paper / reference values).
      data: what a LLOME round trains it on: ``"pairs"`` (PropEn pairs, a unit is a sequence)
        or ``"triples"`` (preference triples, a unit is a chosen/rejected pair; LLOME's
        ``dpo_learning_rate``, ``dpo_warmup_steps`` and ``dpo_compute_dtype`` apply).
      optimizer: the paper's optimizer for it (``train_optimizer.paper_optimizer``):
        ``"adamw"`` (AdamW, lr 1e-6, weight decay 0.01) or ``"rmsprop"`` (torch RMSprop, lr 1e-7,
        150 warm-up steps).
      linear_in_policy: the loss is linear in ``policy.sum_logp`` with policy-independent
        coefficients, so gradient accumulation needs one pass (``train.make_train_step``).
      uses_reference: it reads the reference log-probs (else a round skips computing them).
      kl_weighted: ``LoopConfig.finetune.kl_weight`` overrides its ``kl_weight`` and
        ``finetune.reward_beta`` its ``beta`` (the KL-regularised reward losses, MargE and
        REINFORCE).
      weight_norm: ``LoopConfig.finetune.marge_weight_norm`` sets its ``weights_sum_to_one``
        (MargE and REINFORCE: the appendix's self-normalised ``w~`` is one definition for both).
    """

    name: str
    fn: LossFn
    params: LossParams
    data: str = "pairs"
    optimizer: str = "adamw"
    linear_in_policy: bool = False
    uses_reference: bool = True
    kl_weighted: bool = False
    weight_norm: bool = False

    def __post_init__(self) -> None:
        if self.data not in ("pairs", "triples"):
            raise ValueError(f"LossSpec.data must be 'pairs' or 'triples'; got {self.data!r}")
        if self.optimizer not in ("adamw", "rmsprop"):
            raise ValueError(
                f"LossSpec.optimizer must be 'adamw' or 'rmsprop'; got {self.optimizer!r}"
            )


#: name -> :class:`LossSpec` of every registered loss.
LOSS_SPECS: dict[str, LossSpec] = {}


def register_loss(spec: LossSpec) -> LossSpec:
    """Add a loss to the registry (then configs, schedules and the CLI accept its name).

    Raises:
      ValueError: a loss of that name is already registered.
    """
    if spec.name in LOSS_SPECS:
        raise ValueError(f"a loss named {spec.name!r} is already registered")
    LOSS_SPECS[spec.name] = spec
    return spec


def unregister_loss(name: str) -> None:
    """Remove a registered loss (tests, interactive experiments)."""
    LOSS_SPECS.pop(name, None)


def loss_spec(name: str) -> LossSpec:
    """The spec of a registered loss, with a helpful error for unknown names."""
    try:
        return LOSS_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSS_SPECS)}") from None


class _View(Mapping[str, Any]):
    """A live read-only view ``name -> attribute of its spec`` of the registry."""

    def __init__(self, attribute: str) -> None:
        self._attribute = attribute

    def __getitem__(self, name: str) -> Any:
        return getattr(LOSS_SPECS[name], self._attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(LOSS_SPECS)

    def __len__(self) -> int:
        return len(LOSS_SPECS)


class _LinearInPolicy:
    """Live set of the loss functions whose spec says ``linear_in_policy``."""

    def __contains__(self, fn: object) -> bool:
        return any(s.fn is fn and s.linear_in_policy for s in LOSS_SPECS.values())

    def __iter__(self) -> Iterator[LossFn]:
        return iter([s.fn for s in LOSS_SPECS.values() if s.linear_in_policy])


#: name -> loss function (a view of the registry). A config string selects one.
LOSSES: Mapping[str, LossFn] = _View("fn")

#: name -> default hyper-parameters (a view of the registry).
DEFAULT_PARAMS: Mapping[str, LossParams] = _View("params")

#: The loss functions that are linear in ``policy.sum_logp`` (a view of the registry).
LINEAR_IN_POLICY = _LinearInPolicy()


def get_loss(name: str) -> LossFn:
    """``LOSSES[name]`` with a helpful error for unknown names."""
    return loss_spec(name).fn


def default_params(name: str) -> LossParams:
    """The default :class:`LossParams` for a registered loss."""
    return loss_spec(name).params


# The paper's losses. Default hyper-parameters: LLOME appendix "LLM Training Details" and the
# authors' f2 configs (MargE alpha 1 and KL weight 10, DPO beta 0.4); fields a loss does not use
# stay at the LossParams defaults.
register_loss(
    LossSpec(
        "sft", sft_loss, LossParams(token_mean=1.0), linear_in_policy=True, uses_reference=False
    )
)
register_loss(
    LossSpec(
        "dpo",
        dpo_loss,
        LossParams(beta=0.4, label_smoothing=0.0),
        data="triples",
        optimizer="rmsprop",
    )
)
register_loss(
    LossSpec(
        "marge",
        marge_loss,
        LossParams(beta=1.0, kl_weight=10.0, self_normalize=1.0, stop_weight_gradient=0.0),
        kl_weighted=True,
        weight_norm=True,
    )
)
register_loss(
    LossSpec(
        "reinforce",
        reinforce_loss,
        LossParams(beta=1.0, kl_weight=10.0, self_normalize=1.0, stop_weight_gradient=1.0),
        kl_weighted=True,
        # the same w~ as MargE: "For both MargE and REINFORCE, we applied self-normalization"
        # (appendix "Self-Normalization"), so ``marge_weight_norm`` sets both
        weight_norm=True,
    )
)
