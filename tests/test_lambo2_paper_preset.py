"""The LaMBO-2 ``paper`` preset, proven to run (issue 15).

One LaMBO-2 round on the ``paper`` preset's code path with its exact hyper-parameters, end to end:
GA seed data -> initial fit ``θ0`` -> retrain from ``θ0`` -> seed selection -> design -> oracle ->
run directory. Only settings that scale the cost are reduced (``REDUCED``; paper value first):

* ``function`` ``f2`` (the shipped Ehr(32,32)-4-4-4, ``instance_seed`` None) -> ``Ehr(8,8)-2-2-2``
  sampled with ``instance_seed`` 3: every leaf update and design step costs ``∝ L`` (8 instead of
  32 positions). This instance's start sequence is not optimal (f = 0.25) and its GA archive
  holds infeasible rows and two feasible levels (0.25, 0.5), so both classifier labels occur,
  the regressor sees graded targets and the recomputed records below are not all-equal.
* ``round0_ga.num_particles`` 1000 -> 64: seed data only (10 generations kept: 640 oracle calls, 27
  distinct sequences, 22 feasible), small enough that every fit is one training step of batch
  128 per epoch (``ceil(0.8 #unique feasible / 128)``).
* ``labels_per_round`` 2000 -> 16 proposals (``alpha`` 0.25 kept: the top 4 seeds, tiled).
* ``rounds`` 10 -> 1 (one full round; every round takes the same path).
* ``model_overrides`` ``ensemble_size`` 8 -> 2 (2 + 2 members): each training step updates the
  ``2 E_ens + 1`` leaves one after another in one program, whose compile time grows with
  ``E_ens``. :func:`test_the_paper_scale_training_step_lowers` lowers (traces, without XLA's
  compile) the step of the paper's 8 + 8 members at f2's shape and checks its output shapes.
* ``train.epochs`` E 100 -> 4: the one reduction of the training schedule. Each epoch is one
  ``train_step`` (2 E_ens + 1 leaf updates of the 128/128/128 CNN), so E = 100 would add ~96
  steps over the initial fit and the round's retrain. E = 4 still runs the 2-epoch warm-up and
  the cosine decay (learning rates 2.5e-3, 5e-3, 2.5e-3, 0).

Everything else (model preset ``paper``: CNN 128/128/128, k 5, 2 blocks, head 8, gen 32; Adam
5e-3 / 0.9 / 0.99 / 1e-8, batch 128, 2 warm-up epochs, 80 % split, T = 1000,
s0^2 0.01; S = 32 design steps, M = 4 edits, K_g = 2, eta 0.05, v0.0.4, tau 1e-6, no constraints,
lambda 0; GA 10 generations; alpha 0.25; seed 0) is the preset's. The test checks it field by
field against ``preset("paper")`` and against the paper's values written out here (``PAPER``),
so a change of the preset, or of the configuration this test runs, fails it.

Runtime (pytest -n 2, 2 free cores): 17 s for the round at 2 + 2 members (11 s of it
compiling), 3 s for the 8 + 8 lowering; the round at 8 + 8 took 47 s (35 s compiling), its
training step alone 64 s to compile against 11 s at 2 + 2 (docs/benchmarks.md, "Test-suite run
times").
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax import ehrlich
from llome_jax.lambo2 import model as lambo_model
from llome_jax.lambo2 import optimizer
from llome_jax.lambo2 import seeds as lambo_seeds
from llome_jax.lambo2 import train as lambo_train
from llome_jax.lambo2.data import StepBatch
from llome_jax.run import rundir

#: The reductions, as ``preset`` overrides (dotted keys), with the paper's value beside each.
REDUCED = {
    "function": "Ehr(8,8)-2-2-2",  # paper "f2" = Ehr(32,32)-4-4-4 (the shipped instance)
    "instance_seed": 3,  # paper None (the shipped instance)
    "round0_ga.num_particles": 64,  # paper 1000
    "labels_per_round": 16,  # paper 2000
    "rounds": 1,  # paper 10
    "train.epochs": 4,  # paper 100
    "model_overrides": {"ensemble_size": 2},  # paper {} (8 + 8 members)
}

#: ``preset("paper").to_dict()`` written out (docs/design/lambo2_port.md and the paper's App.
#: "LaMBO-2 Model and Training Details"); the reduced keys are left out below.
PAPER = {
    "function": "f2",
    "instance_seed": None,
    "seed": 0,
    "rounds": 10,
    "labels_per_round": 2000,
    "alpha": 0.25,
    "round0_generations": 10,
    "round0_ga": {
        "num_particles": 1000,
        "survival_quantile": 0.1,
        "mutation_prob": 0.005,
        "recombine_prob": 0.0882,
    },
    "model_preset": "paper",
    "model_overrides": {},
    "train": {
        "epochs": 100,
        "batch_size": 128,
        "learning_rate": 5e-3,
        "b1": 0.9,
        "b2": 0.99,
        "eps": 1e-8,
        "warmup_epochs": 2,
        "train_fraction": 0.8,
        "split_seed": 0xDEADBEEF,
        "num_timesteps": 1000,
        "nominal_label_var": 0.01,
        "fused": False,
    },
    "design": {
        "num_steps": 32,
        "num_mutations": 4,
        "guidance_updates": 2,
        "guidance_step_size": 0.05,
        "exclude_initial_solution": False,
        "feature_attr_temp": 1.0,
        "version": "v0.0.4",
        "normalize_null": False,
        "tau": 1e-6,
        "use_constraints": False,
        "kl_weight": 0.0,
        "decode_temperature": 1.0,
    },
    "warm_start": False,
    # the information contract (llome_jax.oracle): each label paid once, no constraint query
    "accounting": "pay_once",
    "constraint_queries": "off",
    "keys": "shared",
}

#: The paper's CNN (ModelConfig fields other than the problem's ``num_states``/``length``).
PAPER_MODEL = {
    "embed_dim": 128,
    "channel_dim": 128,
    "out_dim": 128,
    "kernel_size": 5,
    "num_blocks": 2,
    "head_dim": 8,
    "gen_dim": 32,
    "ensemble_size": 8,
    "max_len": None,
}


def _without(config: dict, dotted_keys) -> dict:
    """``config`` (nested dict) with the dotted keys removed."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for key in dotted_keys:
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            node = node[parent]
        del node[leaf]
    return out


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in config.items():
        if isinstance(v, dict) and v and k != "model_overrides":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_paper_preset_values():
    """The preset is the paper's configuration, and the test's config differs only where reduced."""
    paper = optimizer.preset("paper")
    assert paper.to_dict() == PAPER
    cfg = optimizer.preset("paper", **REDUCED)
    flat = _flat(cfg.to_dict())
    assert {k: flat[k] for k in REDUCED} == REDUCED
    assert _without(cfg.to_dict(), REDUCED) == _without(paper.to_dict(), REDUCED)
    mc = cfg.model_config(32, 32)
    assert mc == dataclasses.replace(paper.model_config(32, 32), ensemble_size=2)
    assert {k: getattr(paper.model_config(32, 32), k) for k in PAPER_MODEL} == PAPER_MODEL


