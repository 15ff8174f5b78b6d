"""Batched KV-cache decoding under ``jit``: greedy, temperature and top-k sampling.

Semantics follow Hugging Face ``generate`` as the authors' code used it for iterative refinement
(docs/design/refinement.md):

* Prompts are **left-padded** with a 0/1 mask; rotary positions are ``cumsum(mask) - 1`` for the
  prompt and continue from the number of real prompt tokens (HF's ``position_ids`` for
  ``attention_mask`` inputs), padding keys are never attended to.
* Per step, for raw next-token logits ``z`` (ids ``>= vocab_limit`` set to ``-inf``):
  greedy rows (``temperature <= 0``) take ``argmax z``; sampling rows scale ``z / T`` then keep
  the logits ``>=`` the ``top_k``-th largest (HF ``TopKLogitsWarper``: ties at the threshold are
  kept) and draw from the softmax.
* ``logprobs`` = log-softmax of the **processed** logits (``z / T`` after top-k) at the chosen
  token, HF's ``compute_transition_scores(normalize_logits=True)`` on ``output.scores`` (for
  greedy rows, the raw distribution); ``logprobs_raw`` = log-softmax of ``z`` at the chosen token.
* After a row emits a stop token it emits ``pad_token_id`` (log-probs 0); ``lengths`` counts the
  generated tokens including the stop token; decoding ends early once every row has stopped.

Implementation: one jitted function per ``(model graph, SampleConfig, shapes)``. The prompt is
run once through the model writing a KV cache with ``P + max_new_tokens`` slots
(:meth:`Pythia.hidden`); the head is applied to the last position only. Then a
``lax.while_loop`` samples one token and runs one cached step per iteration (``T = 1`` query
against all slots, the new key/value written in place with ``dynamic_update_slice``). With
``prompt_rows`` the prompt pass runs on the distinct prompts only and their caches are gathered
to the rows that continue them (iterative refinement draws ``n_o`` samples per prompt). With
``mesh`` the batch is split over the mesh's ``"data"`` axis and the parameters replicated;
sampling keys are ``fold_in(key, step)`` and random bits are sharding-invariant, so the sharded
result equals the single-device one.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from llome_jax.host import parallel
from llome_jax.lm.pythia import attention_mask_for, cast_floats, graphdef_in_dtype

__all__ = ["Generation", "SampleConfig", "generate", "process_logits", "split_for_generation"]


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """Static decoding settings (hashable: one compilation per distinct config and shape).

    Attributes:
      max_new_tokens: tokens generated per row at most (the fixed loop length).
      top_k: keep the ``top_k`` largest logits when sampling (HF default 50); ``None`` = all.
      stop_token_ids: a row stops after emitting any of these (e.g. ``]`` and EOS).
      pad_token_id: emitted after the stop token.
      vocab_limit: ids ``>= vocab_limit`` are never produced (the padded rows of a checkpoint's
        embedding, e.g. 50277 for Pythia's 50304-row head); ``None`` = every id allowed.
      compute_dtype: ``None`` (default): decode with the model as it is. ``"bfloat16"`` (or
        ``"float32"``): inside the jitted call, cast a Pythia's floating parameters to this dtype
        and decode with it as ``param_dtype = compute_dtype`` (matmuls and the KV cache in that
        dtype; LayerNorm statistics, attention softmax, logits and log-probs stay float32). The
        caller's parameters are not changed (training stays fp32); the bf16 copy lives for the
        call. How far bf16 moves log-probs and tokens: docs/design/pythia.md.
    """

    max_new_tokens: int
    top_k: int | None = 50
    stop_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0
    vocab_limit: int | None = None
    compute_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {self.top_k}")
        if self.vocab_limit is not None and self.vocab_limit < 1:
            raise ValueError(f"vocab_limit must be >= 1 or None, got {self.vocab_limit}")
        if not isinstance(self.stop_token_ids, tuple):
            raise ValueError("stop_token_ids must be a tuple of ints (hashable)")
        if self.compute_dtype not in (None, "float32", "bfloat16"):
            raise ValueError(
                f"compute_dtype must be None, 'float32' or 'bfloat16', got {self.compute_dtype!r}"
            )


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["tokens", "logprobs", "logprobs_raw", "lengths", "stopped"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class Generation:
    """Decoded tokens and their log-probabilities.

    Attributes:
      tokens: int32 ``[B, N]``; ``pad_token_id`` after the stop token.
      logprobs: f32 ``[B, N]`` log-softmax of the processed logits (temperature, top-k) at the
        chosen token; greedy rows: raw. 0 after the stop token.
      logprobs_raw: f32 ``[B, N]`` log-softmax of the raw logits at the chosen token.
      lengths: int32 ``[B]`` generated tokens including the stop token.
      stopped: bool ``[B]`` whether a stop token was produced.
    """

    tokens: jax.Array
    logprobs: jax.Array
    logprobs_raw: jax.Array
    lengths: jax.Array
    stopped: jax.Array


def _raw_logits(logits: jax.Array, vocab_limit: int | None) -> jax.Array:
    """float32 ``[B, V]`` logits with ids ``>= vocab_limit`` at ``-inf``."""
    raw = logits.astype(jnp.float32)
    v = raw.shape[-1]
    if vocab_limit is not None and vocab_limit < v:
        raw = jnp.where(jnp.arange(v) < vocab_limit, raw, -jnp.inf)
    return raw


def _scaled_logits(raw: jax.Array, temperature: jax.Array) -> jax.Array:
    t = jnp.where(temperature > 0, temperature, 1.0).astype(jnp.float32)
    return raw / t[:, None]


def _top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    # The barrier keeps XLA:CPU's fast TopK kernel: when only the k-th column is used, XLA
    # rewrites top_k into a full sort of the vocabulary (~100x slower at V = 50304).
    return jax.lax.optimization_barrier(jax.lax.top_k(x, k))


def process_logits(
    logits: jax.Array, temperature: jax.Array, top_k: int | None, vocab_limit: int | None = None
) -> tuple[jax.Array, jax.Array]:
    """``(raw, processed)`` float32 logits ``[B, V]`` for per-row ``temperature [B]``.

    ``raw`` has ids ``>= vocab_limit`` at ``-inf``; ``processed = raw / T`` with everything
    below the ``top_k``-th largest value at ``-inf`` (greedy rows, ``T <= 0``, use ``T = 1``).
    """
    raw = _raw_logits(logits, vocab_limit)
    return raw, _top_k_threshold(_scaled_logits(raw, temperature), top_k)


def _top_k_threshold(scaled: jax.Array, top_k: int | None) -> jax.Array:
    """``scaled`` with everything below the ``top_k``-th largest value of its row at ``-inf``."""
    if top_k is None or top_k >= scaled.shape[-1]:
        return scaled
    kth = _top_k(scaled, top_k)[0][:, -1:]
    return jnp.where(scaled < kth, -jnp.inf, scaled)


#: Extra top-k candidates gathered so that ties at the k-th value are kept (see ``_sample``).
_TIE_SLACK = 16


def _sample(key: jax.Array, processed: jax.Array, top_k: int | None) -> jax.Array:
    """Draw one token per row from ``softmax(processed)`` (``-inf`` entries never drawn).

    With top-k only ``top_k + 16`` candidates can be finite in practice, so the Gumbel-max draw
    runs over ``lax.top_k(processed, top_k + 16)`` instead of the whole vocabulary (drawing
    ``B x V`` Gumbel variates per step dominated decoding time on CPU). If some row has more
    finite entries than that (more than 16 ties at the k-th value), the exact full-vocabulary
    draw is used instead, so the distribution is always exactly ``softmax(processed)``.
    """
    v = processed.shape[-1]
    if top_k is None or top_k + _TIE_SLACK >= v:
        return jax.random.categorical(key, processed, axis=-1)
    return _sample_from_candidates(key, processed, _top_k(processed, top_k + _TIE_SLACK), top_k)


def _sample_from_candidates(
    key: jax.Array, processed: jax.Array, candidates: tuple[jax.Array, jax.Array], top_k: int
) -> jax.Array:
    """:func:`_sample` given ``candidates = (values, index)``, the ``top_k + 16`` largest entries
    of ``processed`` (or any list that holds its finite entries first, in ``lax.top_k`` order,
    then ``-inf`` values: the Gumbel-max choice is the same)."""
    values, index = candidates
    finite = jnp.sum(jnp.isfinite(processed), axis=-1)

    def from_candidates() -> jax.Array:
        choice = jax.random.categorical(key, values, axis=-1)
        return _pick(index, choice)

    def full() -> jax.Array:
        return jax.random.categorical(key, processed, axis=-1)

    return jax.lax.cond(jnp.any(finite > top_k + _TIE_SLACK), full, from_candidates)


def _choose(
    key: jax.Array, logits: jax.Array, temperature: jax.Array, config: SampleConfig
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One decoding step's ``(token, logprob, logprob_raw)`` per row (see the module docstring).

    Equal to :func:`process_logits` followed by :func:`_sample`, with two shortcuts that change
    no result: a batch of greedy rows only skips the sampling branch, and the top-k threshold and
    the sampling candidates come from one ``lax.top_k(z / T, top_k + 16)`` (its first ``top_k``
    values are ``lax.top_k(z / T, top_k)``'s; after thresholding, its finite entries are exactly
    the processed logits' finite entries in the same order, and the rest are ``-inf``).
    """
    raw = _raw_logits(logits, config.vocab_limit)
    greedy = temperature <= 0

    def all_greedy() -> tuple[jax.Array, jax.Array, jax.Array]:
        token, raw_max = _argmax(raw)
        logp_raw = _log_softmax_at(raw, token, x_max=raw_max)
        return token, logp_raw, logp_raw

    def mixed() -> tuple[jax.Array, jax.Array, jax.Array]:
        scaled = _scaled_logits(raw, temperature)
        top_k = config.top_k
        if top_k is None or top_k + _TIE_SLACK >= scaled.shape[-1]:
            processed = _top_k_threshold(scaled, top_k)
            sampled = _sample(key, processed, top_k)
        else:
            values, index = _top_k(scaled, top_k + _TIE_SLACK)
            kth = values[:, top_k - 1 : top_k]
            processed = jnp.where(scaled < kth, -jnp.inf, scaled)
            values = jnp.where(values < kth, -jnp.inf, values)
            sampled = _sample_from_candidates(key, processed, (values, index), top_k)
        token = jnp.where(greedy, _argmax(raw)[0], sampled).astype(jnp.int32)
        logp_raw = _log_softmax_at(raw, token)
        logp = jnp.where(greedy, logp_raw, _log_softmax_at(processed, token))
        return token, logp, logp_raw

    return jax.lax.cond(jnp.all(greedy), all_greedy, mixed)


def _argmax(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(jnp.argmax(x, -1), jnp.max(x, -1))`` for ``[B, V]`` rows, by two plain reductions.

    The index is the first maximal one, or the first NaN if a row has one, exactly as
    ``jnp.argmax``; XLA:CPU runs argmax's (value, index) reduce ~3.5x slower than ``max`` followed
    by ``min`` over the indices that hit it (V = 50304: 0.98 ms against 0.28 ms).
    """
    x_max = jnp.max(x, axis=-1)
    hit = (x == x_max[:, None]) | jnp.isnan(x)
    v = x.shape[-1]
    index = jnp.min(jnp.where(hit, jnp.arange(v, dtype=jnp.int32), v), axis=-1)
    return index, x_max


def _pick(values: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take_along_axis(values, index[:, None], axis=-1)[:, 0]


def _log_softmax_at(x: jax.Array, token: jax.Array, x_max: jax.Array | None = None) -> jax.Array:
    """``jax.nn.log_softmax(x)[b, token[b]]`` with the same float operations, without writing
    the ``[B, V]`` result: ``(x[token] - max x) - log(sum(exp(x - max x)))``. ``x_max [B]`` may be
    passed when known (e.g. ``x[argmax x]``)."""
    if x_max is None:
        x_max = jnp.max(x, axis=-1, initial=-jnp.inf)
    lse = jnp.log(jnp.sum(jnp.exp(x - x_max[:, None]), axis=-1))
    return (_pick(x, token) - x_max) - lse


def _generate_core(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    key: jax.Array,
    prompt_ids: jax.Array,
    prompt_mask: jax.Array,
    temperature: jax.Array,
    config: SampleConfig,
    prompt_rows: jax.Array | None = None,
) -> Generation:
    if config.compute_dtype is not None:  # once per call, before the decoding loop
        state = cast_floats(state, config.compute_dtype)
    model = nnx.merge(graphdef, state)
    u, p = prompt_ids.shape
    n = config.max_new_tokens
    slots = p + n
    prompt_mask = prompt_mask.astype(jnp.int32)
    slot_valid = jnp.concatenate([prompt_mask, jnp.ones((u, n), jnp.int32)], axis=1)
    positions = jnp.maximum(jnp.cumsum(prompt_mask, axis=1) - 1, 0)
    num_real = jnp.sum(prompt_mask, axis=1)
    cache = model.init_cache(u, slots)
    mask = attention_mask_for(slot_valid, jnp.arange(p))
    h, cache = model.hidden(prompt_ids, mask, positions, cache, 0)
    logits = model.logits(h[:, -1])
    if prompt_rows is not None:  # each distinct prompt's prefix was computed once: fan it out
        cache, logits, slot_valid, num_real = jax.tree.map(
            lambda a: jnp.take(a, prompt_rows, axis=0), (cache, logits, slot_valid, num_real)
        )
    b = logits.shape[0]
    stop_ids = jnp.asarray(config.stop_token_ids or (-1,), jnp.int32)

    tokens = jnp.full((b, n), config.pad_token_id, jnp.int32)
    zeros = jnp.zeros((b, n), jnp.float32)
    init = (
        jnp.zeros((), jnp.int32),
        logits,
        cache,
        tokens,
        zeros,
        zeros,
        jnp.zeros((b,), bool),
        jnp.zeros((b,), jnp.int32),
    )

    def cond(carry: tuple[Any, ...]) -> jax.Array:
        i, *_, done, _ = carry
        return (i < n) & ~jnp.all(done)

    def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        i, logits, cache, tokens, lp, lp_raw, done, lengths = carry
        token, logp, logp_raw = _choose(jax.random.fold_in(key, i), logits, temperature, config)
        token = jnp.where(done, config.pad_token_id, token)
        tokens = tokens.at[:, i].set(token)
        lp = lp.at[:, i].set(jnp.where(done, 0.0, logp))
        lp_raw = lp_raw.at[:, i].set(jnp.where(done, 0.0, logp_raw))
        lengths = lengths + (~done).astype(jnp.int32)
        done = done | jnp.any(token[:, None] == stop_ids[None, :], axis=-1)
        step_mask = attention_mask_for(slot_valid, (p + i)[None])
        h, cache = model.hidden(token[:, None], step_mask, (num_real + i)[:, None], cache, p + i)
        return i + 1, model.logits(h[:, 0]), cache, tokens, lp, lp_raw, done, lengths

    _, _, _, tokens, lp, lp_raw, done, lengths = jax.lax.while_loop(cond, body, init)
    return Generation(tokens, lp, lp_raw, lengths, done)


_jitted_core = jax.jit(_generate_core, static_argnames=("graphdef", "config"))


@functools.lru_cache(maxsize=16)
def _sharded_core(mesh: Mesh, shared_prompts: bool = False) -> Any:
    """The core over ``mesh``: rows split over ``"data"``, parameters replicated. With
    ``shared_prompts`` the distinct prompts are replicated too (every device computes all their
    prefixes) and ``prompt_rows`` is split with the rows."""
    repl = parallel.replicated_sharding(mesh)
    data = parallel.batch_sharding(mesh)
    prompts = repl if shared_prompts else data
    return jax.jit(
        _generate_core,
        static_argnames=("graphdef", "config"),
        in_shardings=(repl, repl, prompts, prompts, data) + ((data,) if shared_prompts else ()),
        out_shardings=data,
    )


def _validate(
    model: Any,
    prompt_ids: Any,
    prompt_mask: Any,
    config: SampleConfig,
    temperature: Any,
    prompt_rows: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    if not isinstance(config, SampleConfig):
        raise ValueError(f"config must be a SampleConfig, got {type(config).__name__}")
    ids = np.asarray(prompt_ids)
    mask = np.asarray(prompt_mask)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"prompt_ids must be an int [B, P] array, got {ids.dtype}{ids.shape}")
    if mask.shape != ids.shape:
        raise ValueError(f"prompt_mask must have shape {ids.shape}, got {mask.shape}")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("prompt_mask must contain only 0/1")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"empty prompt batch {ids.shape}")
    if (mask.sum(axis=1) == 0).any():
        raise ValueError("every prompt needs at least one real token (a row of prompt_mask is 0)")
    if (np.diff(mask.astype(np.int8), axis=1) < 0).any():
        raise ValueError("prompts must be LEFT-padded: prompt_mask rows must look like 0..0 1..1")
    vocab = model.config.vocab_size
    real = ids[mask > 0]
    if real.size and (real.min() < 0 or real.max() >= vocab):
        raise ValueError(f"prompt token ids must be in [0, {vocab})")
    max_pos = model.config.max_position_embeddings
    if ids.shape[1] + config.max_new_tokens > max_pos:
        raise ValueError(
            f"prompt length {ids.shape[1]} + max_new_tokens {config.max_new_tokens} exceeds "
            f"max_position_embeddings={max_pos}"
        )
    if config.compute_dtype is not None and not hasattr(model.config, "compute_dtype"):
        raise ValueError(
            f"compute_dtype={config.compute_dtype!r} needs a Pythia model (PythiaConfig with "
            f"param_dtype/compute_dtype); got {type(model).__name__}"
        )
    if config.vocab_limit is not None and config.vocab_limit > vocab:
        raise ValueError(f"vocab_limit {config.vocab_limit} exceeds the model's vocab {vocab}")
    for token in (*config.stop_token_ids, config.pad_token_id):
        if not 0 <= token < vocab:
            raise ValueError(f"stop/pad token id {token} outside the vocabulary [0, {vocab})")
    rows = None
    b = ids.shape[0]
    if prompt_rows is not None:
        rows = np.asarray(prompt_rows)
        if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"prompt_rows must be a non-empty int [B] array, got {rows.shape}")
        if rows.min() < 0 or rows.max() >= b:
            raise ValueError(f"prompt_rows must index the {b} prompts: values in [0, {b})")
        rows = rows.astype(np.int32)
        b = rows.size
    temp = np.asarray(temperature, np.float32)
    if temp.ndim == 0:
        temp = np.full((b,), temp, np.float32)
    if temp.shape != (b,):
        raise ValueError(f"temperature must be a scalar or shape ({b},), got {temp.shape}")
    if not np.isfinite(temp).all():
        raise ValueError("temperature must be finite (<= 0 means greedy)")
    return ids.astype(np.int32), mask.astype(np.int32), temp, rows


def split_for_generation(model: nnx.Module, config: SampleConfig) -> tuple[nnx.GraphDef, Any]:
    """``(graphdef, state)`` that :func:`generate` passes to the jitted core: ``nnx.split(model)``,
    with the graph of the model in ``config.compute_dtype`` when that is set
    (:func:`~llome_jax.lm.pythia.graphdef_in_dtype`; the state is cast inside the call). A model
    already in that dtype keeps its own graph, so ``"float32"`` on an fp32 model changes nothing.
    """
    graphdef, state = nnx.split(model)
    dtype = config.compute_dtype
    if dtype is not None and (model.config.param_dtype, model.config.compute_dtype) != (
        dtype,
        dtype,
    ):
        graphdef = graphdef_in_dtype(model.config, dtype)
    return graphdef, state


def generate(
    key: jax.Array,
    model: nnx.Module,
    prompt_ids: Any,
    prompt_mask: Any,
    config: SampleConfig,
    temperature: float | jax.Array = 1.0,
    mesh: Mesh | None = None,
    prompt_rows: Any = None,
) -> Generation:
    """Decode up to ``config.max_new_tokens`` tokens for every left-padded prompt.

    Args:
      key: typed PRNG key (unused by greedy rows; the result is deterministic per key).
      model: a :class:`llome_jax.lm.pythia.Pythia` (anything with its KV-cache methods).
      prompt_ids: int ``[B, P]``, LEFT-padded.
      prompt_mask: 0/1 ``[B, P]``, 1 on real tokens.
      config: :class:`SampleConfig`.
      temperature: scalar or f32 ``[B]``; ``<= 0`` means greedy for that row, so one batch can
        mix greedy rows and several temperatures.
      mesh: optional data-parallel mesh; ``B`` must divide over its ``"data"`` axis.
      prompt_rows: optional int ``[B]``: output row ``b`` continues prompt ``prompt_rows[b]``
        (HF's ``num_return_sequences``, generalised). The prompt pass then runs once per given
        prompt (``prompt_ids`` is ``[U, P]``, e.g. the distinct prompts) and its KV cache is
        copied to the rows, so rows that share a prompt do not recompute it; ``B`` (the batch
        of the outputs, the temperatures and the sampling) is ``len(prompt_rows)``. The result
        equals the call on the expanded prompts ``prompt_ids[prompt_rows]`` (tested).
        With a mesh the prompts are replicated and every device computes all ``U`` prefixes.

    Returns:
      :class:`Generation` (arrays ``[B, N]`` / ``[B]``).

    Raises:
      ValueError: on malformed inputs (checked before anything is compiled).
    """
    ids, mask, temp, rows = _validate(
        model, prompt_ids, prompt_mask, config, temperature, prompt_rows
    )
    graphdef, state = split_for_generation(model, config)
    if mesh is None:
        return _jitted_core(graphdef, state, key, ids, mask, temp, config, rows)
    state = parallel.replicate(state, mesh)
    key = parallel.replicate(key, mesh)
    if rows is not None:
        ids, mask = parallel.replicate((ids, mask), mesh)
        temp, rows = parallel.shard_batch((temp, rows), mesh)  # checks divisibility first
        return _sharded_core(mesh, shared_prompts=True)(
            graphdef, state, key, ids, mask, temp, config, rows
        )
    parallel.check_batch_divisible((ids, mask, temp), mesh)
    ids, mask, temp = parallel.shard_batch((ids, mask, temp), mesh)
    return _sharded_core(mesh)(graphdef, state, key, ids, mask, temp, config)
