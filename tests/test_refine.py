"""Iterative refinement: end to end with a tiny trained Pythia, and hand-built cases with a scripted
generator (next-input rules, likelihood choice, deduplication order, invalid outputs, chunking)."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from llome_jax import ehrlich
from llome_jax.ehrlich import EhrlichConfig
from llome_jax.host import parallel
from llome_jax.host import threads as host_threads
from llome_jax.llome.refine import RefineConfig, Refinement, _chunking, iterative_refinement
from llome_jax.lm import sample
from llome_jax.lm.codec import SequenceCodec
from llome_jax.lm.logprobs import sequence_logprobs
from llome_jax.lm.pythia import Pythia, PythiaConfig
from llome_jax.lm.tokenizer import make_ehrlich_tokenizer
from tests.test_sample import _EPS32, _logit_tolerance, _replay_decisions, _sequence_logits

V = L = 8
TEMPS = (0.7, 1.3)
RUN = RefineConfig(num_iterations=3, num_samples=3, batch_size=16)  # 28 rows/iteration: 2 chunks


@pytest.fixture(autouse=True)
def _one_generate_at_a_time(monkeypatch):
    """The spies and scripted stand-ins below tell calls apart by their position in the call
    order, which concurrent chunks would shuffle: here the chunks run one at a time (the module
    fixture ``run`` and ``test_concurrent_chunks_equal_one_at_a_time`` cover the concurrent path)."""
    monkeypatch.setattr(host_threads, "pool", lambda: (None, 1))


@pytest.fixture(scope="module")
def fn():
    return ehrlich.make(
        jax.random.key(0), EhrlichConfig(num_states=V, dim=L, num_motifs=2, motif_length=2)
    )


@pytest.fixture(scope="module")
def codec():
    return SequenceCodec(make_ehrlich_tokenizer(V), V, L)


def _tiny_model(codec, seed=0):
    cfg = PythiaConfig.preset(
        "tiny",
        vocab_size=codec.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return Pythia(cfg, rngs=nnx.Rngs(seed))


@pytest.fixture(scope="module")
def model(codec):
    """A tiny Pythia trained briefly on (x -> x with 15 % mutations): mostly valid outputs."""
    model = _tiny_model(codec)
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, (512, L))
    y = x.copy()
    m = rng.random(x.shape) < 0.15
    y[m] = rng.integers(0, V, m.sum())
    ids, tmask, _ = codec.encode_pairs(x, y)
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, ids, tmask):
        def loss(model):
            lp = sequence_logprobs(model(ids), ids, tmask)
            return -lp.sum_logp.sum() / lp.num_tokens.sum()

        value, grads = nnx.value_and_grad(loss)(model)
        opt.update(model, grads)
        return value

    for _ in range(60):
        b = rng.integers(0, 512, 64)
        step(model, opt, ids[b], tmask[b])
    return model


@pytest.fixture(scope="module")
def seeds(fn):
    return np.asarray(ehrlich.initial_solution(jax.random.key(1), fn, 4))


@pytest.fixture(scope="module")
def run(model, codec, fn, seeds):
    return iterative_refinement(jax.random.key(2), model, codec, fn, seeds, TEMPS, RUN)


def _fields(r: Refinement) -> dict:
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}


def _assert_same(a: Refinement, b: Refinement, atol: float = 0.0) -> None:
    for name, value in _fields(a).items():
        if np.issubdtype(np.asarray(value).dtype, np.floating) and atol:
            np.testing.assert_allclose(value, getattr(b, name), rtol=0, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(value, getattr(b, name), err_msg=name)


# ------------------------------------------------------------------------- end to end (real LM)
def test_end_to_end_counts_and_fields(run, fn, seeds):
    n_s, n_i, n_o = 4, 3, 3
    assert run.num_generated == n_s * n_i * (1 + len(TEMPS) * n_o) == 84
    m = run.num_unique
    assert 0 < m <= run.num_valid <= run.num_generated
    assert run.num_valid > 40, "the trained tiny model should mostly produce valid lists"
    assert run.sequences.shape == run.inputs.shape == (m, L)
    assert run.sequences.dtype == np.int32 and run.feasible.dtype == bool
    assert len({tuple(r) for r in run.sequences.tolist()}) == m  # deduplicated
    assert run.sequences.min() >= 0 and run.sequences.max() < V
    np.testing.assert_array_equal(run.feasible, np.asarray(ehrlich.is_feasible(fn, run.sequences)))
    # every job, iteration and seed contributes candidates (a lost job or iteration fails)
    assert set(run.temperature.tolist()) == {0.0, *np.float32(TEMPS).tolist()}
    assert set(run.iteration.tolist()) == {1, 2, 3}
    assert set(run.seed_index.tolist()) == set(range(4))
    first = run.iteration == 1  # iteration 1 is prompted with the seeds themselves
    np.testing.assert_array_equal(run.inputs[first], seeds[run.seed_index[first]])
    assert 0.0 <= run.mean_hamming <= 1.0
    assert np.all(np.isfinite(run.log_likelihood)) and np.all(run.log_likelihood <= 0)
    greedy = run.temperature == 0
    np.testing.assert_array_equal(run.log_likelihood[greedy], run.log_likelihood_raw[greedy])
    # rows follow the reference's file order: job (greedy, then T ascending), seed, iteration
    job = np.searchsorted(np.float32((0.0, *TEMPS)), run.temperature)
    key = list(zip(job, run.seed_index, run.iteration))
    assert key == sorted(key)


@nnx.jit
def _forward(model, ids):
    return model(ids)


def test_likelihoods_and_greedy_match_independent_forward(run, model, codec, seeds):
    """Re-score every output with a plain forward pass (no KV cache); greedy = manual argmax."""
    prompt, _ = codec.encode_prompts(run.inputs)
    ids, tmask, _ = codec.encode_pairs(run.inputs, run.sequences)
    logits = _forward(model, jnp.asarray(ids))
    raw = sequence_logprobs(logits, ids, tmask)
    np.testing.assert_allclose(
        run.log_likelihood_raw, raw.sum_logp / raw.num_tokens, rtol=1e-4, atol=1e-4
    )
    # processed = log-softmax(z / T) (top_k = 50 > vocab, so no top-k mask); greedy rows: raw
    t = np.where(run.temperature > 0, run.temperature, 1.0)
    proc = sequence_logprobs(logits / t[:, None, None], ids, tmask)
    np.testing.assert_allclose(
        run.log_likelihood, proc.sum_logp / proc.num_tokens, rtol=1e-4, atol=1e-4
    )
    # greedy rows of iteration 1: decode the seeds by full forward passes over a fixed-size
    # buffer (causal: positions after the current one do not influence its logits)
    rows = np.flatnonzero((run.temperature == 0) & (run.iteration == 1))
    assert rows.size
    p, n = prompt.shape[1], codec.max_new_tokens
    buf = np.concatenate([prompt[rows], np.zeros((rows.size, n), prompt.dtype)], axis=1)
    for k in range(n):
        logits = _forward(model, jnp.asarray(buf))
        buf[:, p + k] = np.asarray(jnp.argmax(logits[:, p + k - 1], axis=-1))
    seqs, valid = codec.decode(buf[:, p:])
    assert valid.all()
    np.testing.assert_array_equal(seqs, run.sequences[rows])


def test_deterministic_per_key(run, model, codec, fn, seeds):
    again = iterative_refinement(jax.random.key(2), model, codec, fn, seeds, TEMPS, RUN)
    _assert_same(run, again)
    other = iterative_refinement(jax.random.key(3), model, codec, fn, seeds, TEMPS, RUN)
    sampled = run.temperature > 0
    assert not np.array_equal(run.sequences[sampled], other.sequences[other.temperature > 0])


class _RecordingGenerate:
    """Spy on ``sample.generate``: every call's arguments and output, as host arrays."""

    def __init__(self) -> None:
        self.real, self.calls = sample.generate, []

    def __call__(self, key, model, ids, mask, config, temperature, mesh=None, prompt_rows=None):
        out = self.real(
            key, model, ids, mask, config, temperature, mesh=mesh, prompt_rows=prompt_rows
        )
        host = jax.tree.map(np.asarray, out)
        ids, mask = _expanded(ids, mask, prompt_rows)
        self.calls.append((key, ids, mask, config, temperature, host))
        return out


