"""The weights a pretraining run exports and their record, ``pretrain.json``.

:func:`export_weights` writes the final model where ``llome-jax llome --weights DIR`` loads it;
:func:`weights_info` gives its ``pretrain.json``, every field from the code, nothing by hand:
``function``, ``text_format``, ``model``, ``loss``, ``seed``, ``instance_seeds`` {first, last,
count}, ``label_digests`` (:func:`label_digests`: the first 16 hex digits of
``ehrlich.instances.label_digest`` of each instance, in seed order: what the prior guard
``llome_jax.priors.pretrained_instance`` compares), ``num_pairs`` (the pool's PropEn pairs),
``steps``, ``final_loss_mean`` (mean loss over the last epoch's steps), ``seconds`` /
``seconds_data``, ``command`` / ``commit`` / ``dirty`` / ``versions`` / ``device`` (the
invocation that exported the weights, ``llome_jax.run.provenance``), ``provenance`` (every
invocation of the run), ``run_directory`` and ``sha256`` ``{"model.safetensors": hex}``
(:func:`export_weights`; ``llome_jax.priors.verify_weights`` checks it).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Mapping
from typing import Any

import jax

from llome_jax import ehrlich
from llome_jax.ehrlich.instances import label_digest
from llome_jax.llome.pretrain_config import PretrainConfig, run_config
from llome_jax.llome.runtime import model_with
from llome_jax.lm import convert
from llome_jax.priors import DIGEST_DIGITS
from llome_jax.run.files import atomic_write_text
from llome_jax.run.runner import progress_bar

__all__ = ["export_weights", "label_digests", "weights_info"]


def label_digests(cfg: PretrainConfig, progress: bool = False) -> list[str]:
    """``pretrain.json``'s ``label_digests``: for each instance seed in order, the first
    ``priors.DIGEST_DIGITS`` (16) hex digits of ``ehrlich.instances.label_digest`` of its
    instance (what decides its labels), so that the prior guard recognises a pretraining
    instance however it is given (seed or ``.json`` file). Resolves every instance again
    (host code, about a second each on a CPU, as
    :func:`~llome_jax.llome.pretrain_data.make_instances`)."""
    out = []
    with progress_bar(progress, total=cfg.num_instances, desc="digests", unit="inst") as bar:
        for seed in cfg.instance_seeds:
            fn = ehrlich.resolve_function(cfg.function, seed)
            out.append(label_digest(fn).removeprefix("sha256:")[:DIGEST_DIGITS])
            bar.update(1)
    return out


def export_weights(
    rt: Any, params: Any, directory: str | os.PathLike, info: Mapping[str, Any]
) -> pathlib.Path:
    """Write the model with ``params`` where ``llome-jax llome --weights DIR`` loads it.

    ``DIR`` holds ``config.json`` (Hugging Face GPT-NeoX, what ``--weights`` checks),
    ``llome_pythia.json`` + ``params/`` (the orbax checkpoint ``lm.convert.from_pretrained``
    loads), ``model.safetensors`` (the same weights for ``transformers``), the tokenizer files and
    ``pretrain.json``: ``info`` plus ``"sha256": {"model.safetensors": hex}`` of the bytes written
    (``llome_jax.priors.verify_weights`` checks it). Written to a temporary directory and renamed.
    """
    import hashlib

    from safetensors.numpy import save

    directory = pathlib.Path(directory)
    temporary = directory.with_name(f".{directory.name}.tmp")
    if temporary.exists():
        shutil.rmtree(temporary)
    model = model_with(rt.model, jax.device_get(params))
    convert.save_converted(model, temporary)
    tokenizer = rt.codec.tokenizer
    hf = convert.hf_config_dict(model.config)
    hf.update(
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    atomic_write_text(temporary / "config.json", json.dumps(hf, indent=2) + "\n")
    # serialised here and written as an ordinary new file: safetensors' save_file makes it 0o600
    blob = save(convert.hf_tensors(model))
    (temporary / "model.safetensors").write_bytes(blob)
    tokenizer.save_pretrained(str(temporary))
    info = {**info, "sha256": {"model.safetensors": hashlib.sha256(blob).hexdigest()}}
    atomic_write_text(temporary / "pretrain.json", json.dumps(info, indent=1) + "\n")
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)
    return directory


#: ``versions`` of ``pretrain.json``: these entries of the exporting invocation's provenance.
_VERSION_KEYS = (
    "llome_jax",
    "python",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
)


def weights_info(
    cfg: PretrainConfig,
    config: Mapping[str, Any],
    *,
    digests: list[str],
    num_pairs: int,
    steps: int,
    final_loss_mean: float | None,
    seconds: float,
    run_directory: str | os.PathLike,
) -> dict[str, Any]:
    """``pretrain.json`` (module docstring) but its ``sha256`` (:func:`export_weights` adds it):
    the configuration, seeds and ``label_digests``, the pool's pair count, steps, final loss and
    seconds, and the provenance of the run directory's ``config`` (its last invocation, the one
    that exports, gives ``command``, ``commit``, ``dirty``, ``versions`` and ``device``)."""
    import shlex

    invocations = list(config.get("provenance") or [])
    last = invocations[-1] if invocations else {}
    argv = list(last.get("command") or [])
    command = shlex.join([pathlib.Path(argv[0]).name, *argv[1:]]) if argv else None
    device = (
        f"{last['devices']} x {last['device_kind']} ({last['backend']})"
        if {"devices", "device_kind", "backend"} <= last.keys()
        else None
    )
    seconds_data = config.get("seconds_data")
    return {
        "function": cfg.function,
        "text_format": cfg.text_format,
        "model": cfg.model,
        "loss": cfg.loss,
        "seed": cfg.seed,
        "instance_seeds": run_config(cfg)["instance_seeds"],
        "label_digests": list(digests),
        "num_pairs": int(num_pairs),
        "steps": int(steps),
        "final_loss_mean": final_loss_mean,
        "seconds": round(float(seconds), 3),
        "seconds_data": None if seconds_data is None else round(float(seconds_data), 3),
        "command": command,
        "commit": last.get("commit"),
        "dirty": last.get("dirty"),
        "versions": {key: last.get(key) for key in _VERSION_KEYS},
        "device": device,
        "provenance": invocations,
        "run_directory": str(pathlib.Path(run_directory).absolute()),
    }
