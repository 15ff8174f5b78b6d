"""The paper's exact Ehrlich instances (shipped as package data) and name resolution.

The paper's four test functions f1-f4 and two q=2 variants are pytorch-holo instances with
``random_seed=50494`` generated under torch 2.3.1; they cannot be regenerated with a current torch,
so their explicit form is stored in ``data/paper_instances.json``.

:func:`function_digest` identifies the instance behind a CLI function spec (its arrays and start
sequence, not its name): a run directory records it, so a resume on another instance (an instance
file replaced under the same name) is refused.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ehrlich.config import (
    MAX_INSTANCE_SEED,
    EhrlichConfig,
    InvalidEhrlichNameError,
    check_instance_seed,
    is_rmf_name,
)
from llome_jax.ehrlich.dispatch import validate_tokens
from llome_jax.ehrlich.function import Ehrlich, from_holo, make
from llome_jax.ehrlich.solutions import initial_solution

__all__ = [
    "MAX_INSTANCE_SEED",
    "PAPER_FUNCTIONS",
    "check_instance_seed",
    "configuration_name",
    "function_digest",
    "instance_digest",
    "label_digest",
    "paper_function",
    "paper_function_names",
    "paper_initial_solution",
    "resolve_function",
    "resolve_initial_solution",
]

_DATA = pathlib.Path(__file__).with_name("data") / "paper_instances.json"

#: Short names used in the paper and the Ehr names of the six shipped instances.
PAPER_FUNCTIONS: dict[str, str] = {
    "f1": "Ehr(8,128)-8-8-8",
    "f2": "Ehr(32,32)-4-4-4",
    "f3": "Ehr(32,128)-4-4-4",
    "f4": "Ehr(32,128)-8-8-8",
    "Ehr(32,32)-4-4-2": "Ehr(32,32)-4-4-2",
    "Ehr(32,128)-4-4-2": "Ehr(32,128)-4-4-2",
}


@functools.cache
def _records() -> dict[str, dict]:
    raw = json.loads(_DATA.read_text())
    by_name = {}
    for stem, record in raw.items():
        cfg = record["config"]
        config = EhrlichConfig(
            num_states=cfg["num_states"],
            dim=cfg["dim"],
            num_motifs=cfg["num_motifs"],
            motif_length=cfg["motif_length"],
            quantization=cfg["quantization"],
            epistasis_factor=cfg["epistasis_factor"],
        )
        record = dict(record, stem=stem, config_obj=config)
        by_name[config.name] = record
    return by_name


def paper_function_names() -> list[str]:
    """Names accepted by :func:`paper_function` (short names first)."""
    return list(PAPER_FUNCTIONS)


def configuration_name(function: str) -> str:
    """The Ehrlich configuration of a function name, without building an instance: a paper
    short name maps to its configuration (``"f2"`` -> ``"Ehr(32,32)-4-4-4"``), an
    ``Ehr(v,L)-c-k-q`` name is normalised (``"Ehr( 32, 64 )-4-4-4"`` -> ``"Ehr(32,64)-4-4-4"``).

    Raises:
      ValueError: neither (e.g. an instance ``.json`` file).
    """
    name = str(function).strip()
    return EhrlichConfig.from_name(PAPER_FUNCTIONS.get(name, name)).name


def _lookup(name: str) -> dict:
    records = _records()
    key = PAPER_FUNCTIONS.get(name)
    if key is None:
        try:
            key = EhrlichConfig.from_name(name).name
        except ValueError:
            stems = {r["stem"]: n for n, r in records.items()}
            key = stems.get(name.split("__")[0])
    if key is None or key not in records:
        raise ValueError(
            f"unknown paper function {name!r}; choose one of {paper_function_names()} "
            "(or use make(key, EhrlichConfig.from_name(...)) for a new instance)."
        )
    return records[key]


@functools.cache
def paper_function(name: str) -> Ehrlich:
    """The paper's exact instance: ``"f1"``-``"f4"``, ``"Ehr(32,32)-4-4-2"`` or ``"Ehr(32,128)-4-4-2"``."""
    record = _lookup(name)
    cfg = record["config_obj"]
    return from_holo(
        record["transition_matrix"],
        record["motifs"],
        record["spacings_holo"],
        quantization=cfg.quantization,
        epistasis_factor=cfg.epistasis_factor,
        dim=cfg.dim,
        stationary_dist=record["stationary_dist"],
    )


