"""What a finished run was made from: a plan fingerprint per run, kept in its ``done.json``.

A sweep skips a run whose ``done.json`` exists; after a plan changes (``rounds`` 1 -> 3, a
budget, an override) that would reuse runs made by another plan. So every run the sweep
finishes records :func:`run_fingerprint` and its inputs (:func:`fingerprint_inputs`) in its
``done.json`` (:func:`stamp`, keys :data:`FINGERPRINT` and :data:`INPUTS`, next to
``last_round`` and ``stop_reason``), and :func:`changed_runs` names the finished runs whose
fingerprint differs from the plan's, with the settings that changed. A ``done.json`` written
before fingerprints existed matches only when the run's own ``config.json`` agrees with the
plan on the label budget and the rounds (:func:`legacy_matches`). No JAX at import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from llome_jax.bench.plan import MAX_ROUNDS_FACTOR, RunSpec, Scale, budget_after_round0
from llome_jax.run.files import atomic_write_text

__all__ = [
    "FINGERPRINT",
    "INPUTS",
    "changed_runs",
    "describe_changes",
    "fingerprint_inputs",
    "legacy_matches",
    "run_fingerprint",
    "stamp",
]

#: ``done.json``'s key for the run's plan fingerprint (:func:`run_fingerprint`)
FINGERPRINT = "plan_fingerprint"
#: ``done.json``'s key for the fingerprint's inputs (:func:`fingerprint_inputs`)
INPUTS = "plan_settings"
#: an override that names a directory, not a setting: the same weights may live elsewhere
PATH_OVERRIDES = ("weights",)


def _budget(scale: Scale) -> int:
    """:func:`~llome_jax.bench.plan.budget_after_round0`, once per scale (it builds a preset;
    a scale with an unhashable override value is computed each time)."""
    try:
        return _cached_budget(scale)
    except TypeError:
        return budget_after_round0(scale)


@functools.lru_cache(maxsize=64)
def _cached_budget(scale: Scale) -> int:
    return budget_after_round0(scale)


def fingerprint_inputs(spec: RunSpec, scale: Scale) -> dict[str, Any]:
    """The settings that determine the results of the run ``spec`` at ``scale``, as the sweep
    passes them to the run (JSON-ready).

    Exactly these enter: the run's ``method``, optimizer ``kind`` (``registry:NAME`` or a
    factory ``MODULE:ATTR`` included), ``function``, ``seed`` and LLOME loss ``schedule``; the
    scale's ``rounds`` and the resolved label budget after round 0 (``budget``:
    :func:`~llome_jax.bench.plan.budget_after_round0`); the LLOME preset and overrides
    (``llome_preset``, ``llome_overrides``: every kind reads them, the GA its particles and
    labels per round) without ``weights`` (a directory); and, for a LaMBO-2 run only, the
    LaMBO-2 preset and overrides. Nothing else: not resources, time limits, costs, executors,
    worker counts, compilation caches, environment variables or paths.
    """
    inputs: dict[str, Any] = {
        "method": spec.method,
        "kind": spec.kind,
        "function": spec.function,
        "seed": int(spec.seed),
        "schedule": spec.schedule,
        "rounds": int(scale.rounds),
        "budget": _budget(scale),
        "llome_preset": scale.llome_preset,
        "llome_overrides": _settings(scale.llome_overrides),
    }
    if spec.kind == "lambo2":
        inputs["lambo_preset"] = scale.lambo_preset
        inputs["lambo_overrides"] = _settings(scale.lambo_overrides)
    return json.loads(json.dumps(inputs, sort_keys=True, default=str))


def run_fingerprint(spec: RunSpec, scale: Scale) -> str:
    """The sha256 (hex) of :func:`fingerprint_inputs` as canonical JSON (sorted keys, no
    spaces): equal for two plans exactly when they give the run the same settings."""
    return _digest(fingerprint_inputs(spec, scale))


def stamp(path: str | pathlib.Path, spec: RunSpec, scale: Scale) -> None:
    """Add the run's fingerprint and its inputs to the finished run ``path``'s ``done.json``
    (its other keys kept; written atomically). Nothing happens without a ``done.json``."""
    done = pathlib.Path(path) / "done.json"
    try:
        record = json.loads(done.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(record, dict):
        return
    inputs = fingerprint_inputs(spec, scale)
    record.update({FINGERPRINT: _digest(inputs), INPUTS: inputs})
    atomic_write_text(done, json.dumps(record, indent=1) + "\n")


def legacy_matches(path: str | pathlib.Path, spec: RunSpec, scale: Scale) -> bool:
    """Whether a run finished without a fingerprint (before fingerprints existed) agrees with
    the plan: its ``config.json`` records the plan's label budget, and rounds the plan would
    give it (the scale's, its ``MAX_ROUNDS_FACTOR`` cap, or the GA's rounds of about ``j``
    labels). An unreadable ``config.json`` does not agree."""
    try:
        config = json.loads((pathlib.Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict) or config.get("budget") != _budget(scale):
        return False
    if "rounds" not in config:
        return True
    return config["rounds"] in _planned_rounds(spec, scale)


def changed_runs(
    out: str | pathlib.Path,
    specs: Sequence[RunSpec],
    scale: Scale,
) -> dict[str, str]:
    """Of the finished runs ``specs`` under ``out/runs`` (those with a ``done.json``), each one
    made by other settings than ``scale`` gives it -> the settings that changed (``rounds 1 ->
    2, budget 32 -> 64``; ``""`` when ``done.json`` cannot say, e.g. a run without a
    fingerprint whose ``config.json`` disagrees)."""
    changed: dict[str, str] = {}
    for spec in specs:
        path = pathlib.Path(out) / "runs" / spec.name
        try:
            record = json.loads((path / "done.json").read_text())
        except OSError:
            continue  # not finished
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        stored = record.get(FINGERPRINT)
        if stored is None:
            if not legacy_matches(path, spec, scale):
                changed[spec.name] = _legacy_changes(path, scale)
            continue
        inputs = fingerprint_inputs(spec, scale)
        if stored != _digest(inputs):
            old = record.get(INPUTS)
            changed[spec.name] = describe_changes(old, inputs) if isinstance(old, dict) else ""
    return changed


def describe_changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 4) -> str:
    """The settings that differ between two :func:`fingerprint_inputs`, as ``key old -> new``
    (overrides by their dotted key, e.g. ``overrides.llome.num_seeds 4 -> 8``), at most
    ``limit`` of them and a count of the rest."""
    found = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key.endswith("_overrides") and isinstance(before, dict) and isinstance(after, dict):
            group = f"overrides.{key.removesuffix('_overrides')}"
            for name in sorted(set(before) | set(after)):
                if before.get(name) != after.get(name):
                    found.append(
                        f"{group}.{name} {_show(before.get(name))} -> {_show(after.get(name))}"
                    )
            continue
        found.append(f"{key} {_show(before)} -> {_show(after)}")
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return ", ".join(found[:limit]) + more


def _settings(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    return {str(k): v for k, v in sorted(dict(pairs).items()) if k not in PATH_OVERRIDES}


def _digest(inputs: Mapping[str, Any]) -> str:
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _show(value: Any) -> str:
    return "(none)" if value is None else json.dumps(value, default=str)


def _planned_rounds(spec: RunSpec, scale: Scale) -> set[int]:
    """The ``config.json`` rounds a run of ``spec`` at ``scale`` may record."""
    rounds = {int(scale.rounds), MAX_ROUNDS_FACTOR * int(scale.rounds)}
    if spec.kind == "ga":
        from llome_jax.bench import execution  # lazy: JAX; no JAX at import (module docstring)

        capped = dataclasses.replace(scale, rounds=MAX_ROUNDS_FACTOR * scale.rounds)
        with contextlib.suppress(ValueError, TypeError, KeyError):
            cfg = execution.ga_config(spec, capped, execution.llome_config(spec, capped))
            rounds.add(int(cfg.rounds))
    return rounds


def _legacy_changes(path: pathlib.Path, scale: Scale) -> str:
    """``budget 32 -> 64`` from a run's ``config.json`` (no fingerprint to compare)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return "no config.json"
    budget = config.get("budget") if isinstance(config, dict) else None
    if budget != _budget(scale):
        return f"budget {_show(budget)} -> {_budget(scale)} (config.json)"
    return f"rounds {_show(config.get('rounds'))} (config.json) vs the plan's {scale.rounds}"