def test_the_paper_scale_training_step_lowers():
    """The paper's training step at f2's shape (32 states, L = 32; 8 + 8 members, CNN
    128/128/128, batch 128) traces and lowers (no XLA compile): ``2 E_ens + 1 = 17`` leaf
    losses, and parameters and optimizer state of the shapes they came in."""
    paper = optimizer.preset("paper")
    mc = paper.model_config(32, 32)
    assert {k: getattr(mc, k) for k in PAPER_MODEL} == PAPER_MODEL
    e, b, n = mc.ensemble_size, paper.train.batch_size, mc.padded_length
    params = jax.eval_shape(
        functools.partial(lambo_model.init_params, config=mc), jax.random.key(0)
    )
    opt_state = jax.eval_shape(
        functools.partial(lambo_train.init_opt_state, config=paper.train), params
    )
    spec = jax.ShapeDtypeStruct
    batch = StepBatch(
        cls_tokens=spec((e, b, n), jnp.int32),
        cls_labels=spec((e, b), jnp.int32),
        cls_valid=spec((e, b), jnp.bool_),
        reg_tokens=spec((e, b, n), jnp.int32),
        reg_targets=spec((e, b), jnp.float32),
        reg_valid=spec((e, b), jnp.bool_),
        mlm_tokens=spec((b, n), jnp.int32),
        mlm_valid=spec((b,), jnp.bool_),
    )
    lowered = lambo_train.train_step.lower(
        params,
        opt_state,
        batch,
        spec((), jnp.float32),
        jax.random.key(0),
        model_config=mc,
        train_config=lambo_train.step_config_of(paper.train),
    )
    out_params, out_opt_state, losses = lowered.out_info
    assert losses.shape == (17,) and losses.dtype == jnp.float32
    shapes = lambda tree: jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), tree)  # noqa: E731
    assert shapes(out_params) == shapes(params)
    assert shapes(out_opt_state) == shapes(opt_state)
    assert params["cls"] and jax.tree.leaves(params["cls"])[0].shape[0] == 8  # stacked members


