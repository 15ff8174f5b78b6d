"""The seed sequences of a LaMBO-2 round (poli-baselines' seed selection, expansion factor alpha).

:func:`select_design_seeds` ranks the history by observed value and keeps the top
``round(alpha num)`` rows: tiled to ``num`` when ``alpha <= 1``, thinned to ``num`` by
:func:`farthest_first_traversal` (greedy max-min Hamming) when ``alpha > 1``. Host numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["farthest_first_traversal", "select_design_seeds"]


def farthest_first_traversal(sequences: Any, scores: Any, num: int) -> np.ndarray:
    """Greedy max-min Hamming selection of ``num`` row indices.

    Starts with the best-scored row; then repeatedly adds the row whose minimum distance to the
    selected set is largest, ties broken by higher score, then lower index (beignet's order).
    Already selected rows are never re-selected. Returns int64 ``[num]``.
    """
    x = np.asarray(sequences)
    s = np.asarray(scores, dtype=np.float64)
    k = len(x)
    if not 1 <= num <= k:
        raise ValueError(f"cannot pick {num} of {k} sequences.")
    s_key = np.where(np.isfinite(s), s, -np.inf)
    order = np.lexsort((np.arange(k), -s_key))  # best score first, then index
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)  # lower rank = preferred on ties
    first = int(order[0])
    chosen = [first]
    distance = (x != x[first]).sum(1).astype(np.int64)
    distance[first] = -1
    for _ in range(num - 1):
        best = distance.max()
        candidates = np.flatnonzero(distance == best)
        pick = int(candidates[np.argmin(rank[candidates])])
        chosen.append(pick)
        distance = np.minimum(distance, (x != x[pick]).sum(1))
        distance[chosen] = -1
    return np.asarray(chosen, np.int64)


def select_design_seeds(
    sequences: Any, values: Any, rounds: Any, num: int, alpha: float
) -> np.ndarray:
    """Indices of the ``num`` seed sequences of a round (poli-baselines; duplicates allowed).

    Rows are ranked by observed value (infeasible last; ties: most recent round first, then lower
    index); ``K = min(N, round(alpha num))`` top rows are kept. ``alpha <= 1``: the top ``K`` are
    tiled (whole list repeated) to exactly ``num``; ``alpha > 1``: farthest-first traversal picks
    ``num`` of them.
    """
    x = np.asarray(sequences)
    y = np.asarray(values, dtype=np.float64)
    t = np.asarray(rounds, dtype=np.int64)
    if not (len(x) == len(y) == len(t)) or len(x) == 0:
        raise ValueError("select_design_seeds needs a non-empty history of matching lengths.")
    if num < 1 or not alpha > 0:
        raise ValueError(f"num must be >= 1 and alpha > 0, got {num!r}, {alpha!r}.")
    y_key = np.where(np.isfinite(y), y, -np.inf)
    order = np.lexsort((np.arange(len(y)), -t, -y_key))
    top = order[: max(1, min(len(x), round(alpha * num)))]
    if alpha <= 1 or len(top) < num:
        return np.resize(top, num)
    picked = farthest_first_traversal(x[top], y_key[top], num)
    return top[picked]
