"""bf16 generation (``SampleConfig.compute_dtype``, ``RefineConfig.generate_dtype``): the default
path is the fp32 one, unchanged; bf16 decoding of the tiny test checkpoint stays within a stated
tolerance of fp32; refinement passes the option through; old configurations resume."""

from __future__ import annotations

import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from llome_jax import ehrlich
from llome_jax.ehrlich import EhrlichConfig
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.loop import Llome
from llome_jax.llome.refine import RefineConfig, iterative_refinement
from llome_jax.lm import convert, sample
from llome_jax.lm.codec import SequenceCodec
from llome_jax.lm.pythia import Pythia, PythiaConfig, cast_floats
from llome_jax.lm.sample import SampleConfig, generate, split_for_generation
from llome_jax.lm.tokenizer import make_ehrlich_tokenizer
from llome_jax.training.step import position_ids_from_mask

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "pythia_tiny"

#: bf16 unit roundoff (8 significant bits): a relative rounding error of at most 2^-8.
BF16_U = 2.0**-8


@pytest.fixture(scope="module")
def tiny() -> tuple[Pythia, np.ndarray, np.ndarray, dict]:
    """The tiny HF checkpoint (vocab 96, H 32, 2 layers), its 2 prompts (one left-padded) and
    the greedy continuation transformers produced (``greedy.json``, 8 tokens)."""
    model = convert.load_hf(FIXTURE)
    ids = np.load(FIXTURE / "input_ids.npy").astype(np.int32)
    mask = np.load(FIXTURE / "attention_mask.npy").astype(np.int32)
    return model, ids, mask, json.loads((FIXTURE / "greedy.json").read_text())


def _greedy(model, ids, mask, n, dtype):
    config = SampleConfig(max_new_tokens=n, top_k=None, compute_dtype=dtype)
    return generate(jax.random.key(0), model, ids, mask, config, temperature=0.0)


def _core_jaxpr(model, ids, mask, config) -> str:
    graphdef, state = split_for_generation(model, config)
    core = functools.partial(sample._generate_core, graphdef, config=config)
    temperature = jnp.zeros((ids.shape[0],), jnp.float32)
    return str(jax.make_jaxpr(core)(state, jax.random.key(0), ids, mask, temperature))


def test_default_generation_path_is_the_fp32_one_unchanged(tiny) -> None:
    """No ``compute_dtype`` (the default, what refinement passes for ``generate_dtype=
    "float32"``): the model's own graph and parameters are used, nothing in the traced decoder
    is bf16, and the greedy tokens are transformers' (log-probs within fp32 rounding).
    ``compute_dtype="float32"`` on an fp32 model is the same program, bit for bit."""
    model, ids, mask, hf = tiny
    default = SampleConfig(max_new_tokens=hf["max_new_tokens"], top_k=None)
    assert default.compute_dtype is None and RefineConfig().generate_dtype == "float32"
    graphdef, state = split_for_generation(model, default)
    own_graphdef, own_state = nnx.split(model)
    assert graphdef == own_graphdef
    assert all(
        a is b for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(own_state), strict=True)
    )
    assert "bf16" not in _core_jaxpr(model, ids, mask, default)
    bf16 = SampleConfig(max_new_tokens=hf["max_new_tokens"], top_k=None, compute_dtype="bfloat16")
    assert "bf16" in _core_jaxpr(model, ids, mask, bf16)  # the check above can fail

    out = _greedy(model, ids, mask, hf["max_new_tokens"], None)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(hf["tokens"]))
    np.testing.assert_allclose(np.asarray(out.logprobs), hf["logprobs"], rtol=0, atol=1e-5)
    same = _greedy(model, ids, mask, hf["max_new_tokens"], "float32")
    for field in ("tokens", "logprobs", "logprobs_raw", "lengths"):
        np.testing.assert_array_equal(np.asarray(getattr(same, field)), getattr(out, field))