@pytest.mark.slow
def test_paper_preset_one_round_end_to_end(tmp_path):
    cfg = optimizer.preset("paper", **REDUCED)
    paper = optimizer.preset("paper")
    assert _without(cfg.to_dict(), REDUCED) == _without(paper.to_dict(), REDUCED)
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    lambo = optimizer.Lambo2(cfg)
    assert {k: getattr(lambo.mc, k) for k in PAPER_MODEL} == {**PAPER_MODEL, "ensemble_size": 2}
    assert "CNN 128/128/128 k5" in lambo.describe() and "2+2 ensemble" in lambo.describe()

    # the paper's accounting (every evaluation paid), whose counts are pinned below
    cfg = cfg.replace(accounting="every_evaluation")
    result = optimizer.run(cfg, tmp_path / "run", progress=False)
    run_dir = rundir.RunDirectory(result.path)
    # config.json records the configuration that ran
    saved = run_dir.config()
    assert saved["optimizer"] == "lambo2"
    assert {k: saved[k] for k in cfg.to_dict()} == cfg.to_dict()
    for name in ("rounds.jsonl", "evaluated.csv", "regret.png", "config.json", "checkpoints"):
        assert (result.path / name).exists(), name

    rounds, x, y = run_dir.evaluated()
    n, n0 = cfg.labels_per_round, int((rounds == 0).sum())
    ga_calls = cfg.round0_generations * cfg.round0_ga.num_particles
    # the GA archive (round 0 shared by every optimizer) holds its distinct sequences: 24, 23 of
    # them feasible (integer-valued GA and exact Ehrlich levels: the same on any CPU)
    assert n0 == 24 and int(np.isfinite(y[rounds == 0]).sum()) == 23
    np.testing.assert_array_equal(np.bincount(rounds), [n0, n])
    assert x.shape == (n0 + n, fn.config.dim) and x.min() >= 0 and x.max() < fn.config.num_states
    # every label is the oracle's (the GA's rows and the proposals)
    np.testing.assert_array_equal(y, np.asarray(ehrlich.evaluate(fn, x), np.float64))
    np.testing.assert_array_equal(result.state.history.x, x)
    np.testing.assert_array_equal(result.state.history.y, y)
    np.testing.assert_array_equal(result.state.history.t, rounds)

    records = run_dir.rounds()
    assert [r["round"] for r in records] == [0, 1]
    assert set(rundir.ROUND_FIELDS) <= set(records[1])
    # oracle accounting: n0 x n_GA + r n (the GA's calls, duplicates included, then n per round)
    assert [r["num_evaluations"] for r in records] == [ga_calls, ga_calls + n]
    assert records[-1]["num_evaluations"] == optimizer.expected_oracle_calls(cfg)
    assert [r["num_generated"] for r in records] == [ga_calls, n]
    # the records recomputed from evaluated.csv (regret 1 - f, infeasible 1); the seed data has
    # infeasible rows and two feasible levels, so a record computed from other rows differs
    regret = np.where(np.isfinite(y), 1.0 - y, 1.0)
    assert len(np.unique(regret[rounds == 0])) >= 3 and regret.min() < 1.0
    for r in (0, 1):
        assert records[r]["min_regret"] == pytest.approx(regret[rounds <= r].min())
        assert records[r]["mean_regret"] == pytest.approx(regret[rounds == r].mean())
        assert records[r]["best_value"] == pytest.approx(y[rounds <= r].max())
    xr, yr = x[rounds == 1], y[rounds == 1]
    assert records[1]["frac_feasible"] == pytest.approx(np.isfinite(yr).mean())
    assert records[1]["frac_unique"] == pytest.approx(len(np.unique(xr, axis=0)) / n)
    # round 1 trained the paper's model E epochs on the seed data: one step per epoch of batch
    # 128 (fewer than 128 unique feasible rows), 2 E_ens + 1 = 5 finite leaf losses
    assert records[1]["steps_per_epoch"] == 1
    for field in ("train_loss", "train_loss_cls", "train_loss_reg", "train_loss_mlm"):
        assert np.isfinite(records[1][field]), field
    assert np.isfinite(records[0]["train_loss"])

    # the seeds: alpha n = 4 best rows of round 0, tiled to n; proposal i is designed from seed i
    before = rounds == 0
    index = lambo_seeds.select_design_seeds(x[before], y[before], rounds[before], n, cfg.alpha)
    assert records[1]["num_unique_seeds"] == len(np.unique(index)) == round(cfg.alpha * n)
    seeds = x[before][index]
    changed = (xr != seeds).sum(1)
    assert records[1]["mean_hamming"] == pytest.approx(changed.mean() / x.shape[1])
    assert changed.max() > 0  # S = 32 steps of M = 4 edits moved the population
    # K_g + 1 = 3 decode-and-accept chances per step: the acceptance rate is a fraction of them
    assert 0.0 < records[1]["acceptance_rate"] <= 1.0
    assert np.isfinite(records[1]["mean_acquisition"])
