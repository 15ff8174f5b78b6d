"""Random local search from the same seed data: how far do unguided single mutants get?

A diagnostic baseline for the LLOME and LaMBO-2 plateaus (docs/experiments.md) and the paper
driver's ``local search`` method. Round 0 is the GA seed data LLOME uses (``ga_loop.run_archive``
with the LLOME run key's ``"ga"`` key: 10 generations of 1,000; its distinct sequences are paid
once, as the optimizers pay, or with ``accounting="every_evaluation"`` 10,000 calls as in the
paper). Each later round labels ``per_round`` new sequences, each a uniformly random
substitution (``mutations`` positions, a different state each) of a uniformly chosen incumbent
among the ``incumbents`` best labelled sequences (ties at the cut broken at random); sequences
already labelled are never proposed again. Nothing is learnt: the question is how often a blind
edit of the incumbents improves them, at the same label budget as the optimizers.
``experiments/local_search.py`` is its command line.
"""

from __future__ import annotations

import pathlib
from typing import NamedTuple

import numpy as np

__all__ = ["LocalSearchResult", "propose", "run", "run_directory_run", "seed_data"]


def seed_data(
    function: str,
    instance_seed: int | None,
    seed: int,
    accounting: str = "pay_once",
    preset_name: str = "cpu",
):
    """``(fn, sequences [n, L], values [n], labels paid)``: LLOME's round 0 for run seed
    ``seed`` (the GA generations and settings of LLOME's ``preset_name`` preset, the key every
    optimizer's round 0 uses, ``runner.round0_key``).

    ``accounting`` as the optimizers' (``llome_jax.oracle``): ``"pay_once"`` pays the archive's
    distinct sequences, the public start sequence excluded; ``"every_evaluation"`` the paper's
    ``n0 n`` calls, duplicates included."""
    import jax

    from llome_jax import ehrlich, ga_loop
    from llome_jax.llome.presets import preset
    from llome_jax.runner import round0_key

    cfg = preset(preset_name, seed=seed)
    fn = ehrlich.resolve_function(function, instance_seed)
    x0 = ehrlich.resolve_initial_solution(function, instance_seed)
    key = round0_key(jax.random.key(seed))
    archive = ga_loop.run_archive(key, fn, x0, cfg.ga_generations, cfg.ga)
    sequences, values, _ = archive.to_numpy()
    if accounting == "every_evaluation":
        calls = cfg.ga_generations * cfg.ga.num_particles  # duplicates included (the paper)
    else:
        calls = int(np.sum(~(sequences == np.asarray(x0)).all(axis=1)))
    return fn, np.asarray(sequences, np.int64), np.asarray(values, np.float64), calls


def propose(
    rng: np.random.Generator,
    sequences: np.ndarray,
    values: np.ndarray,
    seen: set[bytes],
    num: int,
    incumbents: int,
    mutations: int,
    num_states: int,
) -> np.ndarray:
    """``num`` new distinct sequences, each ``mutations`` random substitutions of one of the
    ``incumbents`` best labelled sequences (ties at the cut broken at random)."""
    order = rng.permutation(len(values))
    order = order[np.argsort(-values[order], kind="stable")][:incumbents]
    top = sequences[order]
    length = sequences.shape[1]
    out: list[np.ndarray] = []
    stale = 0
    while len(out) < num:
        if stale == 20:
            raise ValueError(
                f"only {len(out)} of {num} new sequences found around the {len(top)} incumbents."
            )
        found = len(out)
        parents = top[rng.integers(0, len(top), 4 * num)]
        children = parents.copy()
        rows = np.arange(len(children))
        for _ in range(mutations):
            position = rng.integers(0, length, len(children))
            shift = rng.integers(1, num_states, len(children))  # a different state
            children[rows, position] = (children[rows, position] + shift) % num_states
        for child in children:
            key = child.astype(np.uint8).tobytes()
            if key not in seen:
                seen.add(key)
                out.append(child)
                if len(out) == num:
                    break
        stale = stale + 1 if len(out) == found else 0
    return np.stack(out)