def _expanded(ids, mask, prompt_rows):
    """The per-row prompts of a ``generate`` call (``ids[prompt_rows]`` when prompts are shared)."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    if prompt_rows is None:
        return ids, mask
    return ids[np.asarray(prompt_rows)], mask[np.asarray(prompt_rows)]


def _recorded_refinement(monkeypatch, model, codec, fn, seeds, mesh=None):
    spy = _RecordingGenerate()
    with monkeypatch.context() as patch:
        patch.setattr(sample, "generate", spy)
        out = iterative_refinement(
            jax.random.key(2), model, codec, fn, seeds, TEMPS, RUN, mesh=mesh
        )
    return out, spy.calls


def _selection_gaps(codec, calls, iteration: int, n_s: int) -> tuple[np.ndarray, float]:
    """For one iteration's sampled trajectories: best minus every other mean raw log-prob of a
    valid output holding *another* sequence (equal sequences give the same next prompt), from
    the documented row layout (job-major, seed, sample; the greedy job first, one row per seed).
    Returns ``(gaps, largest |mean log-prob|)``."""
    per_iteration = len(calls) // RUN.num_iterations
    outs = [c[-1] for c in calls[iteration * per_iteration : (iteration + 1) * per_iteration]]
    rows = n_s * (1 + len(TEMPS) * RUN.num_samples)
    tokens = np.concatenate([o.tokens for o in outs])[:rows]
    raw = np.concatenate([o.logprobs_raw for o in outs])[:rows]
    seqs, valid = codec.decode(tokens)
    keep = codec.keep_mask(tokens)
    ll = np.where(keep, raw, 0.0).sum(1) / np.maximum(keep.sum(1), 1)
    gaps = [np.inf]
    for start in range(n_s, rows, RUN.num_samples):
        group = np.flatnonzero(valid[start : start + RUN.num_samples]) + start
        if group.size:
            best = group[np.argmax(ll[group])]
            gaps += [ll[best] - ll[r] for r in group if not np.array_equal(seqs[r], seqs[best])]
    return np.asarray(gaps), float(np.abs(ll).max())


def _agree_up_to_near_ties(model, codec, n_s, calls_1, calls_8) -> str | None:
    """Compare two refinements' generate calls in order: equal prompts and tokens, and log-probs
    to the tolerance the logits imply, up to the first divergence, which must be a near-tie of
    run 1 (judged from full-forward logits of its path). Returns ``None`` if the runs never
    diverge, else what diverged; raises ``AssertionError`` on an unjustified difference."""
    assert len(calls_1) == len(calls_8) == RUN.num_iterations * 2
    per_iteration = len(calls_1) // RUN.num_iterations
    tol = 0.0
    for c, (a, b) in enumerate(zip(calls_1, calls_8)):
        key, ids, mask, config, temperature, out_1 = a
        out_8 = b[-1]
        np.testing.assert_array_equal(np.asarray(temperature), np.asarray(b[4]))
        logits = _sequence_logits(model, ids, mask, out_1)
        call_tol = _logit_tolerance(logits)  # 16 ulps of max |logit| (see tests/test_sample.py)
        tol = max(tol, call_tol)
        if not (np.array_equal(ids, b[1]) and np.array_equal(mask, b[2])):
            # other prompts after equal tokens: a next-prompt choice of the previous iteration
            # flipped; mean log-probs move by <= 2 tol, so it was within 4 tol of a tie
            assert c % per_iteration == 0 and c > 0
            gaps, largest = _selection_gaps(codec, calls_1, c // per_iteration - 1, n_s)
            assert gaps.min() <= 4 * tol + 8 * _EPS32 * largest, f"clear choice {gaps.min()}"
            return f"next prompt of iteration {c // per_iteration}"
        replay, margin = _replay_decisions(key, logits, temperature, config, out_1.lengths)
        live = np.arange(logits.shape[1])[None, :] < out_1.lengths[:, None]
        np.testing.assert_array_equal(replay[live], out_1.tokens[live])  # the replay is faithful
        differs = out_1.tokens != out_8.tokens
        if differs.any():
            # each diverging row's first differing token is a near-tie: both caches are within
            # tol of the full forward, so its full-forward margin is <= 4 tol
            rows = np.flatnonzero(differs.any(1))
            first = margin[rows, differs[rows].argmax(1)]
            assert np.all(first <= 4 * call_tol), f"tokens diverged at clear decisions {first}"
            return f"tokens of generate call {c}, rows {rows.tolist()}"
        # equal tokens: log-softmax(z / T) at them moves by <= 2 tol / T
        t = np.where(np.asarray(temperature) > 0, np.asarray(temperature), 1.0)[:, None]
        bound = np.broadcast_to(2 * call_tol / t, out_1.logprobs.shape)
        np.testing.assert_array_less(np.abs(out_8.logprobs - out_1.logprobs), bound)
    return None


def test_concurrent_chunks_equal_one_at_a_time(model, codec, fn, seeds, monkeypatch):
    """Without a mesh, an iteration's 2 chunks run on the worker threads; every field of the
    refinement equals the run that makes one call at a time in the calling thread."""
    threads: set[int] = set()
    real = sample.generate

    def spy(*args, **kwargs):
        threads.add(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(sample, "generate", spy)
    with ThreadPoolExecutor(2) as pool:
        monkeypatch.setattr(host_threads, "pool", lambda: (pool, 2))
        concurrent = iterative_refinement(jax.random.key(2), model, codec, fn, seeds, TEMPS, RUN)
    assert threads and threading.get_ident() not in threads  # every chunk ran on the pool
    threads.clear()
    monkeypatch.setattr(host_threads, "pool", lambda: (None, 1))
    one_at_a_time = iterative_refinement(jax.random.key(2), model, codec, fn, seeds, TEMPS, RUN)
    assert threads == {threading.get_ident()}
    _assert_same(concurrent, one_at_a_time)


def test_mesh_equals_single_device(run, model, codec, fn, seeds, monkeypatch):
    """Sharding each generation batch over 8 devices changes only float32 reduction orders (the
    sampling noise is sharding-invariant). Tokens and next-prompt choices are decisions on those
    floats, taken with a model the fixture trains (so which decision is nearest a tie depends on
    the machine): the runs must agree up to their first divergence, which must be a near-tie;
    without one (the usual case) the refinements are compared field by field."""
    single, calls_1 = _recorded_refinement(monkeypatch, model, codec, fn, seeds)
    _assert_same(run, single)  # the fixture's run: the same executables, bit-identical
    mesh = parallel.make_mesh(8)
    sharded, calls_8 = _recorded_refinement(monkeypatch, model, codec, fn, seeds, mesh=mesh)
    # Either outcome asserts: equal up to a divergence that is a near-tie (the helper), and, in
    # the usual case of no divergence, the whole refinement. Mean per-token log-probs move by
    # <= 2 tol / T (plus float32 rounding of the mean).
    diverged = _agree_up_to_near_ties(model, codec, len(seeds), calls_1, calls_8)
    if diverged is None:
        tol = max(_logit_tolerance(_sequence_logits(model, *c[1:3], c[-1])) for c in calls_1)
        ll_max = float(np.abs(run.log_likelihood).max())
        _assert_same(run, sharded, atol=2 * tol / min(TEMPS) + 8 * _EPS32 * ll_max)


def test_shared_prompts_equal_one_prompt_pass_per_row(run, model, codec, fn, seeds, monkeypatch):
    """``share_prompts`` (the default, used by the fixture's run) changes only how the real model's
    prompt pass is batched: against one prompt pass per row, every generate call has the same
    prompts, tokens and log-probs (to the logits' tolerance) up to a first divergence, which must
    be a near-tie (the helper asserts both, as for the mesh). The refinement-level wiring is
    compared field by field, without floats, in ``test_shared_prompts_reach_every_row``."""
    unshared_cfg = dataclasses.replace(RUN, share_prompts=False)
    spy = _RecordingGenerate()
    with monkeypatch.context() as patch:
        patch.setattr(sample, "generate", spy)
        iterative_refinement(jax.random.key(2), model, codec, fn, seeds, TEMPS, unshared_cfg)
    shared, calls_shared = _recorded_refinement(monkeypatch, model, codec, fn, seeds)
    _assert_same(run, shared)
    _agree_up_to_near_ties(model, codec, len(seeds), spy.calls, calls_shared)


def test_shared_prompts_reach_every_row(monkeypatch, codec, fn):
    """With the scripted generator (its outputs depend on the row, not on floats): sharing each
    chunk's prompts hands every row the prompt of its own trajectory, so the prompts every row
    saw and the whole refinement are the same with and without sharing. 4 seeds x (greedy +
    2 temperatures x 3 samples) = 28 rows, chunks of 16: every call shares (<= 8 distinct)."""
    seeds = (np.arange(L)[None, :] + 3 * np.arange(4)[:, None]) % V  # 4 distinct rotations
    cfg = RefineConfig(num_iterations=3, num_samples=3, batch_size=16)
    results, prompts, shared_calls = [], [], []
    for share in (False, True):
        fake = ScriptedGenerate(codec, 4, [1, 3, 3])
        fake._stride = 32

        def spy(*args, _fake=fake, prompt_rows=None, **kwargs):
            shared_calls.append(prompt_rows is not None)
            return _fake(*args, prompt_rows=prompt_rows, **kwargs)

        monkeypatch.setattr(sample, "generate", spy)
        results.append(
            iterative_refinement(
                jax.random.key(0),
                None,
                codec,
                fn,
                seeds,
                (0.5, 1.0),
                dataclasses.replace(cfg, share_prompts=share),
            )
        )
        prompts.append(dict(fake.prompts))
    assert shared_calls == [False] * 6 + [True] * 6
    assert len(set(prompts[0].values())) > 4  # later iterations moved the trajectories apart
    assert prompts[1] == prompts[0]
    _assert_same(results[1], results[0])


def test_shared_prompts_of_a_chunk():
    """Hand-built chunks of 16 rows: the distinct prompts, padded to a bucket (16/4 = 4 rounded
    up to 8, or 16/2 = 8), with ``ids[rows]`` giving back the chunk; ``None`` past half."""
    from llome_jax.llome.refine import _shared_prompts

    base = np.arange(5 * 3).reshape(5, 3)
    ids = base[[4, 4, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 3, 3]]
    mask = np.ones_like(ids)
    u_ids, u_mask, rows = _shared_prompts(ids, mask, 8)
    assert u_ids.shape == (8, 3) and u_mask.shape == (8, 3)
    np.testing.assert_array_equal(u_ids[rows], ids)
    np.testing.assert_array_equal(np.unique(u_ids[:5], axis=0), base)  # 5 distinct, then padding
    many = np.arange(16 * 3).reshape(16, 3)
    many[9:] = many[:7]  # 9 distinct rows of 16: more than half
    assert _shared_prompts(many, np.ones_like(many), 8) is None
    many[8] = many[0]  # 8 distinct: the B/2 bucket
    shared = _shared_prompts(many, np.ones_like(many), 8)
    assert shared[0].shape == (8, 3)
    np.testing.assert_array_equal(shared[0][shared[2]], many)


def test_untrained_model_invalid_outputs_are_counted(codec, fn, seeds):
    model = _tiny_model(codec, seed=5)
    seen = []
    out = iterative_refinement(
        jax.random.key(0), model, codec, fn, seeds, TEMPS, RUN, progress=seen.append
    )
    # an untrained model never writes a well-formed list of L numbers: every output is invalid,
    # counted as generated, and the mean Hamming distance over no valid output is NaN
    assert out.num_generated == 84 and out.num_valid == 0
    assert out.sequences.shape == (out.num_unique, L) and out.feasible.shape == (out.num_unique,)
    assert np.isnan(out.mean_hamming)
    assert [s["iteration"] for s in seen] == [1, 2, 3]
    assert [s["num_generated"] for s in seen] == [28, 56, 84]
    assert seen[-1]["num_valid"] == out.num_valid


# ------------------------------------------------------------------------- scripted generator
class ScriptedGenerate:
    """Stands in for ``sample.generate``: reads each row's prompt, answers from a script.

    Rows are identified by the refinement's documented layout (job-major, seed, sample) as
    ``(iteration, job, seed, slot)``; ``script`` maps that to ``(sequence | None, processed,
    raw)`` (None = an invalid output), ``default`` is used otherwise.
    """

    def __init__(self, codec, n_s, job_rows, script=None, default=None):
        self.codec, self.n_s, self.job_rows = codec, n_s, job_rows
        self.script = script or {}
        self.default = default or (
            lambda it, j, s, o, x: (np.full(L, (it + j + s + o) % V), -1.0, -1.0)
        )
        self.rows = n_s * sum(job_rows)
        self.calls, self.prompts, self.log = [], {}, []

    def _row(self, p):
        for j, r in enumerate(self.job_rows):
            if p < self.n_s * r:
                return j, p // r, p % r
            p -= self.n_s * r
        raise AssertionError("padding row")

    def __call__(self, key, model, ids, mask, config, temperature, mesh=None, prompt_rows=None):
        (ids, _), temperature = _expanded(ids, mask, prompt_rows), np.asarray(temperature)
        self.calls.append((key, ids.shape, temperature, mesh, config))
        n = config.max_new_tokens
        tokens = np.full((len(ids), n), self.codec.eos_token_id, np.int32)
        lp = np.full((len(ids), n), -9.0, np.float32)
        raw = lp.copy()
        start = sum(len(c[2]) for c in self.calls[:-1])
        x = ids[:, 2 : 2 * L + 1 : 2] - 8  # prompt "<inc> [ x0 , x1 , ... ] \n"
        for i in range(len(ids)):
            it, p = divmod(start + i, self._stride)
            if p >= self.rows:
                continue
            j, s, o = self._row(p)
            self.prompts[(it + 1, j, s)] = tuple(x[i].tolist())
            seq, ll, ll_raw = self.script.get((it + 1, j, s, o)) or self.default(
                it + 1, j, s, o, x[i]
            )
            if seq is not None:
                full, tm, _ = self.codec.encode_pairs(x[i : i + 1], np.asarray(seq)[None])
                tokens[i] = full[0][tm[0] == 1]
                lp[i], raw[i] = ll, ll_raw
            self.log.append(
                (it + 1, j, s, o, x[i].copy(), None if seq is None else np.asarray(seq))
            )
        return sample.Generation(
            jnp.asarray(tokens),
            jnp.asarray(lp),
            jnp.asarray(raw),
            jnp.full((len(ids),), n, jnp.int32),
            jnp.ones((len(ids),), bool),
        )

    _stride = None  # rows per iteration including chunk padding, set by the test


def _scripted(monkeypatch, codec, n_s, job_rows, stride, **kw):
    fake = ScriptedGenerate(codec, n_s, job_rows, **kw)
    fake._stride = stride
    monkeypatch.setattr(sample, "generate", fake)
    return fake


A, B, C, D = (np.full(L, v) for v in (1, 2, 3, 4))
SCRIPT = {  # one seed, one temperature, n_o = 2: (sequence, processed, raw)
    (1, 0, 0, 0): (A, -2.0, -1.0),
    (1, 0, 0, 1): (B, -0.5, -1.5),
    (2, 0, 0, 0): (C, -3.0, -3.0),
    (2, 0, 0, 1): (D, -4.0, -4.0),
    (3, 0, 0, 0): (None, 0.0, 0.0),  # both invalid: the input is kept
    (3, 0, 0, 1): (None, 0.0, 0.0),
}


@pytest.mark.parametrize(
    ("next_input", "selection", "expected"),
    [
        ("paper", "raw", [0, 1, 3, 3]),  # best of this iteration by pi_theta: A, then C
        ("paper", "processed", [0, 2, 3, 3]),  # by processed log-probs: B, then C
        ("reference", "raw", [0, 1, 1, 1]),  # best ever (raw): A beats C, D
        ("reference", "processed", [0, 2, 2, 2]),  # best ever (processed): B
    ],
)
def test_next_input_rules(monkeypatch, codec, fn, next_input, selection, expected):
    fake = _scripted(monkeypatch, codec, 1, [2], stride=8, script=SCRIPT)  # 2 rows -> chunk 8
    cfg = RefineConfig(
        num_iterations=4,
        num_samples=2,
        greedy=False,
        batch_size=64,
        next_input=next_input,
        selection_likelihood=selection,
    )
    out = iterative_refinement(
        jax.random.key(0), None, codec, fn, np.zeros((1, L), int), (1.0,), cfg
    )
    prompts = [fake.prompts[(it, 0, 0)] for it in (1, 2, 3, 4)]
    assert prompts == [(v,) * L for v in expected]
    assert out.num_generated == 8 and out.num_valid == 6
    # each output records the prompt it came from
    by_seq = {tuple(s): tuple(i) for s, i in zip(out.sequences.tolist(), out.inputs.tolist())}
    assert by_seq[(3,) * L] == prompts[1]
    rows = {tuple(s): k for k, s in enumerate(out.sequences.tolist())}
    assert (
        out.log_likelihood[rows[(2,) * L]] == -0.5
        and out.log_likelihood_raw[rows[(2,) * L]] == -1.5
    )


def test_reference_preset():
    cfg = RefineConfig.reference(num_iterations=3)
    assert (cfg.next_input, cfg.selection_likelihood, cfg.num_iterations) == (
        "reference",
        "processed",
        3,
    )


def test_dedup_order_invalid_and_hamming(monkeypatch, codec, fn):
    """2 seeds, greedy + 2 temperatures x 2 samples, 2 iterations; a duplicate across jobs and
    iterations keeps its first row in the reference order (greedy job first), not the earliest
    generated one."""
    z = np.array([7, 6, 5, 4, 3, 2, 1, 0])
    script = {
        (2, 0, 1, 0): (z, -1.0, -1.0),  # greedy, seed 1, iteration 2  <- kept
        (1, 1, 0, 1): (z, -2.0, -2.0),  # T=0.5, seed 0, iteration 1 (generated earlier)
        (1, 2, 0, 0): (z, -3.0, -3.0),  # T=1.0
        (1, 2, 1, 1): (None, 0.0, 0.0),  # invalid
    }

    def default(it, j, s, o, x):
        return np.array([it, j, s, o, 0, 0, 0, 0]), -1.0, -1.0

    fake = _scripted(  # 10 rows, batch_size 10 -> 2 chunks of 8
        monkeypatch, codec, 2, [1, 2, 2], stride=16, script=script, default=default
    )
    seeds = np.array([[1] * L, [2] * L])
    cfg = RefineConfig(num_iterations=2, num_samples=2, batch_size=10)
    out = iterative_refinement(jax.random.key(0), None, codec, fn, seeds, (0.5, 1.0), cfg)
    assert out.num_generated == 2 * 2 * (1 + 2 * 2) == 20
    assert out.num_valid == 19 and out.num_unique == 17
    k = [i for i, s in enumerate(out.sequences.tolist()) if s == z.tolist()]
    assert len(k) == 1
    k = k[0]
    assert (out.temperature[k], out.iteration[k], out.seed_index[k]) == (0.0, 2, 1)
    # hand-computed mean Hamming over all valid outputs before dedup
    valid = [(x, y) for (*_, x, y) in fake.log if y is not None]
    expected = np.mean([np.mean(x != y) for x, y in valid])
    assert out.mean_hamming == pytest.approx(expected, abs=1e-12)
    # order: job, seed, iteration, slot
    jobs = np.searchsorted(np.float32((0.0, 0.5, 1.0)), out.temperature)
    order = list(zip(jobs, out.seed_index, out.iteration))
    assert order == sorted(order)


def test_chunks_have_fixed_shape_and_per_row_temperatures(monkeypatch, codec, fn):
    """10 rows per iteration, batch_size 3 on an 8-device mesh -> chunks of 8 (2 per iteration)."""
    mesh = parallel.make_mesh(8)
    fake = _scripted(monkeypatch, codec, 2, [1, 2, 2], stride=16)
    cfg = RefineConfig(num_iterations=2, num_samples=2, batch_size=3, top_k=7)
    iterative_refinement(
        jax.random.key(0), None, codec, fn, np.zeros((2, L), int), (0.5, 1.0), cfg, mesh=mesh
    )
    assert len(fake.calls) == 4
    assert {c[1] for c in fake.calls} == {(8, 2 * L + 3)}
    assert all(c[3] is mesh for c in fake.calls)
    temps = np.concatenate([c[2] for c in fake.calls[:2]])[:10]
    np.testing.assert_array_equal(temps, np.float32([0, 0, 0.5, 0.5, 0.5, 0.5, 1, 1, 1, 1]))
    keys = {tuple(np.asarray(jax.random.key_data(c[0])).tolist()) for c in fake.calls}
    assert len(keys) == 4  # a fresh key per (iteration, chunk)
    config = fake.calls[0][4]
    assert (config.top_k, config.max_new_tokens, config.stop_token_ids) == (7, 2 * L + 1, (5, 1))


def test_validation_errors(codec, fn):
    seeds = np.zeros((2, L), int)
    call = lambda **kw: iterative_refinement(  # noqa: E731
        jax.random.key(0),
        None,
        kw.pop("codec", codec),
        fn,
        kw.pop("seeds", seeds),
        kw.pop("temps", (1.0,)),
        kw.pop("config", RefineConfig()),
    )
    with pytest.raises(ValueError, match="codec is for"):
        call(codec=SequenceCodec(make_ehrlich_tokenizer(V), V, L + 1))
    with pytest.raises(ValueError, match="seeds must be"):
        call(seeds=np.zeros((2, L + 1), int))
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        call(seeds=np.full((2, L), V))
    with pytest.raises(ValueError, match="> 0"):
        call(temps=(0.0, 1.0))
    with pytest.raises(ValueError, match="nothing to generate"):
        call(temps=(), config=RefineConfig(greedy=False))
    with pytest.raises(ValueError, match="next_input"):
        RefineConfig(next_input="best")
    with pytest.raises(ValueError, match="selection_likelihood"):
        RefineConfig(selection_likelihood="mean")
    with pytest.raises(ValueError, match="num_iterations"):
        RefineConfig(num_iterations=0)


@pytest.mark.parametrize(
    ("rows", "batch_size", "devices", "expected"),
    [
        (28, 16, 1, (16, 2)),
        (28, 16, 8, (16, 2)),  # same shape on 8 devices -> same samples
        (12200, 1024, 1, (1024, 12)),  # the paper's 200 x (1 + 6 x 10) rows
        (1220, 1024, 1, (616, 2)),  # balanced: 12 padding rows, not 828
        (10, 3, 8, (8, 2)),  # at least lcm(8, devices)
        (100, 1024, 3, (120, 1)),  # lcm(8, 3) = 24
    ],
)
def test_chunking_rule(rows, batch_size, devices, expected):
    assert _chunking(rows, batch_size, devices) == expected


def test_bpe_codec_fixed_prompt_width_vocab_limit_and_empty_result(monkeypatch):
    """Text-path codec (byte-level BPE, variable prompt lengths) with a padded model vocabulary;
    every output invalid -> an empty, well-formed Refinement."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from llome_jax.lm.text_format import format_prompt, format_target

    v, n = 32, 6
    rng = np.random.default_rng(0)
    corpus = [format_prompt(r) + format_target(r) for r in rng.integers(0, v, (200, n))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=280,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    codec = SequenceCodec(tok, v, n)
    assert not codec.fast
    fn = ehrlich.make(
        jax.random.key(0), EhrlichConfig(num_states=v, dim=n, num_motifs=2, motif_length=2)
    )
    calls = []

    def fake(key, model, ids, mask, config, temperature, mesh=None, prompt_rows=None):
        ids, mask = _expanded(ids, mask, prompt_rows)
        calls.append((ids, mask, config))
        b = len(ids)
        eos = jnp.zeros((b, config.max_new_tokens), jnp.int32)  # EOS = 0 at once: invalid
        zeros = jnp.zeros((b, config.max_new_tokens), jnp.float32)
        return sample.Generation(eos, zeros, zeros, jnp.ones(b, jnp.int32), jnp.ones(b, bool))

    monkeypatch.setattr(sample, "generate", fake)
    model = type("Stub", (), {"config": PythiaConfig.preset("tiny", vocab_size=320)})()
    seeds = np.array([[31] * n, [1] * n, [5, 17, 0, 30, 2, 9]])
    cfg = RefineConfig(num_iterations=2, num_samples=2)
    out = iterative_refinement(jax.random.key(0), model, codec, fn, seeds, (1.0,), cfg)
    assert out.num_generated == 2 * 3 * 3 and out.num_valid == 0
    assert out.sequences.shape == out.inputs.shape == (0, n) and out.feasible.shape == (0,)
    assert np.isnan(out.mean_hamming)
    assert {c[0].shape for c in calls} == {(16, codec.prompt_length)}  # 9 rows -> one chunk of 16
    assert calls[0][2].vocab_limit == len(tok) == 280
    assert calls[0][2].stop_token_ids == (codec.rbracket_id, 0)
    lens = calls[0][1].sum(1)[:9]
    assert lens.min() < lens.max() and np.all(calls[0][1][:, -1] == 1)  # left padding
