"""The fast Ehrlich kernel against a direct NumPy transcription of the definition, on shapes the
paper instances do not reach (v > 32 and v = 64: multi-word transition bit tables; v > 255:
uint16 lanes; L > 32: blocked reductions with a tail), for every integer input dtype; and the
input path: narrow token bytes are transposed, the input is never widened first."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import llome_jax.ehrlich as eh
from llome_jax.ehrlich import kernel as K  # noqa: N812

CONFIGS = {
    "v40_L40": eh.EhrlichConfig(num_states=40, dim=40, num_motifs=2, motif_length=5),
    "v64_L70_q2_epi": eh.EhrlichConfig(
        num_states=64, dim=70, num_motifs=3, motif_length=4, quantization=2, epistasis_factor=1.5
    ),
    "v300_L12": eh.EhrlichConfig(num_states=300, dim=12, num_motifs=2, motif_length=3),
    "v8_L16_q3": eh.EhrlichConfig(
        num_states=8, dim=16, num_motifs=2, motif_length=4, quantization=3
    ),
}


def _reference(fn: eh.Ehrlich, x: np.ndarray) -> np.ndarray:
    """``f(x)`` straight from the definition (holo semantics), float32, product left to right."""
    cfg = fn.config
    matrix = np.asarray(fn.transition_matrix)
    motifs, offsets = np.asarray(fn.motifs), np.asarray(fn.offsets)
    x = np.asarray(x, np.int64)
    in_range = np.all((x >= 0) & (x < cfg.num_states), axis=-1)
    safe = np.clip(x, 0, cfg.num_states - 1)
    feasible = in_range & np.all(matrix[safe[:, :-1], safe[:, 1:]] > 0, axis=-1)
    a = np.float32(cfg.epistasis_factor)
    product = None
    for i in range(cfg.num_motifs):
        starts = range(cfg.dim - int(offsets[i, -1]))
        counts = [
            sum(
                (x[:, l + offsets[i, j]] == motifs[i, j]).astype(np.int64)
                for j in range(len(offsets[i]))
            )
            for l in starts
        ]
        level = np.max(np.stack(counts), axis=0) // cfg.quant_divisor
        h = level.astype(np.float32) / np.float32(cfg.quant_scale)
        response = ((a * h) * (h - np.float32(1)) + np.float32(1)) * h
        product = response if product is None else (product * response).astype(np.float32)
    return np.where(feasible, product, np.float32(-np.inf)).astype(np.float32)


def _batch(fn: eh.Ehrlich, n: int, seed: int) -> np.ndarray:
    """Chain samples (feasible), the optimum, and 3 % uniform substitutions (mostly infeasible)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(eh.initial_solution(jax.random.key(seed), fn, n)).astype(np.int64)
    x[: n // 4] = np.asarray(eh.optimal_solution(fn))
    noise = rng.random(x.shape) < 0.03
    x[noise] = rng.integers(0, fn.config.num_states, int(noise.sum()))
    return x


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_kernel_equals_definition_for_every_dtype(name):
    fn = eh.make(jax.random.key(11), CONFIGS[name])
    x = _batch(fn, 600, seed=2)
    expected = _reference(fn, x)
    assert np.isfinite(expected).mean() > 0.3 and np.isinf(expected).any()  # both kinds present
    dtypes = [np.int16, np.int32, np.int64, np.uint16] + (
        [np.uint8, np.int8] if fn.config.num_states <= 127 else []
    )
    for dtype in dtypes:
        for chunk in (None, 64, 250):  # 250: the clamped last chunk overlaps its predecessor
            got = np.asarray(eh.evaluate(fn, x.astype(dtype), chunk_size=chunk))
            np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))
    presence = np.asarray(eh.motif_presence(fn, x.astype(dtypes[0]), chunk_size=64))
    assert presence.shape == (600, fn.config.num_motifs)
    np.testing.assert_array_equal(
        np.asarray(eh.is_feasible(fn, x.astype(dtypes[-1]))), np.isfinite(expected)
    )


