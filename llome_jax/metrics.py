"""Optimisation metrics, one definition each (``rounds.jsonl`` fields; paper Sec. 4.2).

* Generic, for every optimizer: :func:`regret` (``f* - f(x)``; Ehrlich: ``1 - f(x)``,
  infeasible = 1), :func:`frac_unique`, :func:`mean_hamming_to_nearest` and
  :func:`round_metrics`, the common per-round record (``min_regret`` over every labelled
  sequence so far, ``mean_regret`` and ``frac_feasible`` over the round's).
* Of LLOME's proposals relative to their prompts: edit size (:func:`hamming_distance`,
  :func:`mean_hamming_distance`, the temperature schedule's input), novelty
  (:func:`frac_novel`) and improvement (:func:`mean_reward`, :func:`frac_improved`), collected by
  :func:`generation_metrics`.

All take host arrays and return Python floats; an empty input gives NaN (written as null).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llome_jax.training.loss_inputs import margin_reward

__all__ = [
    "frac_improved",
    "frac_novel",
    "frac_unique",
    "generation_metrics",
    "hamming_distance",
    "mean_hamming_distance",
    "mean_hamming_to_nearest",
    "mean_reward",
    "regret",
    "round_metrics",
    "rows_in",
]


def regret(
    values: Any, optimal_value: float | None = 1.0, worst_value: float | None = 0.0
) -> np.ndarray:
    """Simple regret ``f* - f(x)``: float64 ``[...]`` for ``values [...]``.

    The defaults are the Ehrlich convention (``f* = 1``; an infeasible, ``-inf``, sequence counts
    as the worst feasible value 0, so its regret is 1). For an
    :class:`~llome_jax.objective.Objective`: ``optimal_value`` its ``f*`` (``None``: unknown, every
    regret is NaN) and ``worst_value`` the value an infeasible sequence counts as (``None``: its
    regret is NaN, i.e. it is left out of the statistics).

    Example:
      >>> regret([0.25, -float("inf")]).tolist()
      [0.75, 1.0]
      >>> regret([3.0, -float("inf")], optimal_value=8.0, worst_value=None).tolist()
      [5.0, nan]
    """
    values = np.asarray(values, dtype=np.float64)
    if optimal_value is None:
        return np.full(values.shape, np.nan)
    fill = np.nan if worst_value is None else worst_value
    return optimal_value - np.where(np.isfinite(values), values, fill)


def _finite_min(r: np.ndarray) -> float | None:
    r = r[~np.isnan(r)]
    return float(r.min()) if r.size else None


def _finite_mean(r: np.ndarray) -> float | None:
    r = r[~np.isnan(r)]
    return float(r.mean()) if r.size else None


def frac_unique(sequences: Any) -> float:
    """Distinct sequences / sequences (``[n, L]``); NaN for an empty batch (written as null).

    Example:
      >>> frac_unique([[0, 1], [0, 1], [1, 0], [2, 2]])
      0.75
    """
    x = np.asarray(sequences)
    if x.ndim != 2:
        raise ValueError(f"sequences must be [n, L]; got shape {x.shape}.")
    return float(len(np.unique(x, axis=0)) / x.shape[0]) if x.shape[0] else float("nan")


def mean_hamming_to_nearest(sequences: Any, reference: Any, block: int = 2048) -> float:
    """Mean over ``sequences`` of the fractional Hamming distance to the nearest ``reference`` row."""
    sequences, reference = np.asarray(sequences), np.asarray(reference)
    if len(sequences) == 0 or len(reference) == 0:
        return float("nan")
    best = np.full(len(sequences), np.inf)
    for start in range(0, len(reference), block):
        chunk = reference[start : start + block]
        distance = (sequences[:, None, :] != chunk[None, :, :]).mean(-1)
        best = np.minimum(best, distance.min(axis=1))
    return float(best.mean())


def rows_in(sequences: Any, reference: Any) -> np.ndarray:
    """Which rows of ``sequences`` occur (exactly) as a row of ``reference``.

    Args:
      sequences: ``[N, L]`` integer array.
      reference: ``[M, L]`` integer array (``M`` may be 0).

    Returns:
      bool ``[N]``.

    Example:
      >>> import numpy as np
      >>> rows_in(np.array([[0, 1], [1, 0], [2, 2]]), np.array([[2, 2], [0, 1]])).tolist()
      [True, False, True]
    """
    x = np.asarray(sequences)
    ref = np.asarray(reference)
    if x.ndim != 2 or ref.ndim != 2 or (ref.shape[0] and ref.shape[1] != x.shape[1]):
        raise ValueError(
            f"sequences [N, L] and reference [M, L] must share L; got {x.shape} and {ref.shape}."
        )
    if x.shape[0] == 0 or ref.shape[0] == 0:
        return np.zeros((x.shape[0],), bool)
    x = np.ascontiguousarray(x, np.int64)
    ref = np.ascontiguousarray(ref, np.int64)
    row = np.dtype((np.void, 8 * x.shape[1]))
    return np.isin(x.view(row).ravel(), ref.view(row).ravel())


def round_metrics(
    round_index: int,
    new_sequences: Any,
    new_values: Any,
    all_values: Any,
    *,
    num_generated: int | None = None,
    optimal_value: float | None = 1.0,
    worst_value: float | None = 0.0,
    **extra: Any,
) -> dict[str, Any]:
    """The common per-round record.

    ``min_regret = min_{x labelled so far} f* - f(x)`` and ``mean_regret`` = its mean over the
    round's sequences (:func:`regret`: infeasible sequences count as ``worst_value``, or are left
    out when it is ``None``; null when nothing is left). Without ``optimal_value`` both are null:
    an objective with an unknown optimum is followed through ``best_value`` (the optimizers add
    ``max f`` so far to every record).

    Args:
      round_index: the round number.
      new_sequences: int ``[m, L]`` the sequences labelled this round.
      new_values: float ``[m]`` their values.
      all_values: float ``[N]`` every value labelled so far (this round included);
        ``num_evaluations = N``.
      num_generated: candidates generated before filtering (defaults to ``m``).
      optimal_value / worst_value: the objective's ``f*`` and the value infeasible sequences count
        as (defaults: Ehrlich's 1 and 0).
      **extra: any other ``ROUND_FIELDS`` (``mean_hamming``, ``train_loss``, ...).
    """
    new_values = np.asarray(new_values, dtype=np.float64)
    all_values = np.asarray(all_values, dtype=np.float64)
    record: dict[str, Any] = {
        "round": int(round_index),
        "num_evaluations": int(all_values.size),
        "num_generated": int(len(new_values) if num_generated is None else num_generated),
        "min_regret": _finite_min(regret(all_values, optimal_value, worst_value)),
        "mean_regret": _finite_mean(regret(new_values, optimal_value, worst_value)),
        "frac_feasible": float(np.isfinite(new_values).mean()) if new_values.size else None,
        "frac_unique": frac_unique(new_sequences),
    }
    record.update(extra)
    return record


def _pair(inputs: Any, outputs: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(inputs), np.asarray(outputs)
    if a.shape != b.shape or a.ndim < 1:
        raise ValueError(
            f"inputs and outputs must have the same shape [..., L]; got {a.shape}, {b.shape}."
        )
    return a, b


def hamming_distance(inputs: Any, outputs: Any) -> np.ndarray:
    """Fractional Hamming distance ``|{l : x_l != y_l}| / L`` (scipy's ``hamming``): float32 ``[...]``.

    Example:
      >>> hamming_distance([[0, 1, 2, 3], [0, 0, 0, 0]], [[0, 1, 2, 0], [1, 1, 0, 0]]).tolist()
      [0.25, 0.5]
    """
    a, b = _pair(inputs, outputs)
    return np.mean(a != b, axis=-1, dtype=np.float64).astype(np.float32)


def mean_hamming_distance(inputs: Any, outputs: Any) -> float:
    """Mean fractional Hamming distance of each output to its own input (``[n, L]`` each).

    The authors' code's ``hd`` (its ``get_temperatures`` input): every valid generated sequence vs.
    its prompt, before deduplication; it drives
    :func:`~llome_jax.llome.temperature.temperature_offset`.
    """
    d = hamming_distance(inputs, outputs)
    return float(np.mean(d, dtype=np.float64)) if d.size else float("nan")


def frac_novel(sequences: Any, known: Any) -> float:
    """Share of ``sequences`` (``[n, L]``) that are not rows of ``known`` (``[m, L]``).

    Example:
      >>> frac_novel([[0, 1], [1, 0], [2, 2], [3, 3]], known=[[2, 2], [0, 1], [5, 5]])
      0.5
    """
    x, k = np.asarray(sequences), np.asarray(known)
    if x.ndim != 2 or k.ndim != 2 or (k.shape[0] and k.shape[1] != x.shape[1]):
        raise ValueError(
            f"sequences and known must be [n, L] and [m, L]; got {x.shape}, {k.shape}."
        )
    if x.shape[0] == 0:
        return float("nan")
    return float(np.mean(~rows_in(x, k)))


def mean_reward(input_values: Any, output_values: Any) -> float:
    """Mean margin reward ``max(f(y) - f(x), 0)`` of outputs over their inputs (infeasible = 0).

    Example:
      >>> mean_reward([0.25, 0.5, -float("inf")], [0.75, 0.25, 0.5])   # rewards 0.5, 0, 0.5
      0.3333333333333333
    """
    r = np.asarray(margin_reward(input_values, output_values))
    return float(np.mean(r, dtype=np.float64)) if r.size else float("nan")


def frac_improved(input_values: Any, output_values: Any) -> float:
    """Share of outputs strictly better than their input (``f(y) > f(x)``; ``-inf`` infeasible).

    Example:
      >>> frac_improved([0.25, 0.5, -float("inf"), 0.5], [0.75, 0.25, 0.0, 0.5])
      0.5
    """
    fx = np.asarray(input_values, np.float64)
    fy = np.asarray(output_values, np.float64)
    if fx.shape != fy.shape:
        raise ValueError(f"input_values and output_values must match; got {fx.shape}, {fy.shape}.")
    fx, fy = np.nan_to_num(fx, nan=-np.inf), np.nan_to_num(fy, nan=-np.inf)
    return float(np.mean(fy > fx)) if fx.size else float("nan")


def generation_metrics(
    inputs: Any, outputs: Any, input_values: Any, output_values: Any
) -> dict[str, float | int]:
    """The LLOME-specific round metrics of a set of valid generations.

    Args:
      inputs: int ``[n, L]`` the prompt each output was generated from.
      outputs: int ``[n, L]`` the valid generated sequences (before deduplication).
      input_values: float ``[n]`` ``f`` of the prompts.
      output_values: float ``[n]`` ``f`` of the outputs (``-inf`` infeasible).

    Returns:
      ``{"num_generated", "mean_hamming", "frac_unique", "frac_feasible", "mean_reward",
      "frac_improved"}`` (the names of the run directory's ``rounds.jsonl`` where they overlap).
    """
    a, b = _pair(inputs, outputs)
    fy = np.asarray(output_values, np.float64)
    n = b.shape[0]
    return {
        "num_generated": int(n),
        "mean_hamming": mean_hamming_distance(a, b),
        "frac_unique": frac_unique(b),
        "frac_feasible": float(np.mean(np.isfinite(fy))) if n else float("nan"),
        "mean_reward": mean_reward(input_values, output_values),
        "frac_improved": frac_improved(input_values, output_values),
    }
