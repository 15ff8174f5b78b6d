"""The training pool of a pretraining run: instances, vmapped GA archives, PropEn pairs.

What LLOME trains on in a run, for ``n`` instances of one configuration at once::

    seeds    s_i = first_instance_seed + i,  i < num_instances,  s_i >= 1,000,000
    f_i, x0_i    = ehrlich.resolve_function(name, s_i), resolve_initial_solution(name, s_i)
                   (the instance ``llome --function NAME --instance-seed s_i`` would optimise)
    A_i          = GA archive of n0 generations from x0_i       (ga_archives: jit(vmap) over i)
    P_i          = propen_pairs(A_i)  capped at max_pairs_per_instance (uniform or balanced over
                   the target's value level)
    D            = concat_i P_i        every instance's pairs in one shuffled pool per epoch

:func:`generate_data` builds ``D`` (:class:`PretrainData`, the run directory's ``data.npz``);
``llome_jax.llome.pretrain`` trains on it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich, ga
from llome_jax.ga import loop as ga_loop
from llome_jax.llome.data import propen_pairs, random_bits
from llome_jax.llome.finetune import subset
from llome_jax.llome.pretrain_config import PretrainConfig
from llome_jax.llome.runtime import named_key
from llome_jax.run.runner import progress_bar

__all__ = [
    "PretrainData",
    "balanced_subset",
    "ga_archives",
    "generate_data",
    "instance_keys",
    "make_instances",
]


def make_instances(cfg: PretrainConfig, progress: bool = False) -> tuple[list[Any], np.ndarray]:
    """The instances and start sequences of ``cfg.instance_seeds``: ``([Ehrlich] * n,
    int32 [n, L])``, each exactly what ``--function cfg.function --instance-seed s`` resolves.

    Host code (``ehrlich.make`` checks ergodicity and solves for the stationary law in NumPy),
    one instance at a time; the GA that follows runs vmapped over them (:func:`ga_archives`).
    """
    fns, x0s = [], []
    with progress_bar(progress, total=cfg.num_instances, desc="instances", unit="inst") as bar:
        for seed in cfg.instance_seeds:
            try:
                fns.append(ehrlich.resolve_function(cfg.function, seed))
            except ValueError as error:
                raise ValueError(f"instance seed {seed} of {cfg.function}: {error}") from None
            x0s.append(np.asarray(ehrlich.resolve_initial_solution(cfg.function, seed)))
            bar.update(1)
    return fns, np.stack(x0s).astype(np.int32)


def instance_keys(key: jax.Array, seeds: Any) -> jax.Array:
    """One key per instance, ``fold_in(key, s)``: an instance's data depend on the run seed and
    its own seed only (not on how many instances there are): typed keys ``[n]``."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.asarray(seeds, jnp.uint32))


@functools.partial(jax.jit, static_argnames=("num_generations", "config"))
def ga_archives(
    keys: jax.Array, fns: Any, x0s: jax.Array, num_generations: int, config: ga.GAConfig
) -> ga_loop.GAArchive:
    """``ga_loop.run_archive`` of every instance in one jitted call, vmapped over instances.

    Args:
      keys: typed keys ``[m]``.
      fns: ``m`` Ehrlich instances of one configuration stacked leaf by leaf (``[m, ...]``).
      x0s: int32 ``[m, L]`` start sequences.
      num_generations: ``n0`` (static).
      config: the GA (static).

    Returns:
      a ``GAArchive`` with leaves ``[m, n0 n, ...]`` and ``count [m]``; row ``i`` equals
      ``ga_loop.run_archive(keys[i], fn_i, x0s[i], n0, config)`` (tested).
    """

    def one(key: jax.Array, fn: Any, x0: jax.Array) -> ga_loop.GAArchive:
        state, key_run = ga_loop.start(key, fn, x0, config)
        keys_run = jax.random.split(key_run, num_generations)
        _, (_, populations, values) = ga_loop.advance(
            state, keys_run, fn, config, keep_populations=True
        )
        return ga_loop.archive_from_trajectory(populations, values, fn.config.num_states)

    return jax.vmap(one)(keys, fns, x0s)


def _stack(items: list[Any]) -> Any:
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *items)


