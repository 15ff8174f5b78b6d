"""Pythia model: golden parity fixture (no torch), presets/parameter counts, padding, sharding,
training contract."""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from llome_jax.host import parallel
from llome_jax.lm import convert, pythia
from llome_jax.lm.pythia import Pythia, PythiaConfig

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "pythia_tiny"

#: Published totals (Pythia README / HF model cards: "Total params").
PUBLISHED = {
    "70m": 70_426_624,
    "160m": 162_322_944,
    "410m": 405_334_016,
    "1b": 1_011_781_632,
    "1.4b": 1_414_647_808,
    "2.8b": 2_775_208_960,
}


def _formula(c: PythiaConfig) -> int:
    """HF GPTNeoXForCausalLM parameter count, written out by hand."""
    h, i, v = c.hidden_size, c.intermediate_size, c.vocab_size
    per_layer = (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
    return 2 * v * h + c.num_hidden_layers * per_layer + 2 * h


def _tiny(vocab: int = 61, **kw) -> PythiaConfig:
    return PythiaConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        **kw,
    )


def _perturbed(config: PythiaConfig, seed: int = 0) -> Pythia:
    """A model with every weight (LayerNorms included) moved away from its default init."""

    @nnx.jit
    def build() -> Pythia:
        model = Pythia(config, rngs=nnx.Rngs(seed))
        graphdef, state = nnx.split(model)
        leaves, tree = jax.tree.flatten(state)
        keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
        leaves = [
            x + (0.3 if x.ndim == 1 else 0.08) * jax.random.normal(k, x.shape)
            for x, k in zip(leaves, keys)
        ]
        return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))

    return build()


@nnx.jit
def _forward(model: Pythia, ids, mask=None, pos=None):
    return model(ids, mask, pos)


# ----------------------------------------------------------------------------- golden fixture


def test_golden_fixture_logits_match_transformers():
    """Committed transformers logits (scripts/make_pythia_fixture.py) for a perturbed checkpoint."""
    model = convert.from_pretrained(FIXTURE)
    assert model.config.rotary_pct == 0.5 and model.config.vocab_size == 96
    ids = np.load(FIXTURE / "input_ids.npy")
    mask = np.load(FIXTURE / "attention_mask.npy")
    expected = np.load(FIXTURE / "logits.npy")
    got = np.asarray(_forward(model, jnp.asarray(ids), jnp.asarray(mask)))
    real = mask > 0
    assert np.abs(expected).max() > 1.0
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4, rtol=0)


def test_golden_fixture_greedy_generation():
    from llome_jax.lm.sample import SampleConfig, generate
    from llome_jax.training.step import position_ids_from_mask

    model = convert.from_pretrained(FIXTURE)
    ids = np.load(FIXTURE / "input_ids.npy")
    mask = np.load(FIXTURE / "attention_mask.npy")
    greedy = json.loads((FIXTURE / "greedy.json").read_text())
    out = generate(
        jax.random.key(0),
        model,
        ids,
        mask,
        SampleConfig(max_new_tokens=greedy["max_new_tokens"]),
        temperature=0.0,
    )
    # Greedy tokens are argmaxes of float32 logits that torch and XLA reduce in other orders:
    # they must agree only because every greedy margin along the fixture's path (best minus
    # runner-up logit, from our full forward) is far above the float32 tolerance of the logits
    # (16 ulps of the largest |logit|; ~7x the torch/JAX difference on the fixture prompts).
    tokens = np.asarray(greedy["tokens"])
    full_ids = np.concatenate([ids, tokens], axis=1)
    full_mask = np.concatenate([mask, np.ones_like(tokens)], axis=1)
    pos = position_ids_from_mask(jnp.asarray(full_mask))
    logits = np.asarray(_forward(model, jnp.asarray(full_ids), jnp.asarray(full_mask), pos))
    path = logits[:, ids.shape[1] - 1 : -1]
    top2 = -np.sort(-path, axis=-1)[..., :2]
    np.testing.assert_array_equal(path.argmax(-1), tokens)
    tol = 16 * np.finfo(np.float32).eps * np.abs(path).max()
    assert (top2[..., 0] - top2[..., 1]).min() > 2 * tol
    np.testing.assert_array_equal(np.asarray(out.tokens), tokens)
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(greedy["logprobs"]), atol=1e-4)


# ----------------------------------------------------------------------------- config / presets


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_released_presets_match_published_parameter_counts(name):
    config = PythiaConfig.preset(name)
    assert _formula(config) == PUBLISHED[name]
    # the model built abstractly (shapes only) has the same count as the formula
    assert pythia.num_parameters(pythia.abstract_model(config)) == PUBLISHED[name]


