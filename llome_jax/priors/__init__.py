"""Pretrained LLOME policies shipped with the package (``llome-jax pretrain`` outputs).

A prior is a small GPT-NeoX (Pythia) checkpoint on the Ehrlich tokenizer: ``config.json``,
``model.safetensors``, the tokenizer files and ``pretrain.json`` (how it was made: the Ehrlich
configuration, the instance seeds, all >= 1,000,000 so that no benchmark instance was seen, the
``label_digests`` of those instances, the steps and the CPU seconds, and ``sha256`` of
``model.safetensors``; ``llome_jax.llome.pretrain`` writes it). ``LoopConfig.weights =
"prior:NAME"`` (or ``llome --weights prior:NAME``) loads one (:func:`resolve` checks the weights
against their recorded sha256); the ``cpu-pretrained`` preset uses :data:`DEFAULT`. A run refuses
a prior of another configuration or one pretrained on its own instance
(``llome_jax.llome.config.check_prior_fits``, which reads :func:`provenance` and asks
:func:`pretrained_instance`).

**The pretraining guard** (:func:`pretrained_instance`). The instances a prior saw are
``s = first .. last`` of one configuration. An instance given by seed is refused when ``s`` is in
that range. Any instance, by seed or from a ``.json`` file, is also refused when its
:func:`~llome_jax.ehrlich.instances.label_digest` (what decides every label: configuration,
feasible transitions, motifs and spacings) equals the digest of one of the pretraining
instances: ``pretrain.json`` records, in seed order, the first 16 hex digits (64 bits) of each
one's label digest (19 bytes an instance; a false refusal of an unseen instance has probability
about ``count / 2**64``). A prior without ``label_digests`` (made before they were recorded) can
check a seed only: it refuses an instance of its configuration given without a seed unless that
is one of the paper's shipped instances.

Catalogue (``NAME``: the configuration it was pretrained on)::

    ehr32-32-4-4-4   Ehr(32,32)-4-4-4, the configuration of the paper's f2
    ehr32-64-4-4-4   Ehr(32,64)-4-4-4, the same with sequences twice as long
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from llome_jax.ehrlich.instances import label_digest, paper_function, paper_function_names

__all__ = [
    "DEFAULT",
    "DIGEST_DIGITS",
    "PREFIX",
    "PRIORS",
    "WEIGHTS_FILE",
    "is_prior",
    "pretrained_instance",
    "provenance",
    "resolve",
    "shipped_for",
    "verify_weights",
    "weights_sha256",
]

#: ``weights`` values starting with this name a shipped prior.
PREFIX = "prior:"
#: the shipped priors' names (each one's pretrain.json says what it was pretrained on).
PRIORS: tuple[str, ...] = ("ehr32-32-4-4-4", "ehr32-64-4-4-4")
#: The prior of the ``cpu-pretrained`` preset.
DEFAULT = "ehr32-32-4-4-4"
#: The weights file whose sha256 ``pretrain.json`` records (``"sha256": {WEIGHTS_FILE: hex}``).
WEIGHTS_FILE = "model.safetensors"
#: Hex digits of each pretraining instance's label digest kept in ``label_digests`` (64 bits).
DIGEST_DIGITS = 16


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
    verify_weights(directory)
    return directory


def weights_sha256(directory: str | pathlib.Path) -> str:
    """The sha256 (hex) of ``directory``'s :data:`WEIGHTS_FILE`."""
    return hashlib.sha256((pathlib.Path(directory) / WEIGHTS_FILE).read_bytes()).hexdigest()


def verify_weights(directory: str | pathlib.Path) -> None:
    """Check ``directory``'s weights against the sha256 its ``pretrain.json`` records (nothing to
    check without one).

    Raises:
      ValueError: the weights file is missing or its sha256 differs (a damaged installation).
    """
    directory = pathlib.Path(directory)
    recorded = provenance(directory).get("sha256", {}).get(WEIGHTS_FILE)
    if recorded is None:
        return
    if not (directory / WEIGHTS_FILE).is_file():
        raise ValueError(f"prior {directory}: {WEIGHTS_FILE} is missing")
    actual = weights_sha256(directory)
    if actual != recorded:
        raise ValueError(
            f"prior {directory}: {WEIGHTS_FILE} has sha256 {actual[:12]}..., but pretrain.json "
            f"records {recorded[:12]}...: the weights are not the ones pretrained; reinstall"
        )


def provenance(directory: str | pathlib.Path) -> dict:
    """How the checkpoint in ``directory`` was pretrained: its ``pretrain.json`` (``function``,
    ``instance_seeds`` ``{first, last, count}``, ``text_format``, steps, seconds), or ``{}`` for
    a checkpoint that ``llome-jax pretrain`` did not make (e.g. a Pythia download)."""
    path = pathlib.Path(directory) / "pretrain.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def pretrained_instance(
    made: Mapping[str, Any], function: Any = None, instance_seed: int | None = None
) -> int | None:
    """The seed of the pretraining instance that the run's instance is, or ``None`` (module
    docstring, "The pretraining guard").

    Args:
      made: the prior's ``pretrain.json`` (:func:`provenance`).
      function: the run's Ehrlich instance (``None``: only ``instance_seed`` is checked).
      instance_seed: the run's instance seed (``None``: a paper instance or an instance file).

    Returns:
      ``instance_seed`` when it lies in ``made["instance_seeds"]``; else, when the label digest
      of ``function`` is one of ``made["label_digests"]``, the seed of that instance; else
      ``None`` (also for an instance of another configuration).

    Raises:
      ValueError: ``made`` has no ``label_digests``, ``function`` is of its configuration, was
        given without a seed and is not one of the paper's instances: it cannot be checked.
    """
    seeds = made.get("instance_seeds") or {}
    first, last = seeds.get("first"), seeds.get("last")
    if function is not None and made.get("function") != function.name:
        return None
    if instance_seed is not None and first is not None and first <= instance_seed <= last:
        return int(instance_seed)
    if function is None:
        return None
    digest = label_digest(function).removeprefix("sha256:")[:DIGEST_DIGITS]
    digests = made.get("label_digests")
    if digests is None:
        if instance_seed is None and digest not in _paper_label_digests():
            raise ValueError(
                "its pretrain.json records no label_digests of the instances it was pretrained "
                "on (made before they were recorded), so an instance given without "
                "--instance-seed cannot be checked against them; give the instance as "
                "--function 'Ehr(v,L)-c-k-q' --instance-seed N, or pretrain the prior again"
            )
        return None
    if digest in digests:
        return int(first) + list(digests).index(digest)
    return None


def _paper_label_digests() -> set[str]:
    """Label digests (first :data:`DIGEST_DIGITS` hex digits) of the paper's shipped instances."""
    return {
        label_digest(paper_function(name)).removeprefix("sha256:")[:DIGEST_DIGITS]
        for name in paper_function_names()
    }


def shipped_for(configuration: str) -> list[str]:
    """The shipped priors pretrained on ``configuration`` (an ``Ehr(v,L)-c-k-q`` name)."""
    return [n for n in PRIORS if provenance(resolve(n)).get("function") == configuration]
