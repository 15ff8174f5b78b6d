"""Sequence log-probs of a whole dataset under fixed parameters (a round's reference).

The train step's losses compare the policy with a frozen reference model. Its log-probs are
*data*: :func:`compute_logprobs` scores every training sequence once per round with the frozen
round-start parameters, in chunks of ``batch_size`` rows through one compiled forward pass (the
train step's, ``llome_jax.training.step.forward_logprobs``), and the result goes into each
``TrainBatch`` (``reference=``). The authors' code recomputed them every step
(``precompute_ref_log_probs=False``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from llome_jax.host import parallel
from llome_jax.training.step import Params, checked_target_window, forward_logprobs, split_params
from llome_jax.types import SeqLogProbs

__all__ = ["compute_logprobs"]


@functools.partial(jax.jit, static_argnums=(0, 6))
def _jitted_logprobs(
    graphdef: nnx.GraphDef,
    params: Params,
    rest: nnx.State,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    target_mask: jax.Array,
    window: int | None,
) -> SeqLogProbs:
    """One chunk's ``forward_logprobs``, compiled once per model graph and window."""
    return forward_logprobs(graphdef, params, rest, input_ids, attention_mask, target_mask, window)


def compute_logprobs(
    model: nnx.Module,
    params: Params | None,
    input_ids: Any,
    target_mask: Any,
    attention_mask: Any = None,
    *,
    batch_size: int = 32,
    mesh: Mesh | None = None,
    progress: bool = False,
    target_window: int | str | None = "auto",
) -> SeqLogProbs:
    """Sequence log-probs of a whole dataset under fixed parameters (e.g. the round's reference).

    Run once per round with the frozen round-start parameters; store the result in each
    ``llome_jax.training.step.TrainBatch`` (``reference=``). Chunks of ``batch_size`` rows go
    through one compiled forward pass (the last chunk is padded by repeating rows, then
    trimmed), placed on ``mesh`` if given.

    Args:
      model: NNX model (graph structure; its own parameters are used when ``params`` is None).
      params: parameters to evaluate (a pure dict as in ``TrainState.params``) or ``None``.
      input_ids: int ``[N, T]``; target_mask / attention_mask: 0/1 ``[N, T]``.
      batch_size: rows per forward pass (a multiple of the mesh size when sharded).
      mesh: optional data-parallel mesh.
      progress: show a tqdm progress bar.
      target_window: as in ``TrainBatch.create`` (``"auto"``: from the whole dataset).

    Returns:
      ``SeqLogProbs`` of numpy float32 ``[N]`` arrays.
    """
    graphdef, own_params, rest = split_params(model)
    params = own_params if params is None else params
    ids = np.asarray(input_ids, np.int32)
    tmask = np.asarray(target_mask, np.int32)
    amask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, np.int32)
    if ids.ndim != 2 or tmask.shape != ids.shape or amask.shape != ids.shape:
        raise ValueError("input_ids, target_mask and attention_mask must all be [N, T]")
    window = checked_target_window(target_window, tmask)
    n = ids.shape[0]
    if n == 0:
        raise ValueError("no sequences to score")
    if mesh is not None and batch_size % mesh.shape[parallel.DATA_AXIS]:
        raise ValueError(f"batch_size {batch_size} must divide over the mesh's data axis")
    batch_size = min(batch_size, n) if mesh is None else batch_size
    if mesh is not None:
        params = parallel.replicate(params, mesh)
        rest = parallel.replicate(rest, mesh)
    starts = range(0, n, batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="log-probs", unit="batch")
    sums, counts = [], []
    for start in starts:
        rows = np.arange(start, start + batch_size) % n if start + batch_size > n else None
        sl = slice(start, start + batch_size)
        chunk = tuple(a[rows] if rows is not None else a[sl] for a in (ids, amask, tmask))
        if mesh is not None:
            chunk = parallel.shard_batch(chunk, mesh)
        out = _jitted_logprobs(graphdef, params, rest, *chunk, window)
        keep = min(batch_size, n - start)
        sums.append(np.asarray(out.sum_logp)[:keep])
        counts.append(np.asarray(out.num_tokens)[:keep])
    return SeqLogProbs(sum_logp=np.concatenate(sums), num_tokens=np.concatenate(counts))
