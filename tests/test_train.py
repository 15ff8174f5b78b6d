"""Train step: optimizers vs torch, exact gradient accumulation, sharded == single device,
reference log-probs, validation, and a two-process (gloo) data-parallel run."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from llome_jax.host import parallel
from llome_jax.lm.logprobs import sequence_logprobs
from llome_jax.testing import TinyCausalLM, TinyLMConfig, toy_token_batch
from llome_jax.training import optimizer as train_optimizer
from llome_jax.training import step as train
from llome_jax.training.dataset_logprobs import compute_logprobs
from llome_jax.training.loss_inputs import LossBatch, LossParams
from llome_jax.training.loss_registry import LOSSES, default_params
from llome_jax.training.losses import marge_loss
from llome_jax.training.optimizer import OptimizerConfig, make_optimizer, paper_optimizer
from llome_jax.training.step import TrainBatch, init_train_state, make_train_step
from tests import workers
from tests.conftest import subprocess_cache_env

CONFIG = TinyLMConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, max_position=16)
REPO = pathlib.Path(__file__).resolve().parents[1]


def _model(seed: int = 0) -> TinyCausalLM:
    return TinyCausalLM(CONFIG, rngs=nnx.Rngs(seed))


def _batch(
    loss: str, seed: int = 0, batch_size: int = 16, reference=None, group_size=None
) -> TrainBatch:
    ids, tmask, amask = toy_token_batch(
        seed, batch_size=batch_size, seq_len=12, vocab_size=CONFIG.vocab_size
    )
    rng = np.random.default_rng(seed + 100)
    units = batch_size // 2 if loss == "dpo" else batch_size
    loss_batch = LossBatch.create(
        reward=rng.uniform(0, 1, units).astype(np.float32), group_size=group_size
    )
    return TrainBatch.create(ids, tmask, amask, reference=reference, loss=loss_batch)


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


_EPS32 = float(np.finfo(np.float32).eps)


def _second_moment(state: train.TrainState, config: OptimizerConfig) -> np.ndarray:
    """AdamW's bias-corrected second moment ``v_hat`` after the state's last step (flat)."""
    nu = _flat(optax.tree_utils.tree_get(state.opt_state, "nu"))
    return nu / (1.0 - config.b2 ** int(state.step))


def _adamw_tolerance(params: np.ndarray, second_moments, config: OptimizerConfig) -> np.ndarray:
    """First-order bound on how far float32 reduction-order noise in the gradients (sharding,
    micro-batching, another SIMD width) can move each parameter over AdamW steps.

    AdamW's update ``lr_t m_hat / (sqrt(v_hat) + eps)`` is scale-free in the gradient, so an
    absolute gradient error ``dg`` moves it by up to ~``2 dg / (sqrt(v_hat) + eps)`` (one term
    through ``m_hat``, one through the normalisation): elements with a near-zero gradient are
    ill-conditioned and get a wide (even vacuous) tolerance, well-conditioned ones a tight one.
    ``dg``: the clipped gradient has global norm <= max_grad_norm = 1, so each element is <= 1
    and a reordered reduction moves it by a few ulps of 1; 64 ulps is ~50x the effective gradient
    difference seen between these runs on x86 CPUs. Plus one parameter rounding per step.
    ``second_moments`` are the single-device ``v_hat`` after each step (:func:`_second_moment`).
    """
    schedule = train_optimizer.learning_rate_schedule(config)
    dg = 64 * _EPS32
    tol = sum(
        float(schedule(t)) * 2 * dg / (np.sqrt(v_hat) + config.eps)
        for t, v_hat in enumerate(second_moments)
    )
    return tol + len(second_moments) * np.spacing(np.abs(params).astype(np.float32))


def _with_reference(model, batch: TrainBatch, seed: int = 7) -> TrainBatch:
    """Reference = a *different* model, so importance weights are not all 1."""
    ref = compute_logprobs(
        _model(seed), None, batch.input_ids, batch.target_mask, batch.attention_mask
    )
    return dataclasses.replace(batch, reference=ref)


# ---------------------------------------------------------------------------------------------
# Optimizers against torch
# ---------------------------------------------------------------------------------------------


def _torch_run(torch_opt_factory, schedule_fn, params, grads_seq, max_norm):
    torch = pytest.importorskip("torch")
    tparams = {
        k: torch.nn.Parameter(torch.tensor(np.asarray(v), dtype=torch.float64))
        for k, v in params.items()
    }
    opt = torch_opt_factory(tparams)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_fn)
    for grads in grads_seq:
        for k, p in tparams.items():
            p.grad = torch.tensor(np.asarray(grads[k]), dtype=torch.float64)
        torch.nn.utils.clip_grad_norm_(list(tparams.values()), max_norm)
        opt.step()
        sched.step()
    return {k: p.detach().numpy() for k, p in tparams.items()}


def _jax_run(config: OptimizerConfig, params, grads_seq, max_norm):
    with jax.enable_x64(True):
        params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
        tx = make_optimizer(config)
        state = tx.init(params)
        for grads in grads_seq:
            grads = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), grads)
            grads, _ = train.clip_by_global_norm(grads, max_norm)
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        return jax.tree.map(np.asarray, params)


def _optimizer_problem(seed=0, steps=6):
    rng = np.random.default_rng(seed)
    params = {"kernel": rng.normal(size=(3, 4)), "bias": rng.normal(size=(4,))}
    grads_seq = [
        {k: rng.normal(size=v.shape) * (3.0 if i % 2 else 0.2) for k, v in params.items()}
        for i in range(steps)
    ]
    return params, grads_seq


def test_adamw_matches_torch():
    """AdamW(0.9, 0.999, 1e-8), decoupled weight decay on matrices only (HF Trainer groups),
    linear decay to 0, clip_grad_norm_(1.0): identical trajectories to torch in float64."""
    torch = pytest.importorskip("torch")
    params, grads_seq = _optimizer_problem()
    total = 8
    config = OptimizerConfig(name="adamw", learning_rate=0.05, total_steps=total, weight_decay=0.3)

    def factory(tp):
        return torch.optim.AdamW(
            [
                {"params": [tp["kernel"]], "weight_decay": 0.3},
                {"params": [tp["bias"]], "weight_decay": 0.0},
            ],
            lr=0.05,
            betas=(0.9, 0.999),
            eps=1e-8,
        )

    expected = _torch_run(factory, lambda s: max(0.0, (total - s) / total), params, grads_seq, 1.0)
    got = _jax_run(config, params, grads_seq, 1.0)
    for k in params:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-10, atol=1e-12)


def test_rmsprop_matches_torch():
    """torch RMSprop (alpha 0.99, eps outside the sqrt, no momentum) with HF warm-up + decay;
    optax's defaults (decay 0.9, eps inside the sqrt) would not match."""
    torch = pytest.importorskip("torch")
    params, grads_seq = _optimizer_problem(seed=1)
    total, warmup = 8, 3
    config = OptimizerConfig(
        name="rmsprop",
        learning_rate=0.01,
        total_steps=total,
        warmup_steps=warmup,
        weight_decay=0.0,
    )

    def factory(tp):
        return torch.optim.RMSprop(list(tp.values()), lr=0.01, alpha=0.99, eps=1e-8)

    def hf_schedule(s):
        if s < warmup:
            return s / max(1, warmup)
        return max(0.0, (total - s) / max(1, total - warmup))

    expected = _torch_run(factory, hf_schedule, params, grads_seq, 1.0)
    got = _jax_run(config, params, grads_seq, 1.0)
    for k in params:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-10, atol=1e-12)
    # optax's defaults (decay 0.9, eps inside the sqrt) give a different trajectory.
    with jax.enable_x64(True):
        naive = optax.rmsprop(0.01)
        p = jax.tree.map(jnp.asarray, params)
        state = naive.init(p)
        for grads in grads_seq[:3]:
            grads, _ = train.clip_by_global_norm(jax.tree.map(jnp.asarray, grads), 1.0)
            updates, state = naive.update(grads, state, p)
            p = optax.apply_updates(p, updates)
    assert not np.allclose(p["bias"], expected["bias"], rtol=1e-3)


