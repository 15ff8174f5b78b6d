"""Blind local search from the command line (``experiments/local_search.py``): runs of the
:class:`~llome_jax.optimizers.LocalSearch` plug-in (the search itself, on the ask/tell base: the
shared round 0, the oracle, resume and the common run directory), one per seed, read back as
rows.

Round 0 is LLOME's (the GA generations and settings of LLOME's ``preset_name`` preset with the
key every optimizer's round 0 uses); its distinct sequences are paid once, as the optimizers
pay, or with ``accounting="every_evaluation"`` ``n0 n`` calls as in the paper. Each later round
labels ``per_round`` new single mutants of the ``incumbents`` best labelled sequences
(:mod:`llome_jax.optimizers.local_search`).
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any, NamedTuple

import numpy as np

from llome_jax import ehrlich
from llome_jax.llome.presets import preset
from llome_jax.optimizers.local_search import LocalSearch, LocalSearchConfig, propose
from llome_jax.run import runner
from llome_jax.run.rundir import RunDirectory

__all__ = ["LocalSearchResult", "config", "propose", "run", "run_directory_run", "seed_data"]


def config(
    function: str,
    instance_seed: int | None,
    seed: int,
    rounds: int,
    per_round: int,
    incumbents: int = 200,
    mutations: int = 1,
    accounting: str = "pay_once",
    preset_name: str = "cpu",
) -> LocalSearchConfig:
    """The plug-in's configuration of one run, round 0 from LLOME's ``preset_name`` preset."""
    llome = preset(preset_name, seed=seed)
    return LocalSearchConfig(
        function=function,
        instance_seed=instance_seed,
        seed=seed,
        rounds=rounds,
        labels_per_round=per_round,
        round0_generations=llome.round0_generations,
        round0_ga=llome.round0_ga,
        accounting=accounting,
        incumbents=incumbents,
        mutations=mutations,
    )


def seed_data(
    function: str,
    instance_seed: int | None,
    seed: int,
    accounting: str = "pay_once",
    preset_name: str = "cpu",
) -> tuple[Any, np.ndarray, np.ndarray, int]:
    """``(fn, sequences [n, L], values [n], labels paid)``: round 0 of run seed ``seed`` as the
    plug-in (every optimizer) pays it: the rows of LLOME's ``preset_name`` GA archive it pays,
    in the order the GA met them (``pay_once``: the distinct sequences, the public start
    sequence known, not paid, and not listed; ``every_evaluation``: ``n0 n`` labels)."""
    import jax

    cfg = config(
        function, instance_seed, seed, 1, 1, accounting=accounting, preset_name=preset_name
    )
    optimizer = LocalSearch(cfg)
    _, result = optimizer.init(jax.random.key(seed))
    fn = ehrlich.resolve_function(function, instance_seed)
    sequences = np.asarray(result.sequences, np.int64)
    return fn, sequences, np.asarray(result.values, np.float64), int(optimizer.oracle.num_paid)


def run(
    function: str,
    instance_seed: int | None,
    seed: int,
    rounds: int,
    per_round: int,
    incumbents: int,
    mutations: int,
    directory: str | pathlib.Path | None = None,
    accounting: str = "pay_once",
    budget: int | None = None,
    preset_name: str = "cpu",
    method: str = "blind local search",
) -> list[list]:
    """One run of the plug-in: a row ``[function, instance, seed, round, labels, min regret,
    improving]`` per round (from its ``rounds.jsonl``), into the run directory ``directory``
    (replaced if it exists; a temporary one without it). With ``budget`` the run pays exactly
    that many labels after round 0 (``rounds`` is then a cap), as the optimizers' ``--budget``."""
    import shutil

    cfg = config(
        function,
        instance_seed,
        seed,
        rounds,
        per_round,
        incumbents,
        mutations,
        accounting,
        preset_name,
    )
    with tempfile.TemporaryDirectory() as scratch:
        path = pathlib.Path(scratch) / "run" if directory is None else pathlib.Path(directory)
        shutil.rmtree(path, ignore_errors=True)
        extra = {"method": method, "round0_preset": preset_name}
        runner.run(LocalSearch(cfg), path, budget=budget, extra_config=extra, progress=False)
        records = RunDirectory(path).rounds()
    return [
        [
            function,
            instance_seed,
            seed,
            int(r["round"]),
            int(r["num_evaluations"]),
            r["min_regret"],
            int(r.get("num_improving") or 0),
        ]
        for r in records
    ]


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
    """One run into ``path`` paying exactly ``budget`` labels after the shared round 0 (the
    paper driver's ``local search`` method before it ran the plug-in itself). A run takes
    seconds, so an unfinished one (``resume``) is made again from the start."""
    rows = run(
        function,
        None,
        seed,
        -(-budget // per_round),
        per_round,
        incumbents,
        mutations,
        path,
        budget=budget,
        preset_name=preset_name,
        method="local search",
    )
    return LocalSearchResult(pathlib.Path(path), rows)