def test_bf16_greedy_decoding_stays_close_to_fp32(tiny) -> None:
    """bf16 parameters and KV cache on the tiny checkpoint, 8 greedy tokens from 2 prompts.

    Tolerance, stated and derived: bf16 keeps 8 significant bits (unit roundoff ``u = 2^-8``);
    we allow every logit to move by ``tol = 4 u max|z|`` (0.023 here; the full forward in bf16
    measured 0.010, i.e. 1.8 u max|z|). A log-prob ``z_t - logsumexp(z)`` then moves by at most
    ``2 tol``, and a greedy decision can flip only where the fp32 top-1/top-2 gap is below
    ``2 tol``: every gap along this path is larger (0.054 at the closest step, checked first),
    so the bf16 tokens must equal the fp32 ones. The bf16 run must really differ from fp32 (it
    is not the fp32 path), and the caller's parameters stay fp32."""
    model, ids, mask, hf = tiny
    n = hf["max_new_tokens"]
    fp32 = _greedy(model, ids, mask, n, None)
    tokens = np.asarray(fp32.tokens)
    full_ids = np.concatenate([ids, tokens], axis=1)
    full_mask = np.concatenate([mask, np.ones_like(tokens)], axis=1)
    positions = position_ids_from_mask(full_mask)
    steps = slice(ids.shape[1] - 1, -1)  # the logits that chose each generated token
    z32 = np.asarray(model(full_ids, full_mask, positions))[:, steps]
    graphdef, state = split_for_generation(model, SampleConfig(n, compute_dtype="bfloat16"))
    in_bf16 = nnx.merge(graphdef, cast_floats(state, "bfloat16"))
    z16 = np.asarray(in_bf16(full_ids, full_mask, positions))[:, steps]
    tol = 4 * BF16_U * float(np.abs(z32).max())
    assert 0 < np.abs(z16 - z32).max() <= tol
    top2 = np.sort(z32, axis=-1)[..., -2:]
    assert (top2[..., 1] - top2[..., 0]).min() > 2 * tol  # the precondition of equal tokens

    bf16 = _greedy(model, ids, mask, n, "bfloat16")
    np.testing.assert_array_equal(np.asarray(bf16.tokens), tokens)
    delta = np.abs(np.asarray(bf16.logprobs_raw) - np.asarray(fp32.logprobs_raw))
    assert 0 < delta.max() <= 2 * tol, (delta.max(), tol)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(nnx.state(model)))

    assert in_bf16.config.compute_dtype == in_bf16.config.param_dtype == "bfloat16"
    assert in_bf16.init_cache(1, 4).key[0].dtype == jnp.bfloat16  # the KV cache is bf16 too
    with pytest.raises(ValueError, match="compute_dtype"):
        SampleConfig(n, compute_dtype="float16")


def test_refinement_generates_in_the_configured_dtype(monkeypatch) -> None:
    """``RefineConfig.generate_dtype`` reaches every ``generate`` call as
    ``SampleConfig.compute_dtype`` (None for the default "float32"); a bad value is refused;
    ``refine.generate_dtype`` is a LoopConfig override, and a saved configuration without it
    (a run made before it existed) resumes with the default."""
    num_states = length = 8
    fn = ehrlich.make(
        jax.random.key(0),
        EhrlichConfig(num_states=num_states, dim=length, num_motifs=2, motif_length=2),
    )
    codec = SequenceCodec(make_ehrlich_tokenizer(num_states), num_states, length)
    cfg = PythiaConfig.preset(
        "tiny",
        vocab_size=codec.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = Pythia(cfg, rngs=nnx.Rngs(0))
    seeds = np.asarray(ehrlich.initial_solution(jax.random.key(1), fn, 2))
    seen: list[str | None] = []
    real = sample.generate

    def spy(key, model, ids, mask, config, *args, **kwargs):
        seen.append(config.compute_dtype)
        return real(key, model, ids, mask, config, *args, **kwargs)

    monkeypatch.setattr(sample, "generate", spy)
    run = RefineConfig(num_iterations=1, num_samples=1, batch_size=8)
    for dtype, expected in (("float32", None), ("bfloat16", "bfloat16")):
        seen.clear()
        config = RefineConfig(**{**run.__dict__, "generate_dtype": dtype})
        out = iterative_refinement(jax.random.key(2), model, codec, fn, seeds, (1.0,), config)
        assert out.num_generated == 4 and seen and set(seen) == {expected}
    with pytest.raises(ValueError, match="generate_dtype"):
        RefineConfig(generate_dtype="float16")

    loop = LoopConfig().replace(**{"refine.generate_dtype": "bfloat16"})
    assert loop.refine.generate_dtype == "bfloat16"
    now = LoopConfig().to_dict()
    before = {**now, "refine": {k: v for k, v in now["refine"].items() if k != "generate_dtype"}}
    assert Llome.upgrade_config(before) == {**now, "config_version": Llome.version()}