def test_paper_optimizers():
    marge = paper_optimizer("marge", total_steps=100)
    assert (marge.name, marge.learning_rate, marge.weight_decay, marge.warmup_steps) == (
        "adamw",
        1e-6,
        0.01,
        0,
    )
    dpo = paper_optimizer("dpo", total_steps=100)
    assert (dpo.name, dpo.learning_rate, dpo.rms_decay, dpo.rms_eps, dpo.warmup_steps) == (
        "rmsprop",
        1e-7,
        0.99,
        1e-8,
        150,
    )
    schedule = train_optimizer.learning_rate_schedule(marge)
    np.testing.assert_allclose([schedule(0), schedule(50), schedule(100)], [1e-6, 5e-7, 0.0])
    with pytest.raises(ValueError, match="unknown loss 'ppo'"):
        paper_optimizer("ppo", 10)
    with pytest.raises(ValueError, match="adamw"):
        OptimizerConfig(name="sgd")


# ---------------------------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_registered_loss_trains_jitted_without_recompiling(name, key):
    model = _model()
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-2, total_steps=10))
    step = make_train_step(LOSSES[name], model, tx)
    batch = _with_reference(model, _batch(name))
    state = init_train_state(key, model, tx)
    before = _flat(state.params)
    hp = default_params(name)
    state, metrics = step(state, batch, hp)
    assert int(state.step) == 1
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    assert not np.allclose(_flat(state.params), before)
    # New hyper-parameter *values* reuse the compiled step.
    state, _ = step(state, batch, hp.replace(beta=0.3, kl_weight=2.0, stop_weight_gradient=1.0))
    assert step.jitted._cache_size() == 1


