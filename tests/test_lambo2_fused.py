"""LaMBO-2's fused training step (``TrainConfig.fused``, docs/design/lambo2_port.md decision 15).

The fused step is a different algorithm from cortex's per-leaf step (simultaneous instead of
sequential updates of the shared encoder), so it is checked against an independent
leaf-at-a-time reference of the *simultaneous* update, against the per-leaf step where the two
must agree (the same random draws; ``lr = 0``; the first leaf), and end to end.

Tolerances: the fused step sums the same float32 terms as the reference in another order (one
backward pass through the shared encoder instead of one per leaf; batched rows). Each gradient
entry is a sum of at most ``B N = 16 x 8 = 128`` products per leaf over ``K = 5`` leaves, so the
reordering error is bounded by about ``n u |g|_max`` with ``u = 6e-8`` and ``n <= 640``:
``4e-5`` of the tensor's largest entry; ``1e-4`` (relative to it) is used. Losses are means of
at most 128 terms: ``rtol = 1e-5``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax import configs
from llome_jax.lambo2 import data as lambo_data
from llome_jax.lambo2 import losses as lambo_losses
from llome_jax.lambo2 import model as M  # noqa: N812
from llome_jax.lambo2 import optimizer
from llome_jax.lambo2 import train as T  # noqa: N812
from llome_jax.run import rundir

TINY = M.ModelConfig.preset("tiny", 4, 8)
K = 2 * TINY.ensemble_size + 1
STEP = T.step_config_of(T.TrainConfig())
B1 = STEP.b1


def _toy_history(n: int = 160, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, (n, 8))
    y = (x == 0).sum(1) / 8.0
    y[:16] = -np.inf
    t = np.repeat(np.arange(4), n // 4)
    return x, y, t


@pytest.fixture(scope="module")
def batch() -> lambo_data.StepBatch:
    x, y, t = _toy_history()
    data = lambo_data.prepare_training_data(x, y, t, TINY, T.TrainConfig(batch_size=16))
    return lambo_data.epoch_batches(np.random.default_rng(0), data, TINY, 16)[0]


def _fresh() -> tuple[Any, T.OptState]:
    params = M.init_params(jax.random.key(0), TINY)
    return params, T.init_opt_state(params, STEP)


def _step(fn: Any, batch: lambo_data.StepBatch, lr: float, key: int = 1, **kw: Any) -> Any:
    params, opt = _fresh()
    return fn(
        params,
        opt,
        batch,
        jnp.float32(lr),
        jax.random.key(key),
        model_config=TINY,
        train_config=STEP,
        **kw,
    )


def _leaf_value_and_grads(enc_p, head_p, tokens, targets, valid, key, *, kind):
    """One leaf's loss and gradients (encoder, head) at the given parameters, drawing its
    corruption as ``train_step`` does: ``(t_key, m_key) = split(key)`` (eager: op by op, no
    program to compile)."""
    rates = jnp.asarray(lambo_losses.mask_rates(STEP.num_timesteps), jnp.float32)
    t_key, m_key = jax.random.split(key)
    rho = rates[jax.random.randint(t_key, (), 1, STEP.num_timesteps + 1)]
    noisy, masked = lambo_losses.corrupt(m_key, tokens, rho, TINY.mask_id, TINY.num_states)

    def loss(enc_p, head_p):
        h = M.encoder_module(TINY, enc_p)(noisy)
        if kind == "gen":
            return lambo_losses.mlm_loss(M.gen_apply(TINY, head_p, h), tokens, masked, valid)
        out = M.member_apply(TINY, head_p, h, tokens != TINY.pad_id)
        if kind == "cls":
            return lambo_losses.classification_loss(out, targets, rho, valid)
        return lambo_losses.regression_loss(out, targets, rho, STEP.nominal_label_var, valid)

    return jax.value_and_grad(loss, argnums=(0, 1))(enc_p, head_p)


def _reference(params: Any, batch: lambo_data.StepBatch, key: jax.Array) -> dict[str, Any]:
    """Leaf at a time at ``params``: losses [K], per-member head gradients, the MLM head's, and
    the encoder's summed over leaves (what the simultaneous update must apply)."""
    keys = jax.random.split(key, K)
    take = T._take
    losses, g_enc, heads = [], None, {"cls": [], "reg": []}
    leaves = [("cls", e) for e in range(TINY.ensemble_size)]
    leaves += [("reg", e) for e in range(TINY.ensemble_size)] + [("gen", None)]
    for k, (kind, e) in enumerate(leaves):
        if kind == "cls":
            args = (batch.cls_tokens[e], batch.cls_labels[e], batch.cls_valid[e])
        elif kind == "reg":
            args = (batch.reg_tokens[e], batch.reg_targets[e], batch.reg_valid[e])
        else:
            args = (batch.mlm_tokens, batch.mlm_tokens, batch.mlm_valid)
        head = params["gen"] if kind == "gen" else take(params[kind], e)
        value, (ge, gh) = _leaf_value_and_grads(
            params["encoder"], head, *map(jnp.asarray, args), keys[k], kind=kind
        )
        losses.append(float(value))
        g_enc = ge if g_enc is None else jax.tree.map(jnp.add, g_enc, ge)
        if kind == "gen":
            g_gen = gh
        else:
            heads[kind].append(gh)
    stack = {name: jax.tree.map(lambda *g: jnp.stack(g), *gs) for name, gs in heads.items()}
    return {"losses": np.array(losses), "encoder": g_enc, "gen": g_gen, **stack}


