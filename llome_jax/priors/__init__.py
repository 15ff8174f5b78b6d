"""Pretrained LLOME policies shipped with the package (``llome-jax pretrain`` outputs).

A prior is a small GPT-NeoX (Pythia) checkpoint on the Ehrlich tokenizer: ``config.json``,
``model.safetensors``, the tokenizer files and ``pretrain.json`` (how it was made: the Ehrlich
configuration, the instance seeds, all >= 1,000,000 so that no benchmark instance was seen, the
steps and the CPU seconds). ``LoopConfig.weights = "prior:NAME"`` (or ``llome --weights
prior:NAME``) loads one; the ``cpu-pretrained`` preset uses :data:`DEFAULT`. A run refuses a
prior of another configuration or one pretrained on its own instance
(``llome_jax.llome.config.check_prior_fits``, which reads :func:`provenance`).

Catalogue (``NAME``: the configuration it was pretrained on)::

    ehr32-32-4-4-4   Ehr(32,32)-4-4-4, the configuration of the paper's f2
    ehr32-64-4-4-4   Ehr(32,64)-4-4-4, the same with sequences twice as long
"""

from __future__ import annotations

import json
import pathlib

__all__ = ["DEFAULT", "PREFIX", "PRIORS", "is_prior", "provenance", "resolve", "shipped_for"]

#: ``weights`` values starting with this name a shipped prior.
PREFIX = "prior:"
#: the shipped priors' names (each one's pretrain.json says what it was pretrained on).
PRIORS: tuple[str, ...] = ("ehr32-32-4-4-4", "ehr32-64-4-4-4")
#: The prior of the ``cpu-pretrained`` preset.
DEFAULT = "ehr32-32-4-4-4"


def is_prior(weights: str | None) -> bool:
    """Whether a ``weights`` value names a shipped prior (``"prior:NAME"``)."""
    return isinstance(weights, str) and weights.startswith(PREFIX)


def resolve(weights: str) -> pathlib.Path:
    """The directory of ``"prior:NAME"``.

    Raises:
      ValueError: an unknown name, or the prior's files are missing from this installation.
    """
    name = weights[len(PREFIX) :] if is_prior(weights) else weights
    if name not in PRIORS:
        raise ValueError(f"unknown prior {name!r}; shipped priors: {sorted(PRIORS)}")
    directory = pathlib.Path(__file__).resolve().parent / name
    if not (directory / "config.json").is_file():
        raise ValueError(f"prior {name!r}: {directory} is missing from this installation")
    return directory


def provenance(directory: str | pathlib.Path) -> dict:
    """How the checkpoint in ``directory`` was pretrained: its ``pretrain.json`` (``function``,
    ``instance_seeds`` ``{first, last, count}``, ``text_format``, steps, seconds), or ``{}`` for
    a checkpoint that ``llome-jax pretrain`` did not make (e.g. a Pythia download)."""
    path = pathlib.Path(directory) / "pretrain.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def shipped_for(configuration: str) -> list[str]:
    """The shipped priors pretrained on ``configuration`` (an ``Ehr(v,L)-c-k-q`` name)."""
    return [n for n in PRIORS if provenance(resolve(n)).get("function") == configuration]