#: the two optimizers of :func:`_check_runtime_schedule`
SCHEDULE_CONFIGS = {
    "adamw": OptimizerConfig(learning_rate=1e-2, warmup_steps=3, total_steps=10),
    "rmsprop": OptimizerConfig(
        name="rmsprop", learning_rate=1e-3, warmup_steps=2, total_steps=9, weight_decay=0.1
    ),
}


def _check_runtime_schedule(name: str) -> None:
    """A step built from an ``OptimizerConfig`` takes ``(lr, W, T)`` at run time. Its updates
    equal, bit for bit, those of the same optax optimizer driven by a table of the schedule
    worked out in numpy float32 (``lr * s / W``, then ``lr * max(0, (T - s) / max(1, T - W))``,
    each division rounded once), over warm-up, decay and past ``T``. A config with other
    schedule values reuses the program and follows its own table. (With the values compiled in,
    XLA turns ``x / c`` into ``x * (1 / c)``: ``make_optimizer``'s schedule can be 1 ulp off.)"""
    config, key = SCHEDULE_CONFIGS[name], jax.random.key(0)
    model = _model()
    batch = _with_reference(model, _batch("marge"))
    hp = default_params("marge")
    steps = 10

    def table(c: OptimizerConfig) -> np.ndarray:
        s = np.arange(steps, dtype=np.float32)
        warm = s / np.float32(max(1, c.warmup_steps))
        decay = np.maximum(
            np.float32(0),
            (np.float32(c.total_steps) - s) / np.float32(max(1, c.total_steps - c.warmup_steps)),
        )
        decay = decay if c.schedule == "linear" else np.ones_like(s)
        return np.float32(c.learning_rate) * np.where(s < c.warmup_steps, warm, decay)

    def run(optimizer):
        step = make_train_step(LOSSES["marge"], model, optimizer, donate=False)
        state = init_train_state(key, model, optimizer)
        for _ in range(steps):
            state, _ = step(state, batch, hp)
        return step, _flat(state.params)

    def reference(c: OptimizerConfig) -> np.ndarray:
        lr = jnp.asarray(table(c))
        return run(train_optimizer.optimizer_with_schedule(c, lambda count: lr[count]))[1]

    step, params = run(config)
    assert step.schedule == (config.learning_rate, config.warmup_steps, config.total_steps)
    np.testing.assert_array_equal(params, reference(config))
    other = dataclasses.replace(config, learning_rate=2 * config.learning_rate, total_steps=3)
    other_step, other_params = run(other)
    assert other_step.jitted is step.jitted and step.jitted._cache_size() == 1
    np.testing.assert_array_equal(other_params, reference(other))
    assert not np.array_equal(other_params, params)