def paper_initial_solution(name: str) -> jax.Array:
    """The start sequence the paper's GA used for this instance: int32 ``[L]``."""
    return jnp.asarray(_lookup(name)["initial_solution"], jnp.int32)


def resolve_function(spec: str, instance_seed: int | None = None) -> Ehrlich:
    """Resolve a CLI-style function spec.

    * a paper name (``f1``..``f4`` or one of the six shipped Ehr names) without ``instance_seed``:
      the paper's exact instance;
    * any ``Ehr(v,L)-c-k-q`` name with ``instance_seed``: ``make(jax.random.key(seed), config)``;
    * a ``.json`` file written by ``Ehrlich.to_json`` / ``llome-jax ehrlich describe --json``.

    * a Rough Mt. Fuji name (``rmf``, ``RMF(L)``, ``RMF(L,a,sigma)``): its
      :class:`~llome_jax.rough_mt_fuji.RoughMtFuji` instance
      (:func:`llome_jax.rough_mt_fuji.resolve_function`; not an Ehrlich instance).

    Raises:
      ValueError: for an unknown name, an Ehr name that is neither shipped nor seeded, or an
        ``instance_seed`` outside ``[0, 2**31)`` (:func:`check_instance_seed`).
      FileNotFoundError: a ``.json`` path that does not exist.
    """
    if is_rmf_name(spec):
        # lazy: llome_jax.rough_mt_fuji imports llome_jax.ehrlich (dispatch, config), whose
        # __init__ imports this module
        from llome_jax.rough_mt_fuji import instances as rmf

        return rmf.resolve_function(spec, instance_seed)  # type: ignore[return-value]
    if str(spec).endswith(".json"):
        if instance_seed is not None:
            raise ValueError("an instance file is one instance: drop --instance-seed")
        return Ehrlich.from_json(_read_instance(spec))
    if instance_seed is None:
        try:
            return paper_function(spec)
        except ValueError:
            try:
                EhrlichConfig.from_name(spec)
            except InvalidEhrlichNameError:
                raise  # a name, but of no possible function: its own reason, seed or not
            except ValueError:
                raise ValueError(
                    f"unknown function {spec!r}: use one of {paper_function_names()} or an "
                    "'Ehr(v,L)-c-k-q' name with --instance-seed."
                ) from None
            raise ValueError(
                f"{spec!r} is not one of the paper's instances; pass --instance-seed N to sample one."
            ) from None
    seed = check_instance_seed(instance_seed)
    if spec in PAPER_FUNCTIONS and spec.startswith("f"):
        spec = PAPER_FUNCTIONS[spec]
    return _sampled_function(EhrlichConfig.from_name(spec), seed)


@functools.lru_cache(maxsize=16)
def _sampled_function(config: EhrlichConfig, instance_seed: int) -> Ehrlich:
    """``make(key(instance_seed), config)``, kept: sampling an instance takes seconds on a CPU,
    and a run resolves its function more than once (plug-in, start sequence, digest)."""
    return make(jax.random.key(instance_seed), config)


@functools.lru_cache(maxsize=16)
def _sampled_initial_solution(config: EhrlichConfig, instance_seed: int) -> jax.Array:
    fn = _sampled_function(config, instance_seed)
    key = jax.random.fold_in(jax.random.key(instance_seed), 0x1A1)
    return initial_solution(key, fn, 1)[0]


def _read_instance(path: str) -> dict:
    file = pathlib.Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"instance file {file} does not exist")
    return json.loads(file.read_text())


