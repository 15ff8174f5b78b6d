"""Iterative refinement: LLOME's inner loop (paper App. "Algorithms", Alg. IterativeRefinement).

For every seed ``x`` (``n_s`` of them) and every decoding *job* — greedy (if ``config.greedy``)
and each temperature ``t`` in ``T`` — a trajectory runs ``n_i`` iterations::

    x_0 = x
    greedy job:   x_{i+1} = GreedyDecoding(pi_theta; x_i)                      (1 output)
    job t:        X_i = {x_j ~ pi_theta^t(. | x_i)}_{j=1..n_o};                (n_o outputs)
                  x_{i+1} = argmax_{x' in X_i} pi_theta(x' | x_i)
    S' = Deduplicate(all outputs)

so ``num_generated = n_s * n_i * (1 + |T| n_o)`` (122,000 with the paper's ``n_s = 200,
n_i = 10, n_o = 10, |T| = 6``). All trajectories advance together: one iteration is ONE batched
:func:`llome_jax.lm.sample.generate` call over every (trajectory, sample) row with a per-row
temperature (``0`` = greedy), split into equal fixed-shape chunks of at most
``config.batch_size`` rows (so it compiles once; see ``_chunking``); within a chunk the prompt
pass runs once per distinct prompt (``share_prompts``), and on XLA:CPU without a mesh the
chunks run concurrently on the host's cores (:mod:`llome_jax.host.threads`; same numbers).
Outputs are cut at the first ``]`` token, parsed and validated by the
:class:`~llome_jax.lm.codec.SequenceCodec`; invalid outputs are counted, never kept, never
chosen as the next input (a trajectory keeps its prompt when nothing valid came out).

Likelihoods (as the authors' code computes them): ``log_likelihood`` is the mean over the kept
tokens (up to and including ``]``) of the log-softmax of the *processed* logits (temperature, top-k;
raw for greedy rows), ``log_likelihood_raw`` the same with the raw logits (``pi_theta`` at
``T = 1``).

Paper vs authors' code (docs/design/refinement.md):

* next input: the paper takes the best sample of *this* iteration (``next_input="paper"``); the
  code the best valid output *ever* produced in the trajectory (``"reference"``), see
  :func:`llome_jax.llome.seeds.next_refinement_inputs`.
* the ranking likelihood: the paper writes ``pi_theta`` (untempered) for the argmax, the code
  ranks by the processed (temperature-dependent) log-probs: ``selection_likelihood="raw"`` /
  ``"processed"``. Both are per-token means (identical ranking to sums on the Ehrlich tokenizer,
  whose valid outputs all have ``2L + 1`` tokens).
* order and deduplication: rows are ordered as the code's combined file (greedy job first, then
  temperatures ascending as given; within a job by seed, iteration, sample) and the first
  occurrence of each sequence is kept. Seeds themselves are not part of the output.

No oracle is called: feasibility (``ehrlich.is_feasible``, the DMP constraint check; for an
:class:`~llome_jax.objective.Objective` its ``is_feasible``, every sequence without one) is
reported; values are computed by the loop after the Filter.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich
from llome_jax.host import threads as host_threads
from llome_jax.host.parallel import DATA_AXIS
from llome_jax.llome.data import first_occurrences
from llome_jax.llome.seeds import next_refinement_inputs
from llome_jax.lm import sample  # sample.generate looked up per call (tests replace it)
from llome_jax.objective import Objective, problem_shape
from llome_jax.objective import feasible as objective_feasible

__all__ = ["RefineConfig", "Refinement", "iterative_refinement"]

_NEXT_INPUT = ("paper", "reference")
_SELECTION = ("raw", "processed")
_GENERATE_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class RefineConfig:
    """Static settings of iterative refinement (defaults: the paper's ``n_i = n_o = 10``).

    Attributes:
      num_iterations: ``n_i``, iterations per trajectory.
      num_samples: ``n_o``, samples per iteration for each temperature.
      greedy: also run the greedy trajectory of every seed.
      top_k: top-k filter of sampling (HF default 50, used by the authors); ``None`` = off.
      batch_size: at most this many rows per ``generate`` call. Each iteration's rows are split
        into equal fixed-shape chunks, a multiple of 8 (and of the mesh size) that is at most
        ``batch_size`` rounded down to such a multiple; the last chunk is padded.
      next_input: ``"paper"`` (best output of this iteration) or ``"reference"`` (best so far).
      selection_likelihood: likelihood ranking the outputs for the next input: ``"raw"``
        (``pi_theta``, paper) or ``"processed"`` (temperature/top-k log-probs, authors' code).
      share_prompts: run the prompt pass once per distinct prompt of a chunk and copy its KV
        cache to the rows that continue it (the ``n_o`` samples of a trajectory share their
        input; ``generate(..., prompt_rows=...)``). Same outputs; off = one prompt pass per row.
      generate_dtype: ``"float32"`` (default): generate with the model as it is (fp32
        parameters and KV cache). ``"bfloat16"``: parameters and KV cache cast to bf16 for
        generation only (``SampleConfig.compute_dtype``; training stays fp32). Changes tokens
        and log-probs slightly (docs/design/pythia.md, "bf16 generation").
    """

    num_iterations: int = 10
    num_samples: int = 10
    greedy: bool = True
    top_k: int | None = 50
    batch_size: int = 1024
    next_input: str = "paper"
    selection_likelihood: str = "raw"
    share_prompts: bool = True
    generate_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations (n_i) must be >= 1; got {self.num_iterations}.")
        if self.num_samples < 0:
            raise ValueError(f"num_samples (n_o) must be >= 0; got {self.num_samples}.")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None; got {self.top_k}.")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}.")
        if self.next_input not in _NEXT_INPUT:
            raise ValueError(f"next_input must be one of {_NEXT_INPUT}; got {self.next_input!r}.")
        if self.generate_dtype not in _GENERATE_DTYPES:
            raise ValueError(
                f"generate_dtype must be one of {_GENERATE_DTYPES}; got {self.generate_dtype!r}."
            )
        if self.selection_likelihood not in _SELECTION:
            raise ValueError(
                f"selection_likelihood must be one of {_SELECTION}; got "
                f"{self.selection_likelihood!r}."
            )

    @classmethod
    def reference(cls, **overrides: Any) -> RefineConfig:
        """The authors' code: best-so-far next input ranked by processed log-probs."""
        return cls(**{"next_input": "reference", "selection_likelihood": "processed", **overrides})


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "sequences",
        "inputs",
        "log_likelihood",
        "log_likelihood_raw",
        "iteration",
        "temperature",
        "seed_index",
        "feasible",
        "num_generated",
        "num_valid",
        "mean_hamming",
    ],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class Refinement:
    """The output ``S'``: one row per valid, distinct generated sequence (host numpy arrays).

    Attributes:
      sequences: int32 ``[M, L]``.
      inputs: int32 ``[M, L]`` the prompt each was generated from.
      log_likelihood: float32 ``[M]`` mean processed per-token log-prob (the Filter's input).
      log_likelihood_raw: float32 ``[M]`` mean raw per-token log-prob.
      iteration: int32 ``[M]`` 1-based refinement iteration.
      temperature: float32 ``[M]`` sampling temperature, ``0`` for greedy.
      seed_index: int32 ``[M]`` row of ``seeds`` that started the trajectory.
      feasible: bool ``[M]`` ``ehrlich.is_feasible`` / ``Objective.feasible`` (constraint check,
        not an oracle call).
      num_generated: all outputs, invalid included (``n_s n_i (g + |T| n_o)``).
      num_valid: valid outputs before deduplication.
      mean_hamming: mean fractional Hamming distance output vs. input over the valid outputs
        before deduplication (the temperature schedule's ``hd``; NaN if none is valid).
    """

    sequences: np.ndarray
    inputs: np.ndarray
    log_likelihood: np.ndarray
    log_likelihood_raw: np.ndarray
    iteration: np.ndarray
    temperature: np.ndarray
    seed_index: np.ndarray
    feasible: np.ndarray
    num_generated: int
    num_valid: int
    mean_hamming: float

    @property
    def num_unique(self) -> int:
        """``M``, valid distinct sequences."""
        return int(self.sequences.shape[0])


def _mesh_size(mesh: Any) -> int:
    if mesh is None:
        return 1

    return int(mesh.shape[DATA_AXIS])


def _chunking(rows: int, batch_size: int, devices: int) -> tuple[int, int]:
    """``(chunk, num_chunks)``: balanced chunks, each a multiple of ``m = lcm(8, devices)``.

    ``num_chunks = ceil(rows / b)`` with ``b`` = ``batch_size`` rounded down to a multiple of
    ``m`` (at least ``m``), ``chunk = ceil(rows / num_chunks)`` rounded up to a multiple of ``m``
    (so ``chunk <= b``). The chunk shape does not depend on the mesh as long as its size divides
    8, which makes 1, 2, 4 and 8 devices give identical samples.
    """
    m = math.lcm(8, devices)
    b = max(batch_size // m * m, m)
    num_chunks = -(-rows // b)
    chunk = math.ceil(math.ceil(rows / num_chunks) / m) * m
    return chunk, math.ceil(rows / chunk)


def _shared_prompts(
    ids: np.ndarray, mask: np.ndarray, multiple: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The distinct prompts of one chunk: ``(ids [U', P], mask [U', P], rows [B])`` with
    ``ids[rows] == chunk ids``, or ``None`` when sharing would not pay (more than half distinct).

    ``U'`` is a bucket, ``B / 4`` or ``B / 2`` rounded up to ``multiple``, so that at most two
    extra shapes compile; the bucket's spare rows repeat prompt 0 and are never referenced.
    """
    b = ids.shape[0]
    _, first, rows = np.unique(ids, axis=0, return_index=True, return_inverse=True)
    for bucket in (math.ceil(b / 4 / multiple) * multiple, math.ceil(b / 2 / multiple) * multiple):
        if first.size <= bucket < b:
            take = np.concatenate([first, np.full(bucket - first.size, first[0])])
            return ids[take], mask[take], rows.reshape(-1).astype(np.int32)
    return None


def _validate(codec: Any, fn: Any, seeds: Any, temperatures: Any, config: Any) -> tuple:
    if not isinstance(config, RefineConfig):
        raise ValueError(f"config must be a RefineConfig; got {type(config).__name__}.")

    num_states, length, name = problem_shape(fn)
    if (codec.length, codec.num_states) != (length, num_states):
        raise ValueError(
            f"codec is for L={codec.length}, v={codec.num_states} but the function {name} "
            f"has L={length}, v={num_states}."
        )
    x = np.asarray(seeds)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != length:
        raise ValueError(f"seeds must be a non-empty int array [n_s, {length}]; got {x.shape}.")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"seeds must hold integer states; got dtype {x.dtype}.")
    if x.min() < 0 or x.max() >= num_states:
        raise ValueError(f"seed states must lie in [0, {num_states}).")
    temps = tuple(float(t) for t in np.atleast_1d(np.asarray(temperatures, np.float64)))
    if any(not (math.isfinite(t) and t > 0) for t in temps):
        raise ValueError(f"temperatures must be finite and > 0; got {temps}.")
    if not config.greedy and (not temps or config.num_samples == 0):
        raise ValueError("nothing to generate: greedy=False and no temperatures/samples.")
    return x.astype(np.int32), temps


def iterative_refinement(
    key: jax.Array,
    model: Any,
    codec: Any,
    fn: ehrlich.Ehrlich | Objective,
    seeds: Any,
    temperatures: Sequence[float],
    config: RefineConfig = RefineConfig(),
    *,
    mesh: Any = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> Refinement:
    """Run Alg. IterativeRefinement from ``seeds`` and return the deduplicated valid outputs.

    Args:
      key: typed PRNG key; the result is a deterministic function of it (and of
        ``config.batch_size``, which fixes the chunking).
      model: a :class:`llome_jax.lm.pythia.Pythia` (KV-cache decoding).
      codec: :class:`llome_jax.lm.codec.SequenceCodec` for ``fn``'s ``v`` and ``L``.
      fn: the Ehrlich instance or an :class:`~llome_jax.objective.Objective` (only its constraint
        check is used; an objective without ``is_feasible`` counts every sequence feasible).
      seeds: int ``[n_s, L]`` seed sequences (e.g. from ``select_seeds``).
      temperatures: the grid ``T`` (all ``> 0``), e.g. ``schedule.temperatures(...)``.
      config: :class:`RefineConfig`.
      mesh: optional data-parallel mesh passed to ``generate``; chunks are multiples of
        ``lcm(8, mesh size)``. Same result as without it when the mesh size divides 8.
      progress: called after every iteration with ``{"iteration", "num_iterations",
        "num_generated", "num_valid", "seconds"}`` (cumulative counts).

    Returns:
      :class:`Refinement`.

    Raises:
      ValueError: inconsistent codec/function, malformed seeds or temperatures.
    """
    seeds, temps = _validate(codec, fn, seeds, temperatures, config)
    n_s, L = seeds.shape
    n_o = config.num_samples if temps else 0
    job_temps = ([0.0] if config.greedy else []) + ([*temps] if n_o else [])
    job_rows = ([1] if config.greedy else []) + [n_o] * (len(job_temps) - int(config.greedy))
    num_jobs = len(job_temps)
    slots = max(job_rows)

    # Row layout of one iteration: job-major, then seed, then sample.
    traj, slot, temp = [], [], []
    for j, (t, r) in enumerate(zip(job_temps, job_rows)):
        traj.append(np.repeat(j * n_s + np.arange(n_s), r))
        slot.append(np.tile(np.arange(r), n_s))
        temp.append(np.full(n_s * r, t, np.float32))
    row_traj, row_slot, row_temp = (np.concatenate(a) for a in (traj, slot, temp))
    rows = row_traj.size

    multiple = math.lcm(8, _mesh_size(mesh))  # chunk shapes and shared-prompt buckets
    chunk, num_chunks = _chunking(rows, config.batch_size, _mesh_size(mesh))
    pad = num_chunks * chunk - rows
    # Padding rows repeat row 0 (discarded); they keep every chunk the same shape.
    gen_traj = np.concatenate([row_traj, np.zeros(pad, row_traj.dtype)])
    gen_temp = np.concatenate([row_temp, np.ones(pad, np.float32)])

    model_vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    vocab_limit = codec.vocab_size if model_vocab and model_vocab > codec.vocab_size else None
    sample_config = sample.SampleConfig(
        max_new_tokens=codec.max_new_tokens,
        top_k=config.top_k,
        stop_token_ids=tuple(int(t) for t in codec.stop_token_ids),
        pad_token_id=int(codec.pad_token_id),
        vocab_limit=vocab_limit,
        compute_dtype=None if config.generate_dtype == "float32" else config.generate_dtype,
    )
    best_so_far = config.next_input == "reference"

    inputs = np.tile(seeds, (num_jobs, 1))  # [J * n_s, L], trajectory t = job * n_s + seed
    best = np.full(num_jobs * n_s, -np.inf, np.float32)
    # One XLA:CPU call uses about one core and calls from different threads overlap
    # (llome_jax.host.threads); a mesh spreads each chunk over its devices, and an accelerator
    # runs one call at a time anyway.
    concurrent = mesh is None and jax.default_backend() == "cpu"
    record: dict[str, list[np.ndarray]] = {k: [] for k in ("seq", "inp", "ll", "raw", "valid")}
    num_valid, start = 0, time.perf_counter()
    for it in range(config.num_iterations):
        key_it = jax.random.fold_in(key, it)
        prompt_ids, prompt_mask = codec.encode_prompts(inputs)
        ids, mask = prompt_ids[gen_traj], prompt_mask[gen_traj]

        def dispatch(c: int, ids=ids, mask=mask, key_it=key_it) -> Any:
            part = slice(c * chunk, (c + 1) * chunk)
            shared = (
                _shared_prompts(ids[part], mask[part], multiple) if config.share_prompts else None
            )
            c_ids, c_mask, c_rows = (ids[part], mask[part], None) if shared is None else shared
            return sample.generate(
                jax.random.fold_in(key_it, c),
                model,
                c_ids,
                c_mask,
                sample_config,
                gen_temp[part],
                mesh=mesh,
                prompt_rows=c_rows,
            )

        def gather(out: Any) -> tuple[np.ndarray, ...]:
            return tuple(np.asarray(a) for a in (out.tokens, out.logprobs, out.logprobs_raw))

        if concurrent:  # each chunk computes what it would alone: the numbers do not change
            outs = host_threads.map_ordered(lambda c: gather(dispatch(c)), range(num_chunks))
        else:  # dispatched asynchronously, then gathered
            outs = [gather(o) for o in [dispatch(c) for c in range(num_chunks)]]
        tokens, logp, logp_raw = (np.concatenate(a)[:rows] for a in zip(*outs))

        seqs, valid = codec.decode(tokens)
        keep = codec.keep_mask(tokens)
        count = np.maximum(keep.sum(axis=1), 1)
        ll = (np.where(keep, logp, 0.0).sum(axis=1) / count).astype(np.float32)
        ll_raw = (np.where(keep, logp_raw, 0.0).sum(axis=1) / count).astype(np.float32)

        grid_seq = np.zeros((num_jobs * n_s, slots, L), np.int32)
        grid_ll = np.full((num_jobs * n_s, slots), np.nan, np.float32)
        grid_valid = np.zeros((num_jobs * n_s, slots), bool)
        grid_seq[row_traj, row_slot] = seqs
        grid_ll[row_traj, row_slot] = ll_raw if config.selection_likelihood == "raw" else ll
        grid_valid[row_traj, row_slot] = valid
        next_inputs, best = next_refinement_inputs(
            jnp.asarray(inputs),
            jnp.asarray(best),
            jnp.asarray(grid_seq),
            jnp.asarray(grid_ll),
            jnp.asarray(grid_valid),
            best_so_far=best_so_far,
        )
        record["seq"].append(seqs)
        record["inp"].append(inputs[row_traj])
        record["ll"].append(ll)
        record["raw"].append(ll_raw)
        record["valid"].append(valid)
        inputs, best = np.asarray(next_inputs), np.asarray(best)
        num_valid += int(valid.sum())
        if progress is not None:
            progress(
                {
                    "iteration": it + 1,
                    "num_iterations": config.num_iterations,
                    "num_generated": (it + 1) * rows,
                    "num_valid": num_valid,
                    "seconds": time.perf_counter() - start,
                }
            )

    # [n_i * rows] in generation order -> the reference's file order (job, seed, iteration, slot).
    n_i = config.num_iterations
    it_col = np.repeat(np.arange(1, n_i + 1, dtype=np.int32), rows)
    traj_col = np.tile(row_traj, n_i)
    order = np.lexsort((np.tile(row_slot, n_i), it_col, traj_col % n_s, traj_col // n_s))
    seq = np.concatenate(record["seq"])[order]
    inp = np.concatenate(record["inp"])[order]
    ll = np.concatenate(record["ll"])[order]
    raw = np.concatenate(record["raw"])[order]
    valid = np.concatenate(record["valid"])[order]
    it_col, traj_col = it_col[order], traj_col[order]
    temp_col = np.tile(row_temp, n_i)[order]

    v = np.flatnonzero(valid)
    hamming = float(np.mean(seq[v] != inp[v], dtype=np.float64)) if v.size else float("nan")
    keep_rows = v[first_occurrences(seq[v])]
    out_seq = seq[keep_rows].astype(np.int32)
    feasible = objective_feasible(fn, out_seq) if keep_rows.size else np.zeros(0, bool)
    return Refinement(
        sequences=out_seq,
        inputs=inp[keep_rows].astype(np.int32),
        log_likelihood=ll[keep_rows].astype(np.float32),
        log_likelihood_raw=raw[keep_rows].astype(np.float32),
        iteration=it_col[keep_rows].astype(np.int32),
        temperature=temp_col[keep_rows].astype(np.float32),
        seed_index=(traj_col[keep_rows] % n_s).astype(np.int32),
        feasible=feasible,
        num_generated=len(seq),  # the outputs decoded, counted (n_i rows per iteration)
        num_valid=int(v.size),
        mean_hamming=hamming,
    )