def test_pythia_2p8b_builds_abstractly():
    config = PythiaConfig.preset("pythia-2.8b")
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (
        2560,
        32,
        32,
    )
    assert config.rotary_ndims == 20 and config.vocab_size == 50304
    abstract = nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0)))
    count = pythia.num_parameters(abstract)
    assert count == _formula(config) == 2_775_208_960
    state = nnx.state(abstract, nnx.Param)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state))


def test_scratch_presets():
    tiny = PythiaConfig.preset("tiny", vocab_size=40)
    small = PythiaConfig.preset("small", vocab_size=40)
    assert 1e5 < _formula(tiny) < 4e5
    assert 2e6 < _formula(small) < 4e6
    assert pythia.num_parameters(Pythia(tiny, rngs=nnx.Rngs(0))) == _formula(tiny)
    with pytest.raises(ValueError, match="vocab_size"):
        PythiaConfig.preset("tiny")
    with pytest.raises(ValueError, match="unknown Pythia preset"):
        PythiaConfig.preset("3b")
    with pytest.raises(ValueError, match="unknown PythiaConfig fields"):
        PythiaConfig.preset("tiny", vocab_size=40, hiden_size=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hidden_act": "relu"}, "hidden_act"),
        ({"num_attention_heads": 5}, "divisible"),
        ({"rotary_pct": 0.375}, "even"),
        ({"rotary_pct": 1.5}, "rotary_pct"),
        ({"compute_dtype": "float16"}, "compute_dtype"),
        ({"param_dtype": "int8"}, "param_dtype"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"vocab_size": 0}, "vocab_size"),
    ],
)
def test_config_validation(kwargs, match):
    base = dict(
        vocab_size=10,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=8,
    )
    with pytest.raises(ValueError, match=match):
        PythiaConfig(**{**base, **kwargs})


# ----------------------------------------------------------------------------- numerics


