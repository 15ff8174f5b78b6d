"""The GA difficulty sweep (paper App. A, Fig. "difficulty"; the paper driver's figure 10).

Starting from a reference configuration, each parameter (``v``, ``L``, ``c``, ``k``, ``q``) is
varied on its own; for every setting the paper's GA (n = 1000, alpha = 0.1, p_m = 0.005,
p_r = 0.0882) runs on several instances (instance seed = run seed, so the spread covers both the
function and the optimizer's randomness), all seeds of one setting vmapped in a single jitted
call. When ``k`` varies, ``q`` follows it (``q = k``, the reference's dense signal), since ``q``
must lie in ``[1, k]``. ``experiments/ga_difficulty.py`` draws the same sweep on its own.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich, ga
from llome_jax.bench.plan import Scale
from llome_jax.bench.results import write_csv
from llome_jax.ga import loop as ga_loop

__all__ = ["REFERENCE", "VARIATIONS", "run_difficulty", "run_setting", "sweep_settings"]

REFERENCE = ehrlich.EhrlichConfig(
    num_states=32, dim=32, num_motifs=2, motif_length=4, quantization=4
)
#: parameter symbol -> (``EhrlichConfig`` field, the values it takes)
VARIATIONS: dict[str, tuple[str, list[int]]] = {
    "v": ("num_states", [8, 32, 128]),
    "L": ("dim", [16, 32, 128]),
    "c": ("num_motifs", [1, 2, 4]),
    "k": ("motif_length", [2, 4, 8]),
    "q": ("quantization", [1, 2, 4]),
}


def run_setting(config: ehrlich.EhrlichConfig, seeds: list[int], generations: int) -> np.ndarray:
    """Best value so far per generation, ``[seeds, generations]``, one instance per seed."""
    instances, starts = [], []
    for seed in seeds:
        key = jax.random.key(seed)
        instance = ehrlich.make(key, config)
        instances.append(instance)
        starts.append(ehrlich.initial_solution(jax.random.fold_in(key, 0x1A1), instance, 1)[0])
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *instances)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 7))(jnp.asarray(seeds))
    runner = jax.jit(
        jax.vmap(lambda k, f, x0: ga_loop.run(k, f, x0, generations, ga.GAConfig())[1])
    )
    trace = runner(keys, stacked, jnp.stack(starts))
    return np.asarray(trace.best_value)


def sweep_settings(scale: Scale) -> dict[str, object]:
    """What a sweep's ``curves.csv`` was made with (``settings.json`` beside it): the seeds,
    the generations, the reference configuration, the variations and the GA's settings."""
    return {
        "seeds": list(range(scale.difficulty_seeds)),
        "generations": scale.difficulty_generations,
        "reference": REFERENCE.name,
        "variations": {symbol: [field, values] for symbol, (field, values) in VARIATIONS.items()},
        "ga": dataclasses.asdict(ga.GAConfig()),
    }


def run_difficulty(scale: Scale, path: pathlib.Path) -> str:
    """The GA difficulty sweep of the paper driver (figure 10) into ``path/curves.csv``, at the
    scale's generations and seeds, with ``path/settings.json`` (:func:`sweep_settings`).
    Skipped (``"skipped"``) when both exist and the settings are the scale's; re-run whole
    (``"re-run: ..."``, naming what changed) when they differ or a sweep from before
    ``settings.json`` has none; each setting is a few seconds at smoke scale, under a minute at
    cpu scale, so the sweep restarts as a whole. Returns ``"new"`` for a first sweep."""
    import json

    wanted = sweep_settings(scale)
    settings = path / "settings.json"
    how = "new"
    if (path / "curves.csv").exists():
        saved = json.loads(settings.read_text()) if settings.exists() else None
        if saved == wanted:
            return "skipped"
        if saved is None:
            how = "re-run: the sweep recorded no settings"
        else:
            changed = sorted(k for k in wanted if saved.get(k) != wanted[k])
            how = "re-run: " + ", ".join(
                f"{k} {_short(saved.get(k))} -> {_short(wanted[k])}" for k in changed
            )
    path.mkdir(parents=True, exist_ok=True)
    seeds = list(range(scale.difficulty_seeds))
    rows, cache = [], {}
    for symbol, (field, values) in VARIATIONS.items():
        for value in values:
            changes = {field: value}
            if field == "motif_length":
                changes["quantization"] = value
            config = dataclasses.replace(REFERENCE, **changes)
            if config not in cache:  # the reference setting recurs in every variation
                cache[config] = run_setting(config, seeds, scale.difficulty_generations)
            best = cache[config]
            for seed, row in zip(seeds, best):
                for g, b in enumerate(row, start=1):
                    rows.append(
                        [symbol, value, config.name, seed, g, 1000 * g, repr(1.0 - float(b))]
                    )
    header = ["parameter", "value", "config", "seed", "generation", "num_evaluations", "min_regret"]
    partial = path / "curves.partial.csv"
    write_csv(partial, header, rows)
    settings.write_text(json.dumps(wanted, indent=1, sort_keys=True) + "\n")
    partial.replace(path / "curves.csv")
    return how


def _short(value: object) -> str:
    """A setting's value in a message: a run of seeds as ``0-7``."""
    if isinstance(value, list) and value and value == list(range(value[0], value[0] + len(value))):
        return f"{value[0]}-{value[-1]}" if len(value) > 1 else str(value[0])
    return str(value)
