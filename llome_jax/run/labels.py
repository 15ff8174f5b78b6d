"""How a run is named from its ``config.json``: the method (``GA``, ``LaMBO-2``,
``LLOME-MargE``) and what it optimised (``f2``, ``Ehr(8,16)-2-4-4 (instance seed 3)``).

One naming for every reader of run directories: the run's own plot
(:mod:`llome_jax.run.plotting`), ``llome-jax compare`` (:mod:`llome_jax.compare` re-exports both)
and the paper driver's report.
"""

from __future__ import annotations

from typing import Any

__all__ = ["method_label", "problem_text"]

_OPTIMIZER_LABELS = {"ga": "GA", "lambo2": "LaMBO-2"}
_LOSS_LABELS = {"sft": "SFT", "marge": "MargE", "dpo": "DPO", "reinforce": "REINFORCE"}


def method_label(config: dict[str, Any]) -> str:
    """A run's method name from its ``config.json``: the ``method`` it was given, else
    ``GA``, ``LaMBO-2`` or ``LLOME-<losses>`` from the LLOME schedule (``sft:1,marge:9`` ->
    ``LLOME-SFT1-MargE9``; one loss after a single SFT round -> ``LLOME-MargE``)."""
    if config.get("method"):
        return str(config["method"])
    optimizer = config.get("optimizer")
    if optimizer in _OPTIMIZER_LABELS:
        return _OPTIMIZER_LABELS[optimizer]
    if optimizer != "llome":
        return str(optimizer or "unknown")
    phases = []
    for part in str(config.get("schedule", "")).split(","):
        name, _, count = part.strip().partition(":")
        if name:
            phases.append((_LOSS_LABELS.get(name, name), count))
    if len(phases) == 2 and phases[0] == ("SFT", "1"):
        return f"LLOME-{phases[1][0]}"  # the format-learning SFT round, then one loss
    if len(phases) == 1:
        return f"LLOME-{phases[0][0]}"
    return "LLOME-" + "-".join(f"{name}{count}" for name, count in phases)


def problem_text(config: dict[str, Any]) -> str:
    """What a run optimised, from its ``config.json``: ``"f2"``, ``"Ehr(8,16)-2-4-4 (instance
    seed 3)"`` or ``"objective module:attr"``."""
    if config.get("objective"):
        return f"objective {config['objective']}"
    seed = config.get("instance_seed")
    return str(config.get("function")) + ("" if seed is None else f" (instance seed {seed})")