def _assert_tree_close(actual: Any, expected: Any, rel: float = 1e-4) -> None:
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        scale = max(float(np.abs(b).max()), 1e-12)
        np.testing.assert_allclose(a, b, rtol=0, atol=rel * scale)


# ------------------------------------------------------------------------------------- tests
def test_fused_step_is_one_simultaneous_adam_step_on_the_summed_loss(batch):
    params, _ = _fresh()
    ref = _reference(params, batch, jax.random.key(1))
    assert np.all(np.isfinite(ref["losses"]))
    new, opt, losses = _step(T.fused_train_step, batch, 1e-2)
    # the same draws and the losses at the step's starting parameters
    np.testing.assert_allclose(np.asarray(losses), ref["losses"], rtol=1e-5)
    # one Adam step from a fresh state: mu = (1 - b1) g, nu = (1 - b2) g^2, every count 1
    scale = functools.partial(jax.tree.map, lambda g: (1.0 - B1) * g)
    _assert_tree_close(opt.encoder.mu, scale(ref["encoder"]))  # the sum over the K leaves
    _assert_tree_close(opt.gen.mu, scale(ref["gen"]))
    _assert_tree_close(opt.cls.mu, scale(ref["cls"]))  # member e: its own leaf's gradient
    _assert_tree_close(opt.reg.mu, scale(ref["reg"]))
    assert int(opt.encoder.count) == 1 and int(opt.gen.count) == 1
    np.testing.assert_array_equal(opt.cls.count, 1)
    np.testing.assert_array_equal(opt.reg.count, 1)
    # the parameters: theta - lr * Adam(g_ref), where the reference gradient's sign is not at
    # the level of rounding (first Adam step: update = g / (|g| + eps), i.e. about sign(g))
    adam = T._adam(STEP)
    for group in ("encoder", "gen"):
        updates, _ = adam.update(ref[group], adam.init(params[group]), params[group])
        for p, u, g, q in zip(
            *map(jax.tree.leaves, (params[group], updates, ref[group], new[group])), strict=True
        ):
            g = np.asarray(g)
            clear = np.abs(g) > 1e-3 * np.abs(g).max()
            expected = np.asarray(p) - 1e-2 * np.asarray(u)
            np.testing.assert_allclose(np.asarray(q)[clear], expected[clear], rtol=0, atol=1e-6)
            assert clear.any()


def test_fused_and_per_leaf_share_draws_and_differ_only_by_the_update_order(batch):
    # lr = 0: the per-leaf step's sequential updates do not move the parameters, so both steps
    # see the same parameters for every leaf: the same losses, the same head moments
    _, opt_p, loss_p = _step(T.train_step, batch, 0.0)
    _, opt_f, loss_f = _step(T.fused_train_step, batch, 0.0)
    np.testing.assert_allclose(np.asarray(loss_f), np.asarray(loss_p), rtol=1e-5)
    for group in ("cls", "reg", "gen"):
        _assert_tree_close(getattr(opt_f, group), getattr(opt_p, group))
    # the encoder: K sequential Adam steps against one
    assert int(opt_p.encoder.count) == K and int(opt_f.encoder.count) == 1
    # lr > 0: leaf 0 sees the starting parameters in both; later leaves see the encoder after
    # the earlier leaves' steps only in the per-leaf (sequential) step
    new_p, _, loss_p = _step(T.train_step, batch, 1e-2)
    new_f, _, loss_f = _step(T.fused_train_step, batch, 1e-2)
    loss_p, loss_f = np.asarray(loss_p), np.asarray(loss_f)
    assert loss_f[0] == pytest.approx(loss_p[0], rel=1e-5)
    assert np.abs(loss_f[1:] - loss_p[1:]).max() > 1e-3
    enc_p, enc_f = (np.asarray(p["encoder"]["embedding"]) for p in (new_p, new_f))
    assert np.abs(enc_p - enc_f).max() > 1e-3  # K steps of size ~lr vs one


