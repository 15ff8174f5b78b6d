"""LLOME training data: PropEn pairs (SFT / MargE), preference triples (DPO), train/val split.

Paper: App. "Algorithms", Alg. DatasetFormatting and App. "Dataset Formatting" (adapted from
PropEn, Tagasovska et al. 2024). Reference: the authors' ``synthetic_dataset_formatter.py``
(differences in docs/design/llome_data.md). Values follow the library's convention: **higher is
better** and infeasible sequences have ``f = -inf`` (NaN is read as infeasible too).

Given labelled sequences ``S = {(x_i, f(x_i))}`` and the within-threshold nearest-neighbour lists
``N(i)`` (``k_n = 30`` slots including ``x_i`` itself, fractional Hamming ``d <= Delta_x = 0.25``;
see :mod:`llome_jax.llome.neighbours`):

* **PropEn pairs** (paper default, ``symmetric=False``)::

      D = {(x_i, x_j) : x_j in N(i), f(x_j) > f(x_i)}        # x_i the input, x_j the target

  The reference (``symmetric=True``) uses the union of both kNN directions:
  ``{(x_i, x_j) : (x_j in N(i) or x_i in N(j)), f(x_j) > f(x_i)}``, each unordered pair once.
  Equal values (including two infeasible sequences) never form a pair; a target is never
  infeasible; an input may be.
* **Preference triples**::

      T = {(x_i, x_j, x_k) : x_j, x_k in N(i), f(x_j) > f(x_i) >= f(x_k)}

  (prompt, chosen, rejected); since ``x_i in N(i)``, the prompt itself can be the rejected one.
* **Infeasible inputs capped** (reference ``filter_infeasible_examples``): with ``F`` examples
  whose input (prompt) is feasible, keep all of them plus a uniform random subset of at most
  ``round(F * p / (1 - p))`` examples whose input is infeasible (``p = 0.1``), then shuffle.
* **Margin reward** of each example, ``r = max(f(y) - f(x), 0)`` with infeasible values counted as
  ``0`` (paper Sec. 3.3: "we set f(x) = 0 for all infeasible x"), as MargE consumes it.

Everything here runs between rounds on host data, so results are numpy arrays whose lengths depend
on the data; index arrays point into the ``sequences`` / ``values`` the caller passed. Rows are
deduplicated first (keep the first occurrence): later duplicates never appear in the output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.llome.neighbours import HammingNeighbours, hamming_neighbours, padded_size
from llome_jax.metrics import rows_in  # re-exported: its home is llome_jax.metrics
from llome_jax.training.loss_inputs import margin_reward

__all__ = [
    "PreferenceTriples",
    "PropEnConfig",
    "PropEnPairs",
    "cap_infeasible_inputs",
    "first_occurrences",
    "preference_triples",
    "propen_pairs",
    "rows_in",
    "train_val_split",
]


@dataclasses.dataclass(frozen=True)
class PropEnConfig:
    """Static settings of PropEn dataset formatting (paper / reference defaults).

    Attributes:
      num_neighbours: ``k_n``, kNN slots **including the sequence itself** (30: 29 others).
      max_distance: ``Delta_x``, inclusive threshold on the fractional Hamming distance.
      max_infeasible_fraction: cap on the share of examples with an infeasible input, applied as
        ``round(F * p / (1 - p))``; ``None`` keeps them all (the reference's triples, whose cap is
        a no-op: docs/design/llome_data.md, row 7).
      symmetric: pairs only. ``False`` (paper): the target is one of the input's neighbours.
        ``True`` (reference): either one is among the other's neighbours.
    """

    num_neighbours: int = 30
    max_distance: float = 0.25
    max_infeasible_fraction: float | None = 0.1
    symmetric: bool = False

    def __post_init__(self) -> None:
        if self.num_neighbours < 2:
            raise ValueError(
                f"num_neighbours counts the sequence itself and must be >= 2; got {self.num_neighbours}."
            )
        if not 0.0 <= self.max_distance <= 1.0:
            raise ValueError(f"max_distance is a fraction in [0, 1]; got {self.max_distance}.")
        p = self.max_infeasible_fraction
        if p is not None and not 0.0 <= p < 1.0:
            raise ValueError(
                f"max_infeasible_fraction must be in [0, 1) or None (no cap); got {p}."
            )


@dataclasses.dataclass(frozen=True)
class PropEnPairs:
    """PropEn (input, target) pairs; every array has length ``P`` (shuffled order).

    Attributes:
      input_index: int64 ``[P]`` row of the worse sequence (the prompt ``x``).
      target_index: int64 ``[P]`` row of the better sequence (the target ``y``).
      input_value: float32 ``[P]`` ``f(x)`` (``-inf`` if infeasible).
      target_value: float32 ``[P]`` ``f(y)`` (always finite and ``> f(x)``).
      distance: float32 ``[P]`` fractional Hamming distance ``d(x, y)``.
      reward: float32 ``[P]`` margin reward ``max(f(y) - f(x), 0)``, infeasible counted as 0.
      num_candidates: pairs before the infeasible-input cap.
      num_infeasible_candidates: of which with an infeasible input.
    """

    input_index: np.ndarray
    target_index: np.ndarray
    input_value: np.ndarray
    target_value: np.ndarray
    distance: np.ndarray
    reward: np.ndarray
    num_candidates: int
    num_infeasible_candidates: int

    def __len__(self) -> int:
        return int(self.input_index.shape[0])

    @property
    def num_infeasible_inputs(self) -> int:
        """Kept pairs whose input is infeasible."""
        return int(np.sum(np.isneginf(self.input_value)))

    def gather(self, sequences: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs [P, L], targets [P, L])`` rows of ``sequences`` (the array passed in)."""
        x = np.asarray(sequences)
        return x[self.input_index], x[self.target_index]

    def select(self, rows: Any) -> PropEnPairs:
        """The pairs at ``rows`` (e.g. a train/val split), counts unchanged."""
        rows = np.asarray(rows)
        return dataclasses.replace(
            self,
            input_index=self.input_index[rows],
            target_index=self.target_index[rows],
            input_value=self.input_value[rows],
            target_value=self.target_value[rows],
            distance=self.distance[rows],
            reward=self.reward[rows],
        )