def run(
    function,
    instance_seed,
    seed,
    rounds,
    per_round,
    incumbents,
    mutations,
    directory=None,
    accounting="pay_once",
    budget=None,
    preset_name="cpu",
) -> list[list]:
    """One run: a row ``[function, instance, seed, round, labels, min regret, improving]`` per
    round; with ``directory`` (a ``RunDirectory``) also its ``rounds.jsonl`` and
    ``evaluated.csv``, as the optimizers write them. With ``budget`` the run pays exactly that
    many labels after round 0 (its last round proposes only what is left; ``rounds`` is then a
    cap), as the optimizers' ``--budget``."""
    from llome_jax import ehrlich

    fn, sequences, values, evaluations = seed_data(
        function, instance_seed, seed, accounting, preset_name
    )
    rng = np.random.default_rng(1_000 + seed)
    seen = {s.astype(np.uint8).tobytes() for s in sequences}
    optimum = float(fn.optimal_value)
    best = float(values.max())
    rows = [[function, instance_seed, seed, 0, evaluations, optimum - best, 0]]
    if directory is not None:
        from llome_jax import ehrlich as _ehrlich

        x0 = np.asarray(_ehrlich.resolve_initial_solution(function, instance_seed))
        paid = ~(sequences == x0).all(axis=1) if accounting == "pay_once" else slice(None)
        directory.log_evaluated(0, sequences[paid], values[paid])
    paid = 0
    for index in range(1, rounds + 1):
        size = per_round if budget is None else min(per_round, budget - paid)
        if size <= 0:
            break
        paid += size
        batch = propose(
            rng, sequences, values, seen, size, incumbents, mutations, fn.config.num_states
        )
        new = np.asarray(ehrlich.evaluate(fn, batch.astype(np.int32)), np.float64)
        improving = int((new > best).sum())
        sequences, values = np.concatenate([sequences, batch]), np.concatenate([values, new])
        best = float(values.max())
        evaluations += size
        rows.append([function, instance_seed, seed, index, evaluations, optimum - best, improving])
        if directory is not None:
            directory.log_evaluated(index, batch, new)
    if directory is not None:
        for row in rows:
            directory.log_round(
                {
                    "round": row[3],
                    "num_evaluations": row[4],
                    "min_regret": row[5],
                    "best_value": optimum - row[5],
                    "num_improving": row[6],
                }
            )
    return rows


class LocalSearchResult(NamedTuple):
    """What :func:`run_directory_run` returns (``stop_reason`` as the round driver's)."""

    path: pathlib.Path
    rows: list
    stop_reason: str = ""


def run_directory_run(
    function: str,
    seed: int,
    path: pathlib.Path,
    *,
    budget: int,
    resume: bool = False,
    per_round: int = 2000,
    incumbents: int = 200,
    mutations: int = 1,
    preset_name: str = "cpu",
) -> LocalSearchResult:
    """One run into the run directory ``path`` (the optimizers' layout, ``config.json`` with
    ``"method": "local search"`` and ``"budget"``), paying exactly ``budget`` labels after the
    shared round 0: what the paper driver runs for its ``local search`` method. A run takes
    seconds, so an unfinished one (``resume``) is made again from the start (the same
    seeds give the same run)."""
    import shutil

    from llome_jax.rundir import RunDirectory

    if resume:
        shutil.rmtree(path, ignore_errors=True)
    config = {
        "optimizer": "local_search",
        "method": "local search",
        "function": function,
        "instance_seed": None,
        "seed": seed,
        "incumbents": incumbents,
        "mutations": mutations,
        "per_round": per_round,
        "accounting": "pay_once",
        "budget": budget,
        "rounds": -(-budget // per_round),
        "round0_preset": preset_name,
    }
    directory = RunDirectory.create(path, config)
    rows = run(
        function,
        None,
        seed,
        config["rounds"],
        per_round,
        incumbents,
        mutations,
        directory,
        budget=budget,
        preset_name=preset_name,
    )
    return LocalSearchResult(directory.path, rows)