def resolve_initial_solution(spec: str, instance_seed: int | None = None) -> jax.Array:
    """The start sequence for ``resolve_function(spec, instance_seed)``.

    For an instance file: its ``initial_solution`` if it has one, else a chain sample (key 0).

    The paper's stored GA start for its instances; for a sampled instance, one chain sample from the
    stationary law keyed by the instance seed (like holo's ``initial_solution()``, a property of
    the function, not of the run). int32 ``[L]``.
    """
    if is_rmf_name(spec):
        # lazy: llome_jax.rough_mt_fuji imports llome_jax.ehrlich (dispatch, config), whose
        # __init__ imports this module
        from llome_jax.rough_mt_fuji import instances as rmf

        return jnp.asarray(rmf.resolve_initial_solution(spec, instance_seed))
    if str(spec).endswith(".json"):
        fn = resolve_function(spec)
        stored = _read_instance(spec).get("initial_solution")
        if stored is not None:
            return validate_tokens(fn, np.asarray(stored, np.int32)[None], what="initial_solution")[
                0
            ]
        return initial_solution(jax.random.fold_in(jax.random.key(0), 0x1A1), fn, 1)[0]
    if instance_seed is None:
        return paper_initial_solution(spec)
    fn = resolve_function(spec, instance_seed)
    return _sampled_initial_solution(fn.config, int(instance_seed))


def instance_digest(fn: Ehrlich, initial_solution: Any = None) -> str:
    """``"sha256:<hex>"`` of what defines an instance: the data of :meth:`Ehrlich.to_json`
    (configuration, transition matrix, stationary law, motifs, offsets; not the schema tag) as
    canonical JSON, and the start sequence when given. Equal instances give equal digests on any
    machine; any changed value gives another one."""
    data = {key: value for key, value in fn.to_json().items() if key != "schema"}
    if initial_solution is not None:
        data["initial_solution"] = np.asarray(initial_solution).astype(int).tolist()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def label_digest(fn: Ehrlich) -> str:
    """``"sha256:<hex>"`` of what decides every label of an instance, and nothing else.

    ``f(x) = 1[A[x_t, x_t+1] > 0 for all t] * prod_i q(h(x, m_i, s_i))`` (paper Sec. 2, "Ehrlich
    functions"): the configuration ``(v, L, c, k, q, epistasis)``, the support ``A > 0`` of the
    transition matrix and the motif/spacing pairs ``(m_i, s_i)``, sorted (the product does not
    depend on their order). Not the transition probabilities or the stationary law (they shape
    only the start sequence and how the motifs were drawn) and not the start sequence, so an
    instance file of a function under another start sequence, or with probabilities rounded
    differently, has the same label digest: two instances with equal label digests give every
    sequence the same label. What the pretraining guard compares
    (``llome_jax.priors.pretrained_instance``)."""
    data = fn.to_json()
    pairs = sorted(zip(data["motifs"], data["offsets"], strict=True))
    canonical = {
        "config": data["config"],
        "feasible_transitions": (np.asarray(fn.transition_matrix) > 0).astype(int).tolist(),
        "motifs_offsets": [[list(m), list(o)] for m, o in pairs],
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def function_digest(spec: str, instance_seed: int | None = None) -> str:
    """:func:`instance_digest` of ``resolve_function(spec, instance_seed)`` with its start
    sequence (``resolve_initial_solution``): what a run on this CLI function spec optimises.

    Raises:
      ValueError / FileNotFoundError: as :func:`resolve_function`.
    """
    if is_rmf_name(spec):
        # lazy: llome_jax.rough_mt_fuji imports llome_jax.ehrlich (dispatch, config), whose
        # __init__ imports this module
        from llome_jax.rough_mt_fuji import instances as rmf

        return rmf.function_digest(spec, instance_seed)
    return instance_digest(
        resolve_function(spec, instance_seed), resolve_initial_solution(spec, instance_seed)
    )