def balanced_subset(key: jax.Array, values: Any, limit: int | None) -> np.ndarray:
    """``min(n, limit)`` indices with equal shares per distinct value (sorted).

    Rows are ranked within their value group in a random order, then taken by rank (all rank-0
    rows first, then rank 1, ...; ties of rank in random order): a group smaller than its share
    is taken whole and the rest is shared by the others. All rows, in order, if within
    ``limit``.

    Example: 90 rows of value a and 10 of b, limit 20: 10 of each.
    """
    values = np.asarray(values)
    n = values.shape[0]
    if limit is None or n <= limit:
        return np.arange(n, dtype=np.int64)
    bits = random_bits(key, n)
    order = np.argsort(bits, kind="stable")  # a random order of the rows
    _, group = np.unique(values[order], return_inverse=True)
    by_group = np.argsort(group, kind="stable")  # grouped, random order within each group
    starts = np.searchsorted(group[by_group], group[by_group], side="left")
    rank = np.empty(n, np.int64)
    rank[by_group] = np.arange(n) - starts
    taken = order[np.argsort(rank, kind="stable")[:limit]]
    return np.sort(taken).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class PretrainData:
    """The training pool (numpy; ``P`` pairs) and per-instance statistics (``n`` instances).

    Attributes:
      inputs / targets: int32 ``[P, L]`` the worse and the better sequence of each pair.
      reward: float32 ``[P]`` margin reward ``max(f(y) - f(x), 0)``.
      input_value / target_value: float32 ``[P]`` (``-inf``: infeasible input).
      instance: int32 ``[P]`` index of the pair's instance in ``seeds``.
      seeds: int64 ``[n]`` instance seeds.
      archive_size: int64 ``[n]`` distinct GA sequences per instance.
      best_value: float32 ``[n]`` best GA value per instance.
      num_candidates: int64 ``[n]`` PropEn pairs before the cap; num_pairs: kept.
    """

    inputs: np.ndarray
    targets: np.ndarray
    reward: np.ndarray
    input_value: np.ndarray
    target_value: np.ndarray
    instance: np.ndarray
    seeds: np.ndarray
    archive_size: np.ndarray
    best_value: np.ndarray
    num_candidates: np.ndarray
    num_pairs: np.ndarray

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def save(self, path: str | os.PathLike) -> None:
        """Write ``.npz`` atomically (temporary file + rename)."""
        path = pathlib.Path(path)
        temporary = path.with_name(f".{path.name}.tmp.npz")
        small = np.uint8 if int(self.inputs.max(initial=0)) < 256 else np.int16
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        arrays["inputs"] = self.inputs.astype(small)
        arrays["targets"] = self.targets.astype(small)
        np.savez(temporary, **arrays)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> PretrainData:
        with np.load(path) as data:
            arrays = {f.name: data[f.name] for f in dataclasses.fields(cls)}
        arrays["inputs"] = arrays["inputs"].astype(np.int32)
        arrays["targets"] = arrays["targets"].astype(np.int32)
        return cls(**arrays)

    def stats(self) -> dict[str, Any]:
        """Summary numbers (``summary.json``)."""
        return {
            "num_pairs": len(self),
            "pairs_per_instance": {
                "min": int(self.num_pairs.min()),
                "median": float(np.median(self.num_pairs)),
                "max": int(self.num_pairs.max()),
            },
            "archive_size_median": float(np.median(self.archive_size)),
            "best_ga_value_median": float(np.median(self.best_value)),
            "instances_without_pairs": int(np.sum(self.num_pairs == 0)),
        }


def generate_data(key: jax.Array, cfg: PretrainConfig, progress: bool = False) -> PretrainData:
    """The pool of ``cfg``: GA archives of every instance (:func:`ga_archives`, in chunks of
    ``instances_per_call``; the last chunk padded with copies so that one shape compiles), then
    PropEn pairs per instance, capped (``max_pairs_per_instance``, ``pair_sampling``).

    ``key`` is the run key ``jax.random.key(cfg.seed)``; instance ``s`` uses
    ``fold_in(named_key(key, "ga"), s)`` for its GA and ``fold_in(named_key(key, "loop"), s)``
    for its pairs (:func:`instance_keys`).

    Raises:
      ValueError: no instance yields a pair.
    """
    fns, x0s = make_instances(cfg, progress)
    seeds = np.asarray(cfg.instance_seeds, np.int64)
    ga_keys = instance_keys(named_key(key, "ga"), seeds)
    pair_keys = instance_keys(named_key(key, "loop"), seeds)
    num_states = fns[0].config.num_states
    n, chunk = len(fns), min(cfg.instances_per_call, len(fns))
    inputs, targets, reward, v_in, v_out, owner = [], [], [], [], [], []
    stats = {k: np.zeros(n, t) for k, t in _STATS.items()}
    with progress_bar(progress, total=n, desc="GA + pairs", unit="inst") as bar:
        for start in range(0, n, chunk):
            rows = [min(i, n - 1) for i in range(start, start + chunk)]  # pad with the last
            archives = ga_archives(
                ga_keys[np.asarray(rows)],
                _stack([fns[i] for i in rows]),
                jnp.asarray(x0s[rows]),
                cfg.ga_generations,
                cfg.ga,
            )
            counts = np.asarray(archives.count)
            sequences, values = np.asarray(archives.sequences), np.asarray(archives.values)
            for j, i in enumerate(range(start, min(start + chunk, n))):
                x, v = sequences[j, : counts[j]], values[j, : counts[j]]
                k_pairs, k_cap = jax.random.split(pair_keys[i])
                pairs = propen_pairs(k_pairs, x, v, cfg.propen, num_states=num_states)
                limit = cfg.max_pairs_per_instance
                if cfg.pair_sampling == "balanced":
                    kept = balanced_subset(k_cap, pairs.target_value, limit)
                else:
                    kept = subset(k_cap, len(pairs), limit)
                pairs = pairs.select(kept)
                a, b = pairs.gather(x)
                inputs.append(a)
                targets.append(b)
                reward.append(pairs.reward)
                v_in.append(pairs.input_value)
                v_out.append(pairs.target_value)
                owner.append(np.full(len(pairs), i, np.int32))
                stats["archive_size"][i] = x.shape[0]
                stats["best_value"][i] = v.max() if v.size else -np.inf
                stats["num_candidates"][i] = pairs.num_candidates
                stats["num_pairs"][i] = len(pairs)
                bar.update(1)
    data = PretrainData(
        inputs=np.concatenate(inputs).astype(np.int32),
        targets=np.concatenate(targets).astype(np.int32),
        reward=np.concatenate(reward).astype(np.float32),
        input_value=np.concatenate(v_in).astype(np.float32),
        target_value=np.concatenate(v_out).astype(np.float32),
        instance=np.concatenate(owner),
        seeds=seeds,
        **stats,
    )
    if len(data) == 0:
        raise ValueError(
            f"no PropEn pairs in the GA data of {n} instance(s): run more GA generations or "
            "particles, or more instances"
        )
    return data


_STATS = {
    "archive_size": np.int64,
    "best_value": np.float32,
    "num_candidates": np.int64,
    "num_pairs": np.int64,
}