def test_fused_layouts_agree_and_the_batched_one_runs_the_encoder_once(batch):
    # the CPU default (unroll=None -> one encoder pass per leaf; the same compiled program as
    # fit's) and unroll=False (accelerators: one encoder pass on K B rows, vmapped heads)
    # compute the same step
    _, opt_u, loss_u = _step(T.fused_train_step, batch, 1e-2)
    _, opt_b, loss_b = _step(T.fused_train_step, batch, 1e-2, unroll=False)
    np.testing.assert_allclose(np.asarray(loss_b), np.asarray(loss_u), rtol=1e-5)
    _assert_tree_close(opt_b.encoder.mu, opt_u.encoder.mu)
    _assert_tree_close(opt_b.cls.mu, opt_u.cls.mu)
    # the programs: count the convolutions by the rows they see
    params, opt = _fresh()

    def conv_batches(fn: Any, **kw: Any) -> list[int]:
        closed = jax.make_jaxpr(functools.partial(fn, model_config=TINY, train_config=STEP, **kw))(
            params, opt, batch, jnp.float32(1e-2), jax.random.key(1)
        )
        return [(shape[0], shape[-1]) for shape in _conv_lhs_shapes(closed.jaxpr)]

    rows = 16
    one_leaf = _encoder_convs_of_one_update(params, batch)
    fused = conv_batches(T.fused_train_step, unroll=False)
    per_leaf = conv_batches(T.train_step)
    # (rows, input channels) of every convolution: the batched fused program holds the
    # encoder's convolutions once, on all K B rows, and the heads' as grouped convolutions
    # (vmapped: the 2E members in the channels); the per-leaf program all of them per leaf
    assert [b for b, _ in fused].count(K * rows) == one_leaf
    grouped = {2 * TINY.ensemble_size * c for c in (TINY.out_dim, TINY.head_dim)}
    assert {c for b, c in fused if b != K * rows} <= grouped  # members folded into channels
    assert [b for b, _ in per_leaf].count(rows) >= K * one_leaf
    assert all(b == rows and c not in grouped for b, c in per_leaf)


def _encoder_convs_of_one_update(params: Any, batch: lambo_data.StepBatch) -> int:
    def loss(p):
        return M.encoder_module(TINY, p)(batch.mlm_tokens).sum()

    return len(_conv_lhs_shapes(jax.make_jaxpr(jax.grad(loss))(params["encoder"]).jaxpr))


def _conv_lhs_shapes(jaxpr: Any) -> list[tuple[int, ...]]:
    """Input shapes of every ``conv_general_dilated`` in ``jaxpr`` and its sub-jaxprs."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "conv_general_dilated":
            shapes.append(tuple(eqn.invars[0].aval.shape))
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    shapes.extend(_conv_lhs_shapes(inner))
    return shapes


def _spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"train_step": 0, "fused_train_step": 0}
    for name in calls:
        real = getattr(T, name)

        def counting(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(T, name, counting)
    return calls


def test_fused_fit_calls_one_program_per_step_and_is_reproducible(monkeypatch):
    calls = _spy(monkeypatch)
    x, y, t = _toy_history()
    config = T.TrainConfig(epochs=2, batch_size=16, fused=True)
    data = lambo_data.prepare_training_data(x, y, t, TINY, config)
    theta0 = M.init_params(jax.random.key(0), TINY)
    params_a, hist_a = T.fit(jax.random.key(3), theta0, data, TINY, config)
    steps = config.epochs * data.steps_per_epoch(16)
    assert calls == {"train_step": 0, "fused_train_step": steps}  # one jitted call per step
    assert hist_a.shape == (2, K) and np.all(np.isfinite(hist_a))
    params_b, hist_b = T.fit(jax.random.key(3), theta0, data, TINY, config)
    params_c, _ = T.fit(jax.random.key(4), theta0, data, TINY, config)
    np.testing.assert_array_equal(hist_a, hist_b)
    for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_b), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # same key: bit-identical
    moved = [
        not np.array_equal(np.asarray(a), np.asarray(c))
        for a, c in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_c), strict=True)
    ]
    assert all(moved)  # another key: other minibatches and corruption for every group
    # the default stays the per-leaf step
    calls.update(train_step=0, fused_train_step=0)
    T.fit(jax.random.key(3), theta0, data, TINY, dataclasses.replace(config, fused=False))
    assert calls == {"train_step": steps, "fused_train_step": 0}


def test_fused_option_config_and_an_end_to_end_round(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="fused"):
        T.TrainConfig(fused=1)
    # config.json records the default; one from before the option reads as the per-leaf step
    plain = optimizer.preset("smoke").to_dict()
    assert plain["train"]["fused"] is False
    before = {**plain, "train": {k: v for k, v in plain["train"].items() if k != "fused"}}
    assert optimizer.Lambo2.upgrade_config(before)["train"] == plain["train"]
    cfg = optimizer.preset(
        "smoke", function="Ehr(4,8)-2-4-4", instance_seed=0, rounds=1, train={"fused": True}
    )
    assert cfg.to_dict()["train"]["fused"] is True
    assert configs.from_dict(optimizer.Lambo2Config, cfg.to_dict()) == cfg
    calls = _spy(monkeypatch)
    result = optimizer.run(cfg, tmp_path / "fused", progress=False)
    assert calls["train_step"] == 0 and calls["fused_train_step"] > 0
    saved = rundir.RunDirectory(result.path).config()
    assert saved["train"]["fused"] is True
    records = rundir.RunDirectory(result.path).rounds()
    assert [r["round"] for r in records] == [0, 1]
    assert np.isfinite(records[1]["train_loss"])
    assert records[1]["num_proposals"] == cfg.labels_per_round