def test_schedule_values_at_run_time_follow_the_float32_formula():
    """:func:`_check_runtime_schedule` for AdamW and RMSprop, in a subprocess with XLA:CPU's
    fusion emitters (XLA's default). The suite compiles with the older elemental emitters
    (``conftest.py``: half the compile time), whose updates from a compiled-in table of learning
    rates differ from the run-time schedule's by an ulp in half the parameters."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true --xla_backend_optimization_level=0"
        " --xla_llvm_disable_expensive_passes=true",
    }
    code = "from tests.test_train import _check_runtime_schedule as c; c('adamw'); c('rmsprop')"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_equal_structures_share_one_compiled_step():
    """Steps of two models with equal graphs (other weights) share the ``jax.jit`` function;
    another loss, micro-batching, mesh, clipping or optimizer structure does not."""
    config = OptimizerConfig(learning_rate=1e-2, total_steps=10)

    def jitted(model=None, loss="marge", optimizer=config, **kwargs):
        model = _model() if model is None else model
        return make_train_step(LOSSES[loss], model, optimizer, **kwargs).jitted

    base = jitted()
    assert jitted(_model(seed=1)) is base
    assert jitted(optimizer=dataclasses.replace(config, learning_rate=1.0, total_steps=3)) is base
    others = [
        jitted(loss="sft"),
        jitted(num_microbatches=2),
        jitted(max_grad_norm=None),
        jitted(mesh=parallel.make_mesh(2)),
        jitted(optimizer=dataclasses.replace(config, name="rmsprop")),
        jitted(optimizer=dataclasses.replace(config, weight_decay=0.5)),
        jitted(optimizer=make_optimizer(config)),
        jitted(model=TinyCausalLM(dataclasses.replace(CONFIG, hidden_size=8), rngs=nnx.Rngs(0))),
    ]
    assert all(other is not base for other in others)
    assert len({id(other) for other in others}) == len(others)
    # the validation step likewise: the second model's lookup finds the first one's program
    train.make_eval_step(LOSSES["marge"], _model())
    hits = train._jitted_eval_step.cache_info().hits
    train.make_eval_step(LOSSES["marge"], _model(seed=1))
    assert train._jitted_eval_step.cache_info().hits == hits + 1


def _one_sgd_update(loss_name, batch, num_microbatches, hp=None, mesh=None, model=None):
    """The gradient, as the change of one SGD step with learning rate 1 (default: ``_model()``)."""
    model = _model() if model is None else model
    step = make_train_step(
        LOSSES[loss_name],
        model,
        optax.sgd(1.0),
        num_microbatches=num_microbatches,
        max_grad_norm=None,
        mesh=mesh,
    )
    state = init_train_state(jax.random.key(0), model, optax.sgd(1.0))
    before = _flat(state.params)
    if mesh is not None:
        state, batch = parallel.replicate(state, mesh), parallel.shard_batch(batch, mesh)
    state, metrics = step(state, batch, hp or default_params(loss_name))
    return before - _flat(state.params), metrics  # = the gradient


@pytest.mark.parametrize("name", ["marge", "dpo", "sft"])
def test_gradient_accumulation_is_exact(name):
    """M micro-batches give the full-batch gradient even though MargE normalises importance
    weights over the whole batch and DPO pairs rows across halves (SFT: one-pass path)."""
    batch = _with_reference(_model(), _batch(name))
    g_full, m_full = _one_sgd_update(name, batch, 1)
    g_acc, m_acc = _one_sgd_update(name, batch, 4)
    # Exact in real arithmetic; in float32 the micro-batches reorder sums of ~16 x 11 per-token
    # terms, each at most ~max|g|: 64 ulps of max|g| (the largest difference seen is 8 ulps).
    atol = 64 * _EPS32 * np.abs(g_full).max()
    np.testing.assert_allclose(g_acc, g_full, rtol=0, atol=atol)
    # the loss is a weighted mean of per-sequence terms: rtol 1e-5 is ~80 ulps
    np.testing.assert_allclose(float(m_acc["loss"]), float(m_full["loss"]), rtol=1e-5)


def test_sharded_step_equals_single_device():
    """8 fake devices, batch split over 'data', MargE normalised over the global batch, gradient
    accumulation 2, AdamW: several steps give the same parameters as one device."""
    assert jax.device_count() >= 8
    mesh = parallel.make_mesh(8)
    model = _model()
    config = OptimizerConfig(learning_rate=3e-3, total_steps=10, weight_decay=0.01)
    tx = make_optimizer(config)
    batches = [_with_reference(model, _batch("marge", seed=s)) for s in range(3)]
    hp = LossParams(beta=2.0, kl_weight=1.0)

    def run(mesh):
        step = make_train_step(marge_loss, model, tx, num_microbatches=2, mesh=mesh)
        state = init_train_state(jax.random.key(0), model, tx)
        if mesh is not None:
            state = parallel.replicate(state, mesh)
        second_moments = []
        for batch in batches:
            if mesh is not None:
                batch = parallel.shard_batch(batch, mesh)
                assert batch.input_ids.sharding.spec == jax.sharding.PartitionSpec("data")
                assert len(batch.input_ids.sharding.device_set) == 8
            state, _ = step(state, batch, hp)
            second_moments.append(_second_moment(state, config))
        return _flat(state.params), second_moments

    single, second_moments = run(None)
    sharded, _ = run(mesh)
    # Sharding reorders the float32 gradient reductions; AdamW turns that into a parameter change
    # bounded by its conditioning (see _adamw_tolerance), not by a blanket rtol.
    tol = _adamw_tolerance(single, second_moments, config)
    np.testing.assert_array_less(np.abs(sharded - single), tol)
    # Negative control: normalising per device (groups of B/8 = 2, what pmap would do silently)
    # gives a different trajectory, visibly outside the tolerance for most parameters.
    batches = [
        dataclasses.replace(
            b, loss=dataclasses.replace(b.loss, group=jnp.arange(16, dtype=jnp.int32) // 2)
        )
        for b in batches
    ]
    per_device, _ = run(None)
    assert np.mean(np.abs(per_device - single) > tol) > 0.75
    assert np.abs(per_device - single).max() > 100 * np.abs(sharded - single).max()


def test_compute_logprobs_matches_direct_forward():
    model = _model(3)
    ids, tmask, amask = toy_token_batch(5, batch_size=10, seq_len=12, vocab_size=32)
    graphdef, state = nnx.split(model)

    @jax.jit
    def direct_forward(state, ids, amask, tmask):  # the model called directly, as a user would
        logits = nnx.merge(graphdef, state)(ids, amask, train.position_ids_from_mask(amask))
        return sequence_logprobs(logits, ids, tmask)

    direct = direct_forward(state, ids, amask, tmask)
    chunked = compute_logprobs(model, None, ids, tmask, amask, batch_size=4)  # 3 chunks, padded
    # other batch shapes reorder the float32 reductions: rtol 1e-5 is ~80 ulps of sum_logp
    np.testing.assert_allclose(chunked.sum_logp, direct.sum_logp, rtol=1e-5)
    np.testing.assert_array_equal(chunked.num_tokens, direct.num_tokens)  # integer counts
    sharded = compute_logprobs(
        model, None, ids, tmask, amask, batch_size=8, mesh=parallel.make_mesh(8)
    )
    np.testing.assert_allclose(sharded.sum_logp, direct.sum_logp, rtol=1e-5)
    # The train step's forward at the initial parameters sees the same log-probs: with the
    # reference from compute_logprobs, every importance log-ratio is 0.
    batch = TrainBatch.create(
        ids, tmask, amask, reference=direct, loss=LossBatch.create(reward=np.linspace(0, 1, 10))
    )
    step = make_train_step(marge_loss, model, optax.sgd(0.0))
    state = init_train_state(jax.random.key(0), model, optax.sgd(0.0))
    params = jax.tree.map(jnp.copy, state.params)
    _, metrics = step(state, batch, LossParams())
    # Zero up to float32 reduction order (another executable computes the same forward): each
    # sum_logp is a sum of <= 11 log-softmax terms of one sign, 16 ulps of the largest |sum_logp|.
    # A semantic mismatch (positions, masks) would be O(1).
    logp_tol = 16 * _EPS32 * float(np.abs(np.asarray(direct.sum_logp)).max())
    assert abs(float(metrics["log_ratio_mean"])) < logp_tol
    # The eval step (forward in 2 slices) reports the same loss the train step saw.
    evaluate = train.make_eval_step(marge_loss, model, num_microbatches=2)
    eval_metrics = evaluate(params, batch, LossParams())
    # rtol 1e-5 covers the worst change of both metrics when every sum_logp moves by logp_tol
    # (Jacobians w.r.t. sum_logp sum to ~1.3 and ~0.5: <= 8.6e-5 and 3.1e-5 of 3.7e-4, 4.7e-5).
    np.testing.assert_allclose(float(eval_metrics["loss"]), float(metrics["loss"]), rtol=1e-5)
    np.testing.assert_allclose(
        float(eval_metrics["kl_to_target"]), float(metrics["kl_to_target"]), rtol=1e-5
    )


def test_bad_input_raises_before_jit():
    ids, tmask, amask = toy_token_batch(0, batch_size=6, seq_len=8, vocab_size=32)
    bad = tmask.copy()
    bad[2] = 0
    with pytest.raises(ValueError, match="no target tokens"):
        TrainBatch.create(ids, bad, amask)
    with pytest.raises(ValueError, match="shape"):
        TrainBatch.create(ids, tmask[:, :-1], amask)
    with pytest.raises(ValueError, match="units"):
        TrainBatch.create(ids, tmask, amask, loss=LossBatch.create(4))
    model = _model()
    step = make_train_step(marge_loss, model, optax.sgd(0.1), num_microbatches=4)
    with pytest.raises(ValueError, match="divisible"):
        step(
            init_train_state(jax.random.key(0), model, optax.sgd(0.1)),
            TrainBatch.create(ids, tmask, amask),
            LossParams(),
        )
    with pytest.raises(ValueError, match="not divisible"):
        parallel.shard_batch(TrainBatch.create(ids, tmask, amask), parallel.make_mesh(4))
    with pytest.raises(ValueError, match="devices are available"):
        parallel.make_mesh(jax.device_count() + 1)


# ---------------------------------------------------------------------------------------------
# Two processes over loopback (jax.distributed + gloo)
# ---------------------------------------------------------------------------------------------


#: The optimizer workers.setup() builds (its learning-rate schedule scales the tolerance).
_WORKER_OPTIMIZER = OptimizerConfig(learning_rate=1e-2, total_steps=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_data_parallel_matches_single_device(tmp_path):
    """2 processes x 2 CPU devices = a 4-device global mesh over loopback (gloo); each process
    feeds half of every global batch. The parameters equal a single-device run."""
    port = _free_port()
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(REPO),
        **subprocess_cache_env(),  # this worker's persistent compilation cache, if any
    }
    worker = REPO / "tests" / "workers.py"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(worker),
                "distributed",
                f"127.0.0.1:{port}",
                "2",
                str(pid),
                str(tmp_path),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for pid in range(2)
    ]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out)
        assert p.returncode == 0, out[-3000:]
    results = [json.loads((tmp_path / f"result_{pid}.json").read_text()) for pid in range(2)]
    assert results[0]["process_count"] == 2 and results[0]["device_count"] == 4
    # Identical by construction: every replica applies the same update to the same all-reduced
    # gradient (the collective hands one reduced value to every participant).
    np.testing.assert_array_equal(results[0]["params"], results[1]["params"])
    # The single-device reference (workers.train_single_device) with its AdamW second moments:
    # the 4-device run differs from it only by the reduction order of the gradients.
    model, tx, batches, loss_fn, hp = workers.setup()
    step = make_train_step(loss_fn, model, tx)
    state = init_train_state(jax.random.key(0), model, tx)
    second_moments = []
    for batch in batches[:2]:
        state, _ = step(state, batch, hp)
        second_moments.append(_second_moment(state, _WORKER_OPTIMIZER))
    expected = _flat(state.params)
    tol = _adamw_tolerance(expected, second_moments, _WORKER_OPTIMIZER)
    np.testing.assert_array_less(np.abs(np.asarray(results[0]["params"]) - expected), tol)


# ------------------------------------------------------------------ the output head's window


def _pythia(seed: int = 3):
    from llome_jax.lm.pythia import Pythia, PythiaConfig

    config = PythiaConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
    )
    return Pythia(config, rngs=nnx.Rngs(seed))


class _FullLogitsOnly(nnx.Module):
    """A causal LM whose call has no ``logit_positions``: the step must pick positions itself."""

    def __init__(self, inner: nnx.Module) -> None:
        self.inner = inner

    def __call__(self, input_ids, attention_mask=None, position_ids=None):
        return self.inner(input_ids, attention_mask, position_ids)


def _window_batch(loss: str, target_window="auto", seed: int = 0) -> TrainBatch:
    """Rows of 40 tokens: prompts of 24-26 tokens, then targets, then 0-2 padding tokens."""
    ids, tmask, amask = toy_token_batch(
        seed, batch_size=8, seq_len=40, vocab_size=97, min_prompt=24, max_pad=2
    )
    units = 4 if loss == "dpo" else 8
    reward = np.random.default_rng(seed).uniform(0, 1, units).astype(np.float32)
    return TrainBatch.create(
        ids, tmask, amask, loss=LossBatch.create(reward=reward), target_window=target_window
    )


def test_target_window_is_the_longest_target_rounded_up_to_16():
    batch = _window_batch("sft")
    # prompts of 24-26 tokens in rows of 40: at most 16 targets, so W = 16 of 39 positions
    assert batch.target_window == 16
    assert _window_batch("sft", target_window=None).target_window is None
    with pytest.raises(ValueError, match="target_window=8 must lie in"):
        _window_batch("sft", target_window=8)
    with pytest.raises(ValueError, match="target_window must be"):
        _window_batch("sft", target_window="yes")


@pytest.mark.parametrize(("name", "num_microbatches"), [("sft", 1), ("marge", 2), ("dpo", 1)])
def test_head_on_target_positions_gives_the_full_head_gradient(name, num_microbatches):
    """The head applied to the [B, 16] target window (Pythia's ``logit_positions``, and the
    step's own pick for a model without it) gives the gradient of the head on all 40 positions."""
    model = _pythia()
    full = _window_batch(name, target_window=None)
    reference = compute_logprobs(
        _pythia(seed=9), None, full.input_ids, full.target_mask, full.attention_mask
    )
    full = dataclasses.replace(full, reference=reference)
    windowed = dataclasses.replace(full, target_window=16)
    g_full, m_full = _one_sgd_update(name, full, num_microbatches, model=model)
    g_window, m_window = _one_sgd_update(name, windowed, num_microbatches, model=model)
    # Same terms, other float32 summation order (fewer zero rows in the head's weight gradient).
    atol = 64 * _EPS32 * np.abs(g_full).max()
    np.testing.assert_allclose(g_window, g_full, rtol=0, atol=atol)
    np.testing.assert_allclose(float(m_window["loss"]), float(m_full["loss"]), rtol=1e-5)
    g_picked, _ = _one_sgd_update(name, windowed, num_microbatches, model=_FullLogitsOnly(model))
    np.testing.assert_allclose(g_picked, g_full, rtol=0, atol=atol)


def test_head_on_target_positions_removes_the_heads_flops():
    """XLA's cost analysis of the SFT step: the window removes 6 B (T - W) H V head FLOPs
    (forward, and the backward's two matmuls) for the 24 positions it leaves out."""
    model = _pythia()
    tx = optax.sgd(1.0)
    state = init_train_state(jax.random.key(0), model, tx)

    def flops(batch: TrainBatch) -> float:
        step = make_train_step(LOSSES["sft"], model, tx, donate=False)
        hp = default_params("sft").as_arrays()
        compiled = step.jitted.lower(state, batch, hp, step.rest).compile()
        return float(compiled.cost_analysis()["flops"])

    saved = flops(_window_batch("sft", target_window=None)) - flops(_window_batch("sft"))
    b, t, w, h, v = 8, 40, 16, 32, 97
    expected = 6 * b * (t - w) * h * v
    assert 0.9 * expected <= saved <= 1.5 * expected


def test_compute_logprobs_with_and_without_the_window():
    model = _pythia()
    batch = _window_batch("sft", target_window=None)
    args = (batch.input_ids, batch.target_mask, batch.attention_mask)
    full = compute_logprobs(model, None, *args, target_window=None)
    windowed = compute_logprobs(model, None, *args)  # auto: 16
    picked = compute_logprobs(_FullLogitsOnly(model), None, *args)
    np.testing.assert_array_equal(windowed.num_tokens, full.num_tokens)
    np.testing.assert_allclose(windowed.sum_logp, full.sum_logp, rtol=1e-6)
    np.testing.assert_allclose(picked.sum_logp, full.sum_logp, rtol=1e-6)
    with pytest.raises(ValueError, match="target_window=4 must lie in"):
        compute_logprobs(model, None, *args, target_window=4)