@pytest.mark.parametrize("name", ["v40_L40", "v64_L70_q2_epi", "v300_L12"])
def test_out_of_range_tokens_in_every_position_are_infeasible_under_jit(name):
    """Inside a trace there is no eager range check: each out-of-range token (>= v, negative,
    or wrapping to a motif state modulo 256) must make its sequence infeasible wherever it sits,
    first and last positions included."""
    fn = eh.make(jax.random.key(11), CONFIGS[name])
    v, length = fn.config.num_states, fn.config.dim
    optimum = np.asarray(eh.optimal_solution(fn)).astype(np.int32)
    bad_tokens = [v, v + 1, 256 + int(optimum[0]), -1, -256 + int(optimum[0]), 2**31 - 1]
    rows = []
    for position in sorted({0, 1, length // 2, length - 2, length - 1}):
        for token in bad_tokens:
            row = optimum.copy()
            row[position] = token
            rows.append(row)
    x = np.stack(rows)
    values = np.asarray(jax.jit(eh.evaluate)(fn, jnp.asarray(x)))
    assert np.all(values == -np.inf)
    feasible = np.asarray(jax.jit(eh.is_feasible)(fn, jnp.asarray(x)))
    assert not feasible.any()
    assert float(jax.jit(eh.evaluate)(fn, jnp.asarray(optimum))) == 1.0


def _eqns(jaxpr: Any):
    """Every equation of a (closed) jaxpr, recursing into loop bodies and calls."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    yield from _eqns(sub)


def _token_path_problems(kernel: Any, fn: eh.Ehrlich, x: jax.Array, chunk: int) -> list[str]:
    """Ways in which ``kernel(fn, x, chunk)`` moves the ``[n, L]`` input (or a ``[chunk, L]``
    block of it) in more than one byte per token: a convert to a wider dtype of an input-shaped
    array, or a transpose of a block wider than one byte."""
    length = fn.config.dim
    block_shapes = {(x.shape[0], length), (chunk, length)}
    problems = []
    for eqn in _eqns(jax.make_jaxpr(kernel, static_argnums=2)(fn, x, chunk)):
        if not eqn.invars or not hasattr(eqn.invars[0], "aval"):
            continue
        aval = eqn.invars[0].aval
        shape = tuple(getattr(aval, "shape", ()))
        if shape not in block_shapes:
            continue
        name = eqn.primitive.name
        if (
            name == "convert_element_type"
            and eqn.params["new_dtype"].itemsize > aval.dtype.itemsize
        ):
            problems.append(f"widens {aval.dtype}{list(shape)} to {eqn.params['new_dtype']}")
        if name == "transpose" and aval.dtype.itemsize > 1:
            problems.append(f"transposes {aval.dtype}{list(shape)}")
    return problems


@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.int8, jnp.int32])
def test_input_is_transposed_as_bytes_and_never_widened(dtype):
    """uint8 input is transposed as it is (no int32 copy of the batch); int8/int32 input is
    narrowed to one byte per token *before* the transpose (the previous kernel transposed int32
    input as int32). A deliberately widening kernel shows that the check can fail."""
    fn = eh.paper_function("f2")
    chunk = 256
    x = jnp.asarray(_batch(fn, 1000, seed=4), dtype)
    assert _token_path_problems(K._evaluate, fn, x, chunk) == []
    values = K._evaluate(fn, x, chunk)
    np.testing.assert_array_equal(np.asarray(values), _reference(fn, np.asarray(x)))

    def widening_kernel(f: eh.Ehrlich, tokens: jax.Array, chunk_size: int) -> jax.Array:
        return K._evaluate.__wrapped__(f, tokens.astype(jnp.int32), chunk_size)

    widening = _token_path_problems(widening_kernel, fn, x, chunk)
    # int32 input is already int32, so only the narrower dtypes can be widened
    assert any("widens" in problem for problem in widening) == (dtype != jnp.int32), widening


# ---------------------------------------------------------------------------------------------
# The default chunk size depends on the backend; values never do
# ---------------------------------------------------------------------------------------------
#: The CPU defaults before the accelerator default existed (``[L, chunk]`` bytes ~ 16 KiB).
CPU_CHUNKS_BEFORE = {"f1": 128, "f2": 512, "f3": 128, "f4": 128}


def test_default_chunk_size_per_backend(monkeypatch):
    """On CPU the default is unchanged (16 KiB blocks: 512 for L=32, 128 for L=128); with the
    backend reported as a GPU (or TPU) it is 65,536 for every paper instance, and for a long
    ``L`` the padded ``[2L, chunk]`` byte block is capped at 16 MiB."""
    assert jax.default_backend() == "cpu"
    for name, before in CPU_CHUNKS_BEFORE.items():
        config = eh.paper_function(name).config
        assert K.default_chunk_size(config) == before
        assert K.default_chunk_size(config, "cpu") == before
        assert K.default_chunk_size(config, "gpu") == 65_536
        assert K.default_chunk_size(config, "tpu") == 65_536
    long = eh.EhrlichConfig(num_states=32, dim=1000, num_motifs=4, motif_length=4)
    assert K.default_chunk_size(long, "cpu") == 64  # max(64, 2^14 // 1000), unchanged formula
    assert K.default_chunk_size(long, "gpu") == 8192  # 2^24 // 2000 = 8388 -> 8192
    assert 2 * long.dim * K.default_chunk_size(long, "gpu") <= K.ACCELERATOR_BLOCK_BYTES
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert K.default_chunk_size(eh.paper_function("f2").config) == 65_536


def test_evaluate_uses_the_backend_default_and_values_are_unchanged(monkeypatch):
    """``evaluate`` with no ``chunk_size`` passes the backend's default to the kernel: the CPU
    value here, 65,536 once ``jax.default_backend()`` reports a GPU (a dry run of the GPU path on
    CPU: the same XLA:CPU kernel runs with the GPU chunk), and the values are bit-identical;
    ``chunk_size=`` still overrides. A sharded array's own devices (CPU) decide over the default
    backend."""
    fn = eh.paper_function("f2")
    x = _batch(fn, 1500, seed=7)
    expected = _reference(fn, x)
    chunks: list[int] = []
    kernel = K._evaluate

    def recording(f: eh.Ehrlich, tokens: Any, chunk_size: int) -> jax.Array:
        chunks.append(chunk_size)
        return kernel(f, tokens, chunk_size)

    monkeypatch.setattr(K, "_evaluate", recording)
    cpu = np.asarray(eh.evaluate(fn, x, threads=1))
    assert chunks == [512]
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    gpu = np.asarray(eh.evaluate(fn, x))
    overridden = np.asarray(eh.evaluate(fn, x, chunk_size=100))
    assert chunks == [512, 65_536, 100]
    for got in (cpu, gpu, overridden):
        np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    sharded = jax.device_put(jnp.asarray(x[:1000]), NamedSharding(mesh, P("data")))
    got = np.asarray(eh.evaluate(fn, sharded))
    assert chunks[-1] == 512  # the array lives on CPU devices: the CPU default
    np.testing.assert_array_equal(got.view(np.int32), expected[:1000].view(np.int32))
