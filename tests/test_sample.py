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

from llome_jax import parallel
from llome_jax.lm import convert
from llome_jax.lm.pythia import Pythia, PythiaConfig
from llome_jax.lm.sample import SampleConfig, generate, process_logits
from llome_jax.train import position_ids_from_mask

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
    gen = generate(
        jax.random.key(2),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=N, top_k=k),
        temperature=temps,
    )
    tokens = np.asarray(gen.tokens)
    logits = _sequence_logits(model, ids, mask, gen)
    # top-k never samples outside the top k of the raw logits.
    kth = np.sort(logits, -1)[..., -k]
    assert (_picked(logits, tokens) >= kth - 1e-5).all()
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
    # greedy rows are argmax and equal an all-greedy run (rows are independent).
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
    z = np.where(logits >= np.sort(logits)[-6], logits / 1.7, -np.inf)
    p = np.exp(_log_softmax(z))
    freq = np.bincount(np.asarray(gen.tokens)[:, 0], minlength=VOCAB) / 512
    assert set(np.nonzero(freq)[0]) <= set(np.nonzero(p)[0])
    assert np.abs(freq - p).max() < 4 * np.sqrt(0.25 / 512)


def test_stop_tokens_padding_and_lengths(model):
    ids, mask = _prompts()
    free = generate(
        jax.random.key(0), model, ids, mask, SampleConfig(max_new_tokens=N), temperature=0.0
    )
    free_tokens = np.asarray(free.tokens)
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
    for name in ("tokens", "lengths", "stopped"):
        np.testing.assert_array_equal(
            np.asarray(getattr(sharded, name)), np.asarray(getattr(single, name))
        )
    np.testing.assert_allclose(np.asarray(sharded.logprobs), np.asarray(single.logprobs), atol=1e-5)
    with pytest.raises(ValueError, match="not divisible"):
        generate(jax.random.key(8), model, ids[:6], mask[:6], cfg, mesh=mesh)


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
    np.testing.assert_array_equal(np.asarray(gen.tokens), hf_tokens)
    np.testing.assert_allclose(np.asarray(gen.logprobs), hf_scores.numpy(), atol=1e-4)
    raw = _picked(_log_softmax(torch.stack(out.logits, 1).numpy()), hf_tokens)
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
