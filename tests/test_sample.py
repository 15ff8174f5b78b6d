"""KV-cache decoding: HF generate parity (torch), cache == full forward, sampling semantics,
stop tokens, determinism, sharding, validation."""

from __future__ import annotations

import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from llome_jax.host import parallel
from llome_jax.lm import convert
from llome_jax.lm.pythia import Pythia, PythiaConfig
from llome_jax.lm.sample import _TIE_SLACK, SampleConfig, generate, process_logits
from llome_jax.training.step import position_ids_from_mask

HAVE_TORCH = importlib.util.find_spec("torch") is not None
VOCAB = 61
N = 10


def _random_model(seed: int = 0) -> Pythia:
    config = PythiaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        rotary_pct=0.5,
        max_position_embeddings=64,
    )

    @nnx.jit
    def build():
        model = Pythia(config, rngs=nnx.Rngs(seed))
        graphdef, state = nnx.split(model)
        leaves, tree = jax.tree.flatten(state)
        keys = jax.random.split(jax.random.key(seed + 11), len(leaves))
        leaves = [
            x + (0.3 if x.ndim == 1 else 0.15) * jax.random.normal(k, x.shape)
            for x, k in zip(leaves, keys)
        ]
        return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))

    return build()


@pytest.fixture(scope="module")
def model() -> Pythia:
    return _random_model()