def _numpy_reference(model: Pythia, ids: np.ndarray) -> np.ndarray:
    """Independent float64 numpy forward (HF semantics), no padding."""
    from math import erf

    c = model.config
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), nnx.to_pure_dict(nnx.state(model)))

    def ln(x, w):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + c.layer_norm_eps) * w["scale"] + w["bias"]

    gelu = np.vectorize(lambda z: 0.5 * z * (1 + erf(z / np.sqrt(2))))
    b, t = ids.shape
    nh, hd, rot = c.num_attention_heads, c.head_dim, c.rotary_ndims
    pos = np.arange(t)[:, None] * (1.0 / c.rotary_emb_base ** (np.arange(0, rot, 2) / rot))
    cos, sin = np.cos(np.concatenate([pos, pos], -1)), np.sin(np.concatenate([pos, pos], -1))

    def rope(x):  # [b, t, nh, hd]
        xr = x[..., :rot]
        rh = np.concatenate([-xr[..., rot // 2 :], xr[..., : rot // 2]], -1)
        return np.concatenate([xr * cos[None, :, None] + rh * sin[None, :, None], x[..., rot:]], -1)

    x = p["embed_in"]["embedding"][ids]
    for i in range(c.num_hidden_layers):
        w = p["layers"][i]
        a = w["attention"]
        h = ln(x, w["input_layernorm"])
        qkv = (h @ a["query_key_value"]["kernel"] + a["query_key_value"]["bias"]).reshape(
            b, t, nh, 3, hd
        )
        q, k, v = rope(qkv[:, :, :, 0]), rope(qkv[:, :, :, 1]), qkv[:, :, :, 2]
        s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = np.einsum("bhqk,bkhd->bqhd", s, v).reshape(b, t, -1)
        attn = y @ a["dense"]["kernel"] + a["dense"]["bias"]
        m = w["mlp"]
        z = gelu(
            ln(x, w["post_attention_layernorm"]) @ m["dense_h_to_4h"]["kernel"]
            + m["dense_h_to_4h"]["bias"]
        )
        x = x + attn + z @ m["dense_4h_to_h"]["kernel"] + m["dense_4h_to_h"]["bias"]
    return ln(x, p["final_layer_norm"]) @ p["embed_out"]["kernel"]


def test_forward_matches_independent_numpy_reference():
    model = _perturbed(_tiny(rotary_pct=0.5))
    ids = np.random.default_rng(0).integers(0, 61, (2, 9))
    got = np.asarray(_forward(model, jnp.asarray(ids)))
    np.testing.assert_allclose(got, _numpy_reference(model, ids), atol=2e-5, rtol=0)


def test_left_padding_with_positions_equals_unpadded():
    model = _perturbed(_tiny())
    ids = np.random.default_rng(1).integers(1, 61, (1, 7))
    padded = np.concatenate([np.full((1, 3), 5), ids], axis=1)
    mask = np.concatenate([np.zeros((1, 3), int), np.ones((1, 7), int)], axis=1)
    from llome_jax.training.step import position_ids_from_mask

    pos = position_ids_from_mask(jnp.asarray(mask))
    ref = np.asarray(_forward(model, jnp.asarray(ids)))
    got = np.asarray(_forward(model, jnp.asarray(padded), jnp.asarray(mask), pos))[:, 3:]
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
    # The padding token's value must not matter.
    other = padded.copy()
    other[:, :3] = 17
    got2 = np.asarray(_forward(model, jnp.asarray(other), jnp.asarray(mask), pos))[:, 3:]
    np.testing.assert_allclose(got2, got, atol=1e-6, rtol=0)


def test_bf16_compute_is_close_and_params_stay_fp32():
    config = _tiny()
    model = _perturbed(config)
    bf16 = convert.model_from_tensors(
        PythiaConfig(**{**config.to_dict(), "compute_dtype": "bfloat16"}), convert.hf_tensors(model)
    )
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(bf16, nnx.Param)))
    ids = jnp.asarray(np.random.default_rng(2).integers(0, 61, (2, 8)))
    a, b = np.asarray(_forward(model, ids)), np.asarray(_forward(bf16, ids))
    assert b.dtype == np.float32
    assert 0 < np.abs(a - b).max() < 0.1 * np.abs(a).max()


def test_sharded_forward_equals_single_device():
    model = _perturbed(_tiny())
    ids = np.random.default_rng(3).integers(0, 61, (8, 6)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[::2, :2] = 0
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, ids, mask):
        return nnx.merge(graphdef, state)(ids, mask)

    single = np.asarray(forward(state, ids, mask))
    mesh = parallel.make_mesh(8)
    out = forward(parallel.replicate(state, mesh), *parallel.shard_batch((ids, mask), mesh))
    assert len(out.sharding.device_set) == 8
    # Sharding the batch only reorders float32 reductions (at most 64 terms here): 64 ulps of the
    # largest |logit| (~1e-5 at the ~1.4 this model reaches) bounds that with a wide margin.
    atol = 64 * np.finfo(np.float32).eps * np.abs(single).max()
    np.testing.assert_allclose(np.asarray(out), single, atol=atol, rtol=0)


def test_train_step_contract_sft():
    """``llome_jax.training.step.make_train_step`` works with Pythia unchanged and lowers the SFT loss."""
    from llome_jax.testing import toy_token_batch
    from llome_jax.training.loss_inputs import LossParams
    from llome_jax.training.loss_registry import LOSSES
    from llome_jax.training.optimizer import OptimizerConfig, make_optimizer
    from llome_jax.training.step import TrainBatch, init_train_state, make_train_step

    model = _perturbed(_tiny(vocab=64))
    opt = make_optimizer(OptimizerConfig(learning_rate=3e-3, total_steps=10, weight_decay=0.0))
    step = make_train_step(LOSSES["sft"], model, opt)
    state = init_train_state(jax.random.key(0), model, opt)
    ids, target, attention = toy_token_batch(0, batch_size=8, seq_len=12, vocab_size=64)
    batch = TrainBatch.create(ids, target, attention)
    losses = []
    for _ in range(4):
        state, metrics = step(state, batch, LossParams())
        losses.append(float(metrics["loss"]))
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_remat_gives_identical_loss_and_gradients():
    from llome_jax.lm.logprobs import sequence_logprobs

    config = _tiny()
    model = _perturbed(config)
    remat = convert.model_from_tensors(
        PythiaConfig(**{**config.to_dict(), "remat": True}), convert.hf_tensors(model)
    )
    ids = jnp.asarray(np.random.default_rng(4).integers(0, 61, (2, 8)))
    target = jnp.ones_like(ids)

    def loss_and_grad(m):
        graphdef, params = nnx.split(m, nnx.Param)

        def loss(p):
            logits = nnx.merge(graphdef, p)(ids)
            return -sequence_logprobs(logits, ids, target).sum_logp.sum()

        return jax.jit(jax.value_and_grad(loss))(params)

    graphdef, params = nnx.split(remat, nnx.Param)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: nnx.merge(graphdef, p)(ids).sum()))(params))
    assert jaxpr.count("remat") == config.num_hidden_layers  # one rematerialised block each
    (la, ga), (lb, gb) = loss_and_grad(model), loss_and_grad(remat)
    np.testing.assert_allclose(float(la), float(lb), rtol=1e-6)
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=1e-5)