@dataclasses.dataclass(frozen=True)
class PreferenceTriples:
    """PropEn preference triples (prompt, chosen, rejected); arrays have length ``T`` (shuffled).

    Attributes:
      prompt_index, chosen_index, rejected_index: int64 ``[T]`` rows of the caller's arrays.
      prompt_value, chosen_value, rejected_value: float32 ``[T]`` with
        ``chosen_value > prompt_value >= rejected_value``.
      chosen_reward: float32 ``[T]`` margin reward of chosen over prompt (infeasible = 0).
      num_candidates: triples before the caps.
      num_infeasible_candidates: of which with an infeasible prompt.
    """

    prompt_index: np.ndarray
    chosen_index: np.ndarray
    rejected_index: np.ndarray
    prompt_value: np.ndarray
    chosen_value: np.ndarray
    rejected_value: np.ndarray
    chosen_reward: np.ndarray
    num_candidates: int
    num_infeasible_candidates: int

    def __len__(self) -> int:
        return int(self.prompt_index.shape[0])

    @property
    def num_infeasible_prompts(self) -> int:
        """Kept triples whose prompt is infeasible."""
        return int(np.sum(np.isneginf(self.prompt_value)))

    def gather(self, sequences: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(prompts, chosen, rejected)`` each ``[T, L]``, rows of ``sequences``."""
        x = np.asarray(sequences)
        return x[self.prompt_index], x[self.chosen_index], x[self.rejected_index]

    def select(self, rows: Any) -> PreferenceTriples:
        """The triples at ``rows`` (e.g. a train/val split), counts unchanged."""
        rows = np.asarray(rows)
        fields = (
            "prompt_index",
            "chosen_index",
            "rejected_index",
            "prompt_value",
            "chosen_value",
            "rejected_value",
            "chosen_reward",
        )
        return dataclasses.replace(self, **{f: getattr(self, f)[rows] for f in fields})


# ---------------------------------------------------------------------------------------------
# Small shared pieces
# ---------------------------------------------------------------------------------------------
def first_occurrences(sequences: Any) -> np.ndarray:
    """Indices of the first occurrence of every distinct row, in their original order.

    Args:
      sequences: ``[N, L]`` array.

    Returns:
      int64 ``[U]`` increasing indices (``pandas.drop_duplicates(keep="first")``).
    """
    x = np.ascontiguousarray(np.asarray(sequences))
    if x.ndim != 2:
        raise ValueError(f"sequences must be [N, L]; got shape {x.shape}.")
    if x.shape[0] == 0:
        return np.zeros((0,), np.int64)
    rows = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    _, first = np.unique(rows, return_index=True)
    return np.sort(first).astype(np.int64)


def _validate_values(values: Any, n: int) -> np.ndarray:
    v = np.asarray(values)
    if v.shape != (n,):
        raise ValueError(f"values must have shape [N] = [{n}] (one per sequence); got {v.shape}.")
    if not np.issubdtype(v.dtype, np.floating) and not np.issubdtype(v.dtype, np.integer):
        raise ValueError(f"values must be numeric; got dtype {v.dtype}.")
    v = v.astype(np.float32)
    if np.any(np.isposinf(v)):
        raise ValueError(
            "values contain +inf. llome_jax uses higher-is-better values with -inf for infeasible "
            "sequences; negate reference-style scores (lower is better, +inf infeasible) first."
        )
    return np.where(np.isnan(v), np.float32(-np.inf), v)


def cap_infeasible_inputs(
    key: jax.Array, infeasible: Any, max_fraction: float | None
) -> np.ndarray:
    """Reference ``filter_infeasible_examples``: keep every feasible-input example and at most
    ``round(F * p / (1 - p))`` infeasible-input ones (uniformly at random), in random order.

    Args:
      key: PRNG key.
      infeasible: bool ``[E]`` whether each example's input is infeasible.
      max_fraction: ``p`` in ``[0, 1)``, or ``None`` for no cap (just shuffle).

    Returns:
      int64 ``[E']`` indices of the kept examples, shuffled.
    """
    infeasible = np.asarray(infeasible, bool)
    key_subset, key_order = jax.random.split(key)
    feasible_rows = np.flatnonzero(~infeasible)
    infeasible_rows = np.flatnonzero(infeasible)
    if max_fraction is not None:
        limit = round(feasible_rows.size * max_fraction / (1.0 - max_fraction))
        infeasible_rows = infeasible_rows[_random_subset(key_subset, infeasible_rows.size, limit)]
    kept = np.concatenate([feasible_rows, infeasible_rows])
    return kept[_permutation(key_order, kept.size)]


def random_bits(key: jax.Array, n: int, words: int | None = None) -> np.ndarray:
    """``jax.random.bits(key, (n,) or (n, words), uint32)`` as NumPy, drawn at
    :func:`~llome_jax.llome.neighbours.padded_size` ``(n)`` rows and cut to ``n``: the same
    values (under JAX's partitionable threefry, the default since 0.5, row ``i`` depends on
    ``i`` alone), with about 8 compiled shapes per doubling of ``n`` instead of one per ``n``
    (a pretraining pool of 1,000 instances drew at as many sizes, each an executable holding
    memory mappings). Other PRNGs draw at ``n``."""
    shape = (n,) if words is None else (n, words)
    threefry = str(jax.random.key_impl(key)) == "threefry2x32"
    if not (threefry and jax.config.jax_threefry_partitionable) or n == 0:
        return np.asarray(jax.random.bits(key, shape, jnp.uint32))
    padded = (padded_size(n), *shape[1:])
    return np.asarray(jax.random.bits(key, padded, jnp.uint32))[:n]


def _random_keys(key: jax.Array, n: int) -> np.ndarray:
    """``n`` random uint64 sort keys from ``jax.random.bits`` (ties have probability ~n^2/2^65)."""
    bits = random_bits(key, n, 2)
    return np.ascontiguousarray(bits).view(np.uint64).reshape(n)


def _permutation(key: jax.Array, n: int) -> np.ndarray:
    """A uniform random permutation of ``range(n)``: int64 ``[n]``.

    Sorts random 64-bit keys with numpy: the same distribution as ``jax.random.permutation`` but
    far faster on CPU for millions of elements (XLA:CPU's multi-round sort; timings in
    docs/design/llome_data.md).
    """
    if n == 0:
        return np.zeros((0,), np.int64)
    return np.argsort(_random_keys(key, n)).astype(np.int64)


def _random_subset(key: jax.Array, n: int, m: int) -> np.ndarray:
    """``m`` of ``range(n)`` uniformly without replacement, increasing: int64 ``[min(m, n)]``."""
    if m >= n:
        return np.arange(n, dtype=np.int64)
    if m <= 0:
        return np.zeros((0,), np.int64)
    return np.sort(np.argpartition(_random_keys(key, n), m - 1)[:m]).astype(np.int64)


def _prepare(
    sequences: Any, values: Any, config: PropEnConfig, neighbours: HammingNeighbours | None, **knn
) -> tuple[np.ndarray, np.ndarray, np.ndarray, HammingNeighbours]:
    """Validate, dedupe (keep first) and compute the neighbour table of the unique rows."""
    x = np.asarray(sequences)
    if x.ndim != 2:
        raise ValueError(f"sequences must be an integer array [N, L]; got shape {x.shape}.")
    v = _validate_values(values, x.shape[0])
    unique = first_occurrences(x)
    if neighbours is None:
        neighbours = hamming_neighbours(
            x[unique], config.num_neighbours, config.max_distance, **knn
        )
    elif neighbours.index.shape != (unique.size, config.num_neighbours):
        raise ValueError(
            f"neighbours must be the table of the {unique.size} deduplicated rows with "
            f"{config.num_neighbours} slots; got {neighbours.index.shape}."
        )
    return x, v, unique, neighbours


# ---------------------------------------------------------------------------------------------
# Pairs
# ---------------------------------------------------------------------------------------------
def propen_pairs(
    key: jax.Array,
    sequences: Any,
    values: Any,
    config: PropEnConfig = PropEnConfig(),
    *,
    neighbours: HammingNeighbours | None = None,
    **knn_options: Any,
) -> PropEnPairs:
    """PropEn pairs for SFT / MargE (paper Alg. DatasetFormatting, "binary").

    ``{(x_i, x_j) : x_j in N(i), d(x_i, x_j) <= Delta_x, f(x_j) > f(x_i)}`` over the deduplicated
    rows (``symmetric=True``: ``x_j in N(i)`` or ``x_i in N(j)``), then infeasible inputs capped
    (:func:`cap_infeasible_inputs`) and the pairs shuffled. See the module docstring.

    Args:
      key: PRNG key (infeasible subsample and shuffle).
      sequences: int ``[N, L]``.
      values: float ``[N]``, higher is better, ``-inf``/NaN infeasible (``+inf`` is rejected).
      config: :class:`PropEnConfig`.
      neighbours: a precomputed :func:`~llome_jax.llome.neighbours.hamming_neighbours` table of
        the deduplicated rows (to share it between pairs and triples); computed if ``None``.
      **knn_options: passed to ``hamming_neighbours`` (``block_size``, ``mesh``, ``progress``,
        ``num_states``).

    Returns:
      :class:`PropEnPairs` (indices into ``sequences``).

    Example:
      >>> import jax, numpy as np
      >>> x = np.array([[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1]])
      >>> f = np.array([0.1, 0.5, -np.inf, 1.0], np.float32)
      >>> cfg = PropEnConfig(num_neighbours=4, max_distance=0.5, max_infeasible_fraction=None)
      >>> p = propen_pairs(jax.random.key(0), x, f, cfg)
      >>> sorted(zip(p.input_index.tolist(), p.target_index.tolist()))
      [(0, 1), (2, 0), (2, 1), (2, 3)]
    """
    x, v, unique, nb = _prepare(sequences, values, config, neighbours, **knn_options)
    u = unique.size
    vu = v[unique]
    rows = np.repeat(np.arange(u, dtype=np.int64), config.num_neighbours - 1)
    cols = nb.index[:, 1:].reshape(-1).astype(np.int64)
    dist = nb.distance[:, 1:].reshape(-1)
    ok = cols >= 0
    rows, cols, dist = rows[ok], cols[ok], dist[ok]
    forward = vu[cols] > vu[rows]  # neighbour better: row -> neighbour
    inputs, targets, dists = rows[forward], cols[forward], dist[forward]
    if config.symmetric:
        backward = vu[rows] > vu[cols]  # row better: neighbour -> row
        inputs = np.concatenate([inputs, cols[backward]])
        targets = np.concatenate([targets, rows[backward]])
        dists = np.concatenate([dists, dist[backward]])
    code = inputs * u + targets
    code, first = np.unique(code, return_index=True)  # canonical order, each pair once
    inputs, targets, dists = inputs[first], targets[first], dists[first]

    infeasible = np.isneginf(vu[inputs])
    kept = cap_infeasible_inputs(key, infeasible, config.max_infeasible_fraction)
    inputs, targets, dists = inputs[kept], targets[kept], dists[kept]
    input_value, target_value = vu[inputs], vu[targets]
    return PropEnPairs(
        input_index=unique[inputs],
        target_index=unique[targets],
        input_value=input_value,
        target_value=target_value,
        distance=(dists.astype(np.float32) / np.float32(x.shape[1])).astype(np.float32),
        reward=np.asarray(margin_reward(input_value, target_value)),
        num_candidates=int(code.size),
        num_infeasible_candidates=int(infeasible.sum()),
    )


# ---------------------------------------------------------------------------------------------
# Triples
# ---------------------------------------------------------------------------------------------
def preference_triples(
    key: jax.Array,
    sequences: Any,
    values: Any,
    config: PropEnConfig = PropEnConfig(),
    *,
    max_per_prompt: int | None = None,
    neighbours: HammingNeighbours | None = None,
    **knn_options: Any,
) -> PreferenceTriples:
    """PropEn preference triples for DPO (paper Alg. DatasetFormatting, "triple").

    ``{(x_i, x_j, x_k) : x_j, x_k in N(i), f(x_j) > f(x_i) >= f(x_k)}`` over the deduplicated rows,
    where ``N(i)`` includes ``x_i`` (so the prompt can be its own rejected sequence). Chosen is never
    infeasible; rejected may be. Then (optionally) at most ``max_per_prompt`` triples per prompt
    (uniformly at random), infeasible prompts capped (:func:`cap_infeasible_inputs`), shuffled.

    The reference builds the same set (its NaN-scored generations never enter triples; here NaN
    means infeasible, like ``-inf``) and has no per-prompt cap; its infeasible cap is a no-op
    (use ``max_infeasible_fraction=None`` to reproduce that).

    Args:
      key: PRNG key.
      sequences: int ``[N, L]``.
      values: float ``[N]`` (higher is better, ``-inf``/NaN infeasible).
      config: :class:`PropEnConfig` (``symmetric`` must be ``False``).
      max_per_prompt: optional cap on triples per prompt (up to ``(k_n - 1) * k_n`` otherwise).
      neighbours: optional precomputed neighbour table of the deduplicated rows.
      **knn_options: passed to ``hamming_neighbours``.

    Returns:
      :class:`PreferenceTriples` (indices into ``sequences``).
    """
    if config.symmetric:
        raise ValueError("symmetric neighbourhoods apply to pairs only; use symmetric=False.")
    if max_per_prompt is not None and max_per_prompt < 1:
        raise ValueError(f"max_per_prompt must be >= 1 or None; got {max_per_prompt}.")
    _, v, unique, nb = _prepare(sequences, values, config, neighbours, **knn_options)
    vu = v[unique]
    valid = nb.index >= 0
    nbr_value = np.where(valid, vu[np.maximum(nb.index, 0)], np.float32(np.nan))
    own = vu[:, None]
    chosen_ok = valid & (nbr_value > own)
    rejected_ok = valid & (nbr_value <= own)  # slot 0 (the prompt itself) always qualifies
    prompt, chosen_slot, rejected_slot = np.nonzero(chosen_ok[:, :, None] & rejected_ok[:, None, :])
    chosen = nb.index[prompt, chosen_slot].astype(np.int64)
    rejected = nb.index[prompt, rejected_slot].astype(np.int64)
    prompt = prompt.astype(np.int64)
    num_candidates = int(prompt.size)
    num_infeasible_candidates = int(np.isneginf(vu[prompt]).sum())

    key_per_prompt, key_cap = jax.random.split(key)
    if max_per_prompt is not None and prompt.size:
        priority = np.asarray(jax.random.uniform(key_per_prompt, (prompt.size,)))
        order = np.lexsort((priority, prompt))  # by prompt, random within a prompt
        sorted_prompt = prompt[order]
        starts = np.searchsorted(sorted_prompt, sorted_prompt, side="left")
        rank = np.arange(order.size) - starts
        keep = np.sort(order[rank < max_per_prompt])
        prompt, chosen, rejected = prompt[keep], chosen[keep], rejected[keep]

    infeasible = np.isneginf(vu[prompt])
    kept = cap_infeasible_inputs(key_cap, infeasible, config.max_infeasible_fraction)
    prompt, chosen, rejected = prompt[kept], chosen[kept], rejected[kept]
    prompt_value, chosen_value = vu[prompt], vu[chosen]
    return PreferenceTriples(
        prompt_index=unique[prompt],
        chosen_index=unique[chosen],
        rejected_index=unique[rejected],
        prompt_value=prompt_value,
        chosen_value=chosen_value,
        rejected_value=vu[rejected],
        chosen_reward=np.asarray(margin_reward(prompt_value, chosen_value)),
        num_candidates=num_candidates,
        num_infeasible_candidates=num_infeasible_candidates,
    )


# ---------------------------------------------------------------------------------------------
# Train / validation split
# ---------------------------------------------------------------------------------------------
def train_val_split(
    key: jax.Array,
    num_examples: int,
    *,
    train_fraction: float = 0.95,
    max_val_examples: int | None = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """Random train/validation split of ``num_examples`` rows (the authors' split).

    As the reference (``datasets.train_test_split(train_size=0.95, shuffle=True)`` then the eval
    set truncated to ``max_eval_size=100``): ``n_train = floor(train_fraction * n)``, the other
    ``n - n_train`` rows are the validation candidates, of which the first ``max_val_examples`` are
    used and the rest are dropped (neither trained nor evaluated on). The paper does not specify.

    Args:
      key: PRNG key.
      num_examples: ``n >= 2``.
      train_fraction: in ``(0, 1)``.
      max_val_examples: cap on validation rows (``None``: no cap).

    Returns:
      ``(train_rows [n_train], val_rows [min(n - n_train, max_val_examples)])`` int64, shuffled.
    """
    n = int(num_examples)
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1); got {train_fraction}.")
    if max_val_examples is not None and max_val_examples < 1:
        raise ValueError(f"max_val_examples must be >= 1 or None; got {max_val_examples}.")
    num_train = math.floor(train_fraction * n)
    if n < 2 or num_train < 1:
        raise ValueError(
            f"need at least one training and one validation example; got {n} examples "
            f"(train_fraction={train_fraction}). Build more pairs (e.g. a larger max_distance)."
        )
    order = _permutation(key, n)
    val = order[num_train:]
    if max_val_examples is not None:
        val = val[:max_val_examples]
    return order[:num_train], val