def _prompts(batch: int = 8, length: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    for i in range(batch):
        mask[i, : i % 4] = 0  # left padding of 0..3 tokens
    ids[mask == 0] = 0
    return ids, mask


@nnx.jit
def _full_logits(model, ids, mask):
    return model(ids, mask, position_ids_from_mask(mask))


def _sequence_logits(model, ids, mask, gen) -> np.ndarray:
    """Full-forward logits predicting each generated token ``[B, N, V]``."""
    tokens = np.asarray(gen.tokens)
    full_ids = np.concatenate([ids, tokens], axis=1)
    full_mask = np.concatenate([mask, np.ones_like(tokens)], axis=1)
    logits = np.asarray(_full_logits(model, jnp.asarray(full_ids), jnp.asarray(full_mask)))
    p = ids.shape[1]
    return logits[:, p - 1 : p - 1 + tokens.shape[1]]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _picked(logp: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return np.take_along_axis(logp, tokens[..., None], -1)[..., 0]


# ----------------------------------------------------------------------------- decision margins
# Tokens are discrete decisions taken on float32 logits: two evaluations of the same logits that
# differ only in reduction order (KV cache vs full forward, sharded vs single device, another SIMD
# width, torch vs XLA) agree on a token only when the decision is not a near-tie. Tests that
# compare tokens exactly first assert, from the full-forward logits along the path, that every
# decision's margin exceeds twice the logit tolerance; equality then follows by construction.
# (The models here are fixed random draws, so the margins do not depend on the machine; with a
# model trained in the test, compare up to the first divergence, which must be a near-tie.)

_EPS32 = float(np.finfo(np.float32).eps)


def _logit_tolerance(logits: np.ndarray) -> float:
    """Bound on the difference between two float32 evaluations of the same logits that differ
    only in reduction order: 16 ulps of the largest |logit| (every reduction of these tiny models
    is at most 64 terms long; ~8x the largest difference seen on x86 CPUs between the KV cache,
    the full forward, the 8-device mesh and torch)."""
    return 16 * _EPS32 * float(np.abs(logits[np.isfinite(logits)]).max())


def _top2_gap(x: np.ndarray) -> np.ndarray:
    """Best minus runner-up along the last axis (``inf`` with a single finite entry)."""
    top = -np.sort(-x, axis=-1)[..., :2]
    with np.errstate(invalid="ignore"):
        gap = top[..., 0] - top[..., 1]
    return np.where(np.isfinite(top[..., 1]), gap, np.inf)


def _replay_decisions(
    key: jax.Array,
    logits: np.ndarray,
    temperature: np.ndarray,
    config: SampleConfig,
    lengths: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Replay ``generate``'s choice at every step from ``logits`` ``[B, N, V]`` (the full-forward
    logits predicting each generated token) and measure how close it is to flipping.

    Greedy rows (``T <= 0``) take ``argmax z``: margin = best - runner-up. Sampled rows take the
    Gumbel-max draw of ``jax.random.categorical(fold_in(key, step), ...)`` over ``z / T`` (top-k
    masked; over the top ``k + 16`` candidates when that is smaller than the vocabulary, where the
    noise goes with a candidate's rank): the margin is the smallest of ``T`` x (best - runner-up
    score, less float32 rounding of the scores), the gap at the top-k boundary (membership), and,
    on the candidate path, the gaps between consecutive top-k logits (ranks).

    Returns:
      ``(tokens [B, N], margin [B, N])``, margin in raw-logit units (``inf`` after a row
      stopped): moving every logit by less than ``margin / 2`` cannot change the token.
    """
    b, n, v = logits.shape
    z = logits.astype(np.float32)
    if config.vocab_limit is not None:
        z = np.where(np.arange(v) < config.vocab_limit, z, np.float32(-np.inf))
    greedy = temperature <= 0
    t = np.where(greedy, 1.0, temperature).astype(np.float32)
    ordered = -np.sort(-z, axis=-1)
    scaled = z / t[:, None, None]
    k = config.top_k
    structure = np.full((b, n), np.inf, np.float32)
    if k is not None and k < v:
        scaled = np.where(z >= ordered[..., k - 1 : k], scaled, -np.inf)
        structure = ordered[..., k - 1] - ordered[..., k]
    width = v if k is None or k + _TIE_SLACK >= v else k + _TIE_SLACK
    if width < v:
        structure = np.minimum(
            structure, -np.diff(ordered[..., :k], axis=-1).min(-1, initial=np.inf)
        )
    tokens = np.zeros((b, n), np.int64)
    margin = np.zeros((b, n), np.float32)
    for i in range(n):
        noise = np.asarray(jax.random.gumbel(jax.random.fold_in(key, i), (b, width), jnp.float32))
        if width < v:  # candidate path: the noise goes with the rank (lax.top_k order)
            index = np.argsort(-scaled[:, i], axis=-1, kind="stable")[:, :width]
        else:  # full draw: the noise goes with the token id
            index = np.broadcast_to(np.arange(v), (b, v))
        score = np.take_along_axis(scaled[:, i], index, -1) + noise
        sampled = np.take_along_axis(index, score.argmax(-1)[:, None], -1)[:, 0]
        rounding = 2 * _EPS32 * np.abs(np.where(np.isfinite(score), score, 0)).max(-1)
        score_margin = t * (_top2_gap(score) - rounding)
        tokens[:, i] = np.where(greedy, z[:, i].argmax(-1), sampled)
        margin[:, i] = np.where(
            greedy, _top2_gap(z[:, i]), np.minimum(score_margin, structure[:, i])
        )
    margin[np.arange(n)[None, :] >= lengths[:, None]] = np.inf
    return tokens, margin


def _assert_decisions_robust(key, model, ids, mask, gen, temperature, config) -> np.ndarray:
    """Precondition of every exact token comparison: the replay from full-forward logits
    reproduces ``gen`` and no decision along its path is within 2 x the logit tolerance of a tie.

    Returns the full-forward logits ``[B, N, V]``.
    """
    logits = _sequence_logits(model, ids, mask, gen)
    lengths = np.asarray(gen.lengths)
    replay, margin = _replay_decisions(key, logits, np.asarray(temperature), config, lengths)
    live = np.arange(logits.shape[1])[None, :] < lengths[:, None]
    np.testing.assert_array_equal(np.where(live, replay, -1), np.where(live, gen.tokens, -1))
    tol = _logit_tolerance(logits)
    assert margin.min() > 2 * tol, f"near-tie decision: margin {margin.min():.2e} <= 2 x {tol:.2e}"
    return logits


# ----------------------------------------------------------------------------- cache == full


def test_kv_cache_logprobs_equal_full_forward(model):
    ids, mask = _prompts()
    cfg = SampleConfig(max_new_tokens=N, top_k=None)
    gen = generate(jax.random.key(1), model, ids, mask, cfg, temperature=1.0)
    tokens = np.asarray(gen.tokens)
    assert tokens.shape == (8, N) and (np.asarray(gen.lengths) == N).all()
    logits = _sequence_logits(model, ids, mask, gen)
    expected = _picked(_log_softmax(logits), tokens)
    np.testing.assert_allclose(np.asarray(gen.logprobs_raw), expected, atol=1e-4)
    # T = 1 and no top-k: processed == raw.
    np.testing.assert_allclose(np.asarray(gen.logprobs), np.asarray(gen.logprobs_raw), atol=1e-6)
    # Summed log-probs = the sequence log-likelihood of the full forward.
    np.testing.assert_allclose(np.asarray(gen.logprobs_raw).sum(1), expected.sum(1), atol=1e-3)


def test_temperature_topk_logprobs_and_support(model):
    ids, mask = _prompts(seed=1)
    temps = np.array([0.0, 0.5, 1.0, 1.5, 3.0, 0.0, 0.8, 5.0], np.float32)
    k = 4
    cfg = SampleConfig(max_new_tokens=N, top_k=k)
    gen = generate(jax.random.key(2), model, ids, mask, cfg, temperature=temps)
    tokens = np.asarray(gen.tokens)
    # Every decision (top-k membership included) is far from a tie, so the cache's choices are
    # exactly those the full-forward logits imply.
    logits = _assert_decisions_robust(jax.random.key(2), model, ids, mask, gen, temps, cfg)
    # top-k never samples outside the top k of the raw logits.
    kth = np.sort(logits, -1)[..., -k]
    assert (_picked(logits, tokens) >= kth).all()
    # processed log-prob: log-softmax(z / T) restricted to the top k (greedy rows: raw).
    t = np.where(temps > 0, temps, 1.0)[:, None, None]
    scaled = logits / t
    scaled = np.where(logits >= kth[..., None], scaled, -np.inf)
    expected = _picked(_log_softmax(scaled), tokens)
    greedy = temps <= 0
    expected[greedy] = _picked(_log_softmax(logits), tokens)[greedy]
    np.testing.assert_allclose(np.asarray(gen.logprobs), expected, atol=1e-4)
    np.testing.assert_allclose(
        np.asarray(gen.logprobs_raw), _picked(_log_softmax(logits), tokens), atol=1e-4
    )
    # greedy rows are argmax (margins asserted above) and equal an all-greedy run: rows are
    # independent and both runs are the same executable on the same inputs (bit-identical).
    np.testing.assert_array_equal(tokens[greedy], logits.argmax(-1)[greedy])
    all_greedy = generate(
        jax.random.key(9),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=N, top_k=k),
        temperature=0.0,
    )
    np.testing.assert_array_equal(np.asarray(all_greedy.tokens)[greedy], tokens[greedy])


def test_process_logits_keeps_ties_at_threshold():
    logits = jnp.array([[3.0, 1.0, 2.0, 2.0, -1.0]])
    raw, processed = process_logits(logits, jnp.array([2.0]), top_k=2, vocab_limit=4)
    assert np.isneginf(np.asarray(raw)[0, 4])
    np.testing.assert_allclose(np.asarray(processed)[0, [0, 2, 3]], [1.5, 1.0, 1.0])
    assert np.isneginf(np.asarray(processed)[0, [1, 4]]).all()


def test_sampling_is_deterministic_per_key(model):
    ids, mask = _prompts()
    cfg = SampleConfig(max_new_tokens=N, top_k=None)
    a = generate(jax.random.key(5), model, ids, mask, cfg, temperature=2.0)
    b = generate(jax.random.key(5), model, ids, mask, cfg, temperature=2.0)
    c = generate(jax.random.key(6), model, ids, mask, cfg, temperature=2.0)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    assert (np.asarray(a.tokens) != np.asarray(c.tokens)).mean() > 0.3


def test_sampling_frequencies_match_softmax(model):
    """One step, 512 rows of the same prompt: empirical frequencies ~ softmax(z / T) on top-k."""
    ids = np.tile(np.array([[5, 9, 2, 33]], np.int32), (512, 1))
    mask = np.ones_like(ids)
    gen = generate(
        jax.random.key(3),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=1, top_k=6),
        temperature=1.7,
    )
    logits = np.asarray(_full_logits(model, jnp.asarray(ids[:1]), jnp.asarray(mask[:1])))[0, -1]
    # the cache's top-6 set is this one: the 6th/7th gap is far above the logit tolerance
    ordered = np.sort(logits)[::-1]
    assert ordered[5] - ordered[6] > 2 * _logit_tolerance(logits)
    z = np.where(logits >= ordered[5], logits / 1.7, -np.inf)
    p = np.exp(_log_softmax(z))
    freq = np.bincount(np.asarray(gen.tokens)[:, 0], minlength=VOCAB) / 512
    assert set(np.nonzero(freq)[0]) <= set(np.nonzero(p)[0])
    assert np.abs(freq - p).max() < 4 * np.sqrt(0.25 / 512)


def test_stop_tokens_padding_and_lengths(model):
    ids, mask = _prompts()
    free_cfg = SampleConfig(max_new_tokens=N)
    free = generate(jax.random.key(0), model, ids, mask, free_cfg, temperature=0.0)
    free_tokens = np.asarray(free.tokens)
    # The stop run is another executable (other static config): its greedy tokens equal the free
    # run's only because no greedy decision on this path is a near-tie.
    _assert_decisions_robust(jax.random.key(0), model, ids, mask, free, np.zeros(8), free_cfg)
    stop = int(free_tokens[0, 2])  # row 0 stops at step 2 (or earlier if the token repeats)
    cfg = SampleConfig(max_new_tokens=N, stop_token_ids=(stop, VOCAB - 1), pad_token_id=7)
    gen = generate(jax.random.key(0), model, ids, mask, cfg, temperature=0.0)
    tokens, lengths = np.asarray(gen.tokens), np.asarray(gen.lengths)
    for row in range(8):
        hits = np.nonzero(np.isin(free_tokens[row], cfg.stop_token_ids))[0]
        n = hits[0] + 1 if hits.size else N
        assert lengths[row] == n and bool(gen.stopped[row]) == bool(hits.size)
        np.testing.assert_array_equal(tokens[row, :n], free_tokens[row, :n])
        assert (tokens[row, n:] == 7).all()
        assert (np.asarray(gen.logprobs)[row, n:] == 0).all()
        assert (np.asarray(gen.logprobs_raw)[row, n:] == 0).all()
    assert lengths[0] <= 3


def test_vocab_limit_masks_padded_rows(model):
    ids, mask = _prompts()
    cfg = SampleConfig(max_new_tokens=N, top_k=None, vocab_limit=12)
    gen = generate(jax.random.key(4), model, ids, mask, cfg, temperature=3.0)
    assert np.asarray(gen.tokens).max() < 12
    greedy = generate(jax.random.key(4), model, ids, mask, cfg, temperature=0.0)
    assert np.asarray(greedy.tokens).max() < 12


def test_mesh_sharded_equals_single_device(model):
    ids, mask = _prompts()
    temps = np.array([0.0, 0.7, 1.0, 2.0, 0.0, 1.3, 0.9, 4.0], np.float32)
    cfg = SampleConfig(max_new_tokens=N, top_k=5, stop_token_ids=(3,))
    single = generate(jax.random.key(8), model, ids, mask, cfg, temperature=temps)
    mesh = parallel.make_mesh(8)
    sharded = generate(jax.random.key(8), model, ids, mask, cfg, temperature=temps, mesh=mesh)
    assert len(sharded.tokens.sharding.device_set) == 8
    # Sharding changes only reduction orders (the Gumbel noise is sharding-invariant): tokens,
    # lengths and stops are equal because no decision on the path is within tolerance of a tie.
    logits = _assert_decisions_robust(jax.random.key(8), model, ids, mask, single, temps, cfg)
    for name in ("tokens", "lengths", "stopped"):
        np.testing.assert_array_equal(
            np.asarray(getattr(sharded, name)), np.asarray(getattr(single, name))
        )
    # log-softmax(z / T) at the token moves by at most 2 x (logit tolerance) / T.
    atol = 2 * _logit_tolerance(logits) / np.where(temps > 0, temps, 1.0).min()
    np.testing.assert_allclose(np.asarray(sharded.logprobs), np.asarray(single.logprobs), atol=atol)
    with pytest.raises(ValueError, match="not divisible"):
        generate(jax.random.key(8), model, ids[:6], mask[:6], cfg, mesh=mesh)


@pytest.mark.parametrize("devices", [1, 8])
def test_shared_prompts_equal_expanded_prompts(model, devices):
    """``prompt_rows``: each distinct prompt's prefix is computed once and its KV cache copied to
    the rows that continue it; the rows then decode exactly as the expanded prompts would (the
    sampling noise depends on the row, not on the prompt pass). Rows 0, 1 and 6 share prompt 0
    (two temperatures and greedy), prompt 2 is unused."""
    ids, mask = _prompts(batch=4)
    rows = np.array([0, 0, 1, 3, 3, 1, 0, 3], np.int32)
    temps = np.array([0.7, 1.3, 0.0, 1.0, 1.0, 2.0, 0.0, 0.5], np.float32)
    cfg = SampleConfig(max_new_tokens=N, top_k=5, stop_token_ids=(3,))
    mesh = None if devices == 1 else parallel.make_mesh(devices)
    expanded = generate(jax.random.key(4), model, ids[rows], mask[rows], cfg, temperature=temps)
    shared = generate(
        jax.random.key(4), model, ids, mask, cfg, temperature=temps, mesh=mesh, prompt_rows=rows
    )
    logits = _assert_decisions_robust(
        jax.random.key(4), model, ids[rows], mask[rows], expanded, temps, cfg
    )
    for name in ("tokens", "lengths", "stopped"):
        np.testing.assert_array_equal(
            np.asarray(getattr(shared, name)), np.asarray(getattr(expanded, name))
        )
    # the prefix is computed on a smaller batch (and, on 8 devices, replicated): reduction orders
    # may change, so log-softmax(z / T) at the tokens moves by at most 2 x (logit tolerance) / T
    atol = 2 * _logit_tolerance(logits) / np.where(temps > 0, temps, 1.0).min()
    for name in ("logprobs", "logprobs_raw"):
        np.testing.assert_allclose(
            np.asarray(getattr(shared, name)), np.asarray(getattr(expanded, name)), atol=atol
        )


@pytest.mark.parametrize(
    ("prompt_rows", "temperature", "match"),
    [
        (np.array([0, 4]), 1.0, "values in \\[0, 4\\)"),
        (np.array([-1, 0]), 1.0, "values in"),
        (np.zeros((2, 2), int), 1.0, "non-empty int \\[B\\]"),
        (np.array([0.0, 1.0]), 1.0, "non-empty int"),
        (np.array([0, 1, 1]), np.ones(4), "temperature must be a scalar or shape \\(3,\\)"),
    ],
)
def test_prompt_rows_validation(model, prompt_rows, temperature, match):
    ids, mask = _prompts(batch=4)
    with pytest.raises(ValueError, match=match):
        generate(
            jax.random.key(0),
            model,
            ids,
            mask,
            SampleConfig(max_new_tokens=2),
            temperature=temperature,
            prompt_rows=prompt_rows,
        )


def test_no_recompilation_for_new_keys_and_temperatures(model):
    from llome_jax.lm import sample

    ids, mask = _prompts()
    cfg = SampleConfig(max_new_tokens=N, top_k=None)
    generate(jax.random.key(0), model, ids, mask, cfg, temperature=1.0)
    before = sample._jitted_core._cache_size()
    other = np.where(mask > 0, ids % 50 + 1, 0)
    generate(jax.random.key(1), model, other, mask, cfg, temperature=np.full(8, 0.3))
    # A new model instance with the same config (e.g. after a training round) reuses it too.
    generate(jax.random.key(2), _random_model(seed=5), ids, mask, cfg, temperature=0.0)
    assert sample._jitted_core._cache_size() == before


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"mask": "right"}, "LEFT-padded"),
        ({"mask": "empty_row"}, "at least one real token"),
        ({"mask": "values"}, "only 0/1"),
        ({"mask": "shape"}, "prompt_mask must have shape"),
        ({"ids": "float"}, "int"),
        ({"ids": "range"}, "prompt token ids"),
        ({"temperature": np.ones(3)}, "temperature"),
        ({"temperature": np.nan}, "finite"),
        ({"config": SampleConfig(max_new_tokens=100)}, "max_position_embeddings"),
        ({"config": SampleConfig(max_new_tokens=2, stop_token_ids=(VOCAB,))}, "stop/pad"),
        ({"config": SampleConfig(max_new_tokens=2, vocab_limit=VOCAB + 1)}, "vocab_limit"),
    ],
)
def test_generate_validation(model, change, match):
    ids, mask = _prompts()
    ids = ids.copy()
    mask = mask.copy()
    temperature = change.get("temperature", 1.0)
    config = change.get("config", SampleConfig(max_new_tokens=2))
    if change.get("mask") == "right":
        mask[0] = [1, 1, 1, 1, 1, 0, 0]
    elif change.get("mask") == "empty_row":
        mask[2] = 0
    elif change.get("mask") == "values":
        mask[2, 3] = 2
    elif change.get("mask") == "shape":
        mask = mask[:, :3]
    if change.get("ids") == "float":
        ids = ids.astype(np.float32)
    elif change.get("ids") == "range":
        ids[0, 5] = VOCAB
    with pytest.raises(ValueError, match=match):
        generate(jax.random.key(0), model, ids, mask, config, temperature=temperature)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 1, "top_k": 0}, "top_k"),
        ({"max_new_tokens": 1, "stop_token_ids": [1]}, "tuple"),
        ({"max_new_tokens": 1, "vocab_limit": 0}, "vocab_limit"),
    ],
)
def test_sample_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SampleConfig(**kwargs)


# ----------------------------------------------------------------------------- live HF parity


def _hf_pair(tmp_path, model: Pythia):
    import transformers

    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {**convert.hf_config_dict(model.config, spelling="transformers5"), "pad_token_id": 0}
        )
    )
    from safetensors.numpy import save_file

    save_file(convert.hf_tensors(model), str(d / "model.safetensors"))
    return transformers.GPTNeoXForCausalLM.from_pretrained(d).eval()


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the 'hf' extra)")
def test_greedy_matches_hf_generate_with_stop_token(tmp_path, model):
    import torch

    hf = _hf_pair(tmp_path, model)
    ids, mask = _prompts(seed=3)
    kwargs = dict(
        attention_mask=torch.tensor(mask),
        do_sample=False,
        max_new_tokens=N,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    with torch.no_grad():
        out = hf.generate(torch.tensor(ids), eos_token_id=None, **kwargs)
    hf_tokens = out.sequences[:, ids.shape[1] :].numpy()
    hf_scores = hf.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    gen = generate(jax.random.key(0), model, ids, mask, SampleConfig(max_new_tokens=N), 0.0)
    # torch and XLA reduce in other orders: the greedy tokens agree because every greedy margin
    # on HF's path (its own logits) exceeds twice the logit tolerance. The stop-token run below
    # takes the same decisions up to each row's stop.
    hf_logits = torch.stack(out.logits, 1).numpy()
    assert _top2_gap(hf_logits).min() > 2 * _logit_tolerance(hf_logits)
    np.testing.assert_array_equal(np.asarray(gen.tokens), hf_tokens)
    np.testing.assert_allclose(np.asarray(gen.logprobs), hf_scores.numpy(), atol=1e-4)
    raw = _picked(_log_softmax(hf_logits), hf_tokens)
    np.testing.assert_allclose(np.asarray(gen.logprobs_raw), raw, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gen.logprobs_raw).sum(1), raw.sum(1), atol=1e-3)

    # With a stop token: HF pads finished rows with pad_token_id, exactly like us.
    stop = int(hf_tokens[1, 3])
    with torch.no_grad():
        out = hf.generate(torch.tensor(ids), eos_token_id=stop, **kwargs)
    hf_tokens = out.sequences[:, ids.shape[1] :].numpy()
    gen = generate(
        jax.random.key(0),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=N, stop_token_ids=(stop,)),
        0.0,
    )
    tokens = np.asarray(gen.tokens)
    np.testing.assert_array_equal(tokens[:, : hf_tokens.shape[1]], hf_tokens)
    assert (tokens[:, hf_tokens.shape[1] :] == 0).all()
    assert bool(gen.stopped[1])


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the 'hf' extra)")
def test_processed_logprobs_match_hf_logits_processors(tmp_path, model):
    """Our processed log-probs = HF's Temperature + TopK warpers applied to HF's own logits."""
    import torch
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
    )

    hf = _hf_pair(tmp_path, model)
    ids, mask = _prompts(seed=4)
    temps = np.array([0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0, 0.0], np.float32)
    gen = generate(
        jax.random.key(3),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=N, top_k=5),
        temperature=temps,
    )
    tokens = np.asarray(gen.tokens)
    full = torch.tensor(np.concatenate([ids, tokens], 1))
    full_mask = torch.tensor(np.concatenate([mask, np.ones_like(tokens)], 1))
    pos = torch.tensor(np.asarray(position_ids_from_mask(jnp.asarray(full_mask.numpy()))))
    with torch.no_grad():
        logits = hf(full, attention_mask=full_mask, position_ids=pos).logits
    p = ids.shape[1]
    step_logits = logits[:, p - 1 : p - 1 + N]
    # HF's top-5 set on its logits is ours on ours: the 5th/6th gap exceeds twice the logit
    # tolerance at every step (otherwise a boundary token could be -inf on one side only).
    ordered = -np.sort(-step_logits.numpy()[temps > 0], axis=-1)
    assert (ordered[..., 4] - ordered[..., 5]).min() > 2 * _logit_tolerance(ordered)
    for row, t in enumerate(temps):
        z = step_logits[row]
        if t > 0:
            warp = LogitsProcessorList([TemperatureLogitsWarper(float(t)), TopKLogitsWarper(5)])
            z = warp(full[row : row + 1, :p], z)
        expected = torch.log_softmax(z, -1).numpy()[np.arange(N), tokens[row]]
        np.testing.assert_allclose(np.asarray(gen.logprobs)[row], expected, atol=1e-4)
    hf_sum = _picked(torch.log_softmax(step_logits, -1).numpy(), tokens).sum(1)
    np.testing.assert_allclose(np.asarray(gen.logprobs_raw).sum(1), hf_sum, atol=1e-3)


def test_topk_candidate_sampling_handles_ties_exactly():
    """More ties at the k-th value than the candidate slack: the exact full draw is used."""
    from llome_jax.lm.sample import _sample

    v = 200
    tied = np.full((1, v), -np.inf, np.float32)
    tied[0, 50:80] = 1.0  # 30 tied entries, top_k = 2 keeps all of them (HF semantics)
    tied = jnp.asarray(np.repeat(tied, 3000, axis=0))
    draws = np.asarray(jax.jit(_sample, static_argnums=2)(jax.random.key(0), tied, 2))
    assert set(np.unique(draws)) == set(range(50, 80))
    counts = np.bincount(draws, minlength=v)[50:80]
    assert np.abs(counts / 3000 - 1 / 30).max() < 4 * np.sqrt((1 / 30) / 3000)
    # Normal case (few ties): candidates only, exact frequencies.
    z = np.full((1, v), -np.inf, np.float32)
    z[0, [3, 9, 77]] = [0.0, 1.0, 2.0]
    z = jnp.asarray(np.repeat(z, 3000, axis=0))
    draws = np.asarray(jax.jit(_sample, static_argnums=2)(jax.random.key(1), z, 3))
    p = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    freq = np.bincount(draws, minlength=v)[[3, 9, 77]] / 3000
    assert np.bincount(draws, minlength=v).sum() == 3000 and np.abs(freq - p).max() < 0.03


# top_k: none; a small k; k = 280 (top_k + 16 < v: the k-sized draw); k = 288 (top_k < v <=
# top_k + 16: the threshold, then the full-vocabulary draw). The greedy-only branch never reads
# top_k, so it is one case.
@pytest.mark.parametrize(
    "top_k, greedy_only", [(None, False), (5, False), (280, False), (288, False), (5, True)]
)
def test_decoding_step_equals_the_reference_formula(top_k, greedy_only):
    """``_choose`` (one top-k, a greedy-only branch, log-softmax picked without the [B, V]
    array) against the plain formula: ``process_logits``, ``_sample``, ``log_softmax``. Logits
    are rounded to quarters so that ties at the k-th value occur; row 0 has 40 tied maxima (more
    than ``top_k + 16`` for k = 5: the full-vocabulary draw)."""
    from llome_jax.lm.sample import _choose, _sample

    v, b, limit = 300, 64, 290
    rng = np.random.default_rng(0)
    logits = np.round(rng.normal(size=(b, v)) * 4) / 4
    logits[0, 100:140] = 20.0
    logits = jnp.asarray(logits, jnp.float32)
    temperature = np.where(np.arange(b) % 3 == 0, 0.0, 0.5 + np.arange(b) / b).astype(np.float32)
    if greedy_only:
        temperature[:] = 0.0
    temperature = jnp.asarray(temperature)
    cfg = SampleConfig(max_new_tokens=1, top_k=top_k, vocab_limit=limit)
    for step in range(4):
        key = jax.random.fold_in(jax.random.key(7), step)
        token, logp, logp_raw = jax.jit(_choose, static_argnums=3)(key, logits, temperature, cfg)
        raw, processed = process_logits(logits, temperature, top_k, limit)
        sampled = _sample(key, processed, top_k)
        greedy = temperature <= 0
        expected = np.asarray(jnp.where(greedy, jnp.argmax(raw, axis=-1), sampled))
        rows = np.arange(b)
        expected_raw = np.asarray(jax.nn.log_softmax(raw, axis=-1))[rows, expected]
        expected_processed = np.asarray(jax.nn.log_softmax(processed, axis=-1))[rows, expected]
        expected_logp = np.where(np.asarray(greedy), expected_raw, expected_processed)
        np.testing.assert_array_equal(np.asarray(token), expected)
        assert (expected < limit).all() and len(set(expected[1:].tolist())) > 1
        np.testing.assert_allclose(np.asarray(logp_raw), expected_raw, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(logp), expected_logp, rtol=1e-6, atol=1e-6)


def test_argmax_by_two_reductions_equals_jnp_argmax():
    """First maximal index (ties), an all -inf row, NaN rows (first NaN wins) and +inf."""
    from llome_jax.lm.sample import _argmax

    x = np.round(np.random.default_rng(3).normal(size=(7, 1000)) * 2) / 2  # many ties
    x[1, :] = -np.inf
    x[2, [10, 500]] = np.nan
    x[3, [20, 30]] = np.inf
    x[4, :] = 1.5
    x[5, 999] = 50.0
    x[6, [0, 999]] = 50.0
    x = jnp.asarray(x, jnp.float32)
    index, x_max = jax.jit(_argmax)(x)
    np.testing.assert_array_equal(np.asarray(index), np.asarray(jnp.argmax(x, axis=-1)))
    assert np.asarray(index)[[1, 2, 3, 4, 5, 6]].tolist() == [0, 10, 20, 0, 999, 0]
    np.testing.assert_array_equal(np.asarray(x_max), np.asarray(jnp.max(x, axis=-1)))
