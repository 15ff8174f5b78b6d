"""One LaMBO-2 round (training + S design steps on n sequences) on f2, broken down by phase.

Seed data: the GA archive of the preset (10 generations of 1000 on f2, ~1000 distinct sequences),
i.e. the data of round 1. Phases (seconds; compilation measured separately on the first call):

* ``prepare``: task tables, train split, sampler setup,
* ``train_step``: one training step (2 E_ens + 1 = 17 leaf updates of batch 128) and its rate,
* ``fit``: E epochs on the round-1 data (``ceil(0.8 U / 128)`` steps per epoch),
* ``seeds``: seed selection + per-member incumbents,
* ``design``: S design steps on the n-sequence population (``design_round``'s default: a Python
  loop over one jitted design step; the ensemble members unrolled on CPU, docs/design/lambo2_port.md),
* ``oracle``: Ehrlich labels of the n proposals,

plus the extrapolated cost of a round-10 fit (history of ``10K/1K + 10 n`` sequences: steps per
epoch grow with the unique feasible count) and of 10 rounds, and the FLOPs of one train step and
one design step from XLA's cost analysis of the compiled programs (``compiled.cost_analysis()``),
which give a compute-bound floor for an accelerator: ``--peak-tflops`` (default 67, an H100 SXM's
dense FP32 rate; the port trains in FP32) at ``--utilisation`` (default 0.25: batch-128 CNN steps
are small kernels). Writes ``benchmarks/results/lambo2_round.json``.
Usage: ``python benchmarks/lambo2_round.py [--preset cpu] [--epochs E] [--design-steps 32]``.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from _report import write_json  # benchmarks/_report.py


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def _flops(lowered) -> float:
    """FLOPs of one call of a lowered program, from XLA's cost analysis of its compiled form."""
    cost = lowered.compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", float("nan")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", help="optimizer preset (model sizes, E, S)")
    parser.add_argument("--model-preset", default=None, help="override the CNN size preset")
    parser.add_argument("--function", default="f2")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--design-steps", type=int, default=32)
    parser.add_argument("--num-samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=None, help="shard the design population")
    parser.add_argument("--peak-tflops", type=float, default=67.0, help="accelerator FP32 peak")
    parser.add_argument("--utilisation", type=float, default=0.25, help="fraction of the peak")
    parser.add_argument(
        "--out", default=str(pathlib.Path(__file__).parent / "results" / "lambo2_round.json")
    )
    args = parser.parse_args()

    from llome_jax import ehrlich, ga
    from llome_jax.lambo2 import design, model, optimizer, train
    from llome_jax.parallel import make_mesh

    overrides: dict = {"function": args.function, "seed": args.seed}
    overrides["num_samples"] = args.num_samples
    overrides["design"] = {"num_steps": args.design_steps}
    if args.epochs is not None:
        overrides["train"] = {"epochs": args.epochs}
    if args.model_preset is not None:
        overrides["model_preset"] = args.model_preset
    cfg = optimizer.preset(args.preset, **overrides)
    fn = ehrlich.resolve_function(cfg.function)
    mc = cfg.model_config(fn.config.num_states, fn.config.dim)
    mesh = make_mesh(args.devices) if args.devices else None
    rows: list[tuple[str, float, str]] = []

    archive, t_ga = _timed(
        lambda: ga.run_archive(
            jax.random.key(args.seed),
            fn,
            ehrlich.resolve_initial_solution(cfg.function),
            cfg.ga_generations,
            ga.GAConfig(num_particles=cfg.ga_particles),
        )
    )
    x, y, _ = archive.to_numpy()
    history = optimizer.History(x.astype(np.int32), y.astype(np.float64), np.zeros(len(y), int))
    rows.append(("GA seed data (incl. compile)", t_ga, f"{len(y)} distinct sequences"))

    data, t_prep = _timed(
        lambda: train.prepare_training_data(history.x, history.y, history.t, mc, cfg.train)
    )
    steps = data.steps_per_epoch(cfg.train.batch_size)
    rows.append(("prepare task tables", t_prep, f"{steps} steps/epoch"))

    params = model.init_params(jax.random.key(1), mc)
    n_params = model.num_parameters(params)
    step_cfg = train.step_config_of(cfg.train)
    opt = train.init_opt_state(params, step_cfg)
    batches = train.epoch_batches(np.random.default_rng(0), data, mc, cfg.train.batch_size)
    batch = jax.device_put(batches[0])

    def one_step(p, o, k):
        return train.train_step(
            p, o, batch, jnp.float32(1e-3), k, model_config=mc, train_config=step_cfg
        )

    train_flops = _flops(
        train.train_step.lower(
            params,
            opt,
            batch,
            jnp.float32(1e-3),
            jax.random.key(2),
            model_config=mc,
            train_config=step_cfg,
        )
    )
    (params, opt, _), t_compile = _timed(lambda: one_step(params, opt, jax.random.key(2)))
    rows.append(("train step: compile + 1st", t_compile, ""))
    reps = 5
    t0 = time.perf_counter()
    for i in range(reps):
        params, opt, losses = one_step(params, opt, jax.random.key(3 + i))
    jax.block_until_ready(losses)
    t_step = (time.perf_counter() - t0) / reps
    leaves = 2 * mc.ensemble_size + 1
    rows.append(
        (
            "train step (17 leaf updates)",
            t_step,
            f"{leaves * cfg.train.batch_size / t_step:,.0f} seq-updates/s",
        )
    )

    theta, t_fit = _timed(
        lambda: train.fit(
            jax.random.key(4), model.init_params(jax.random.key(1), mc), data, mc, cfg.train
        )[0]
    )
    rows.append((f"fit: {cfg.train.epochs} epochs x {steps} steps", t_fit, "round 1 data"))

    stats = design.RegressorStats(jnp.float32(data.y_mean), jnp.float32(data.y_std))

    def seeds_fn():
        idx = design.select_design_seeds(
            history.x, history.y, history.t, cfg.num_samples, cfg.alpha
        )
        seeds = history.x[idx]
        return seeds, design.best_values(mc, theta, stats, seeds)

    (seeds, best), t_seeds = _timed(seeds_fn)
    rows.append(("seed selection + incumbents", t_seeds, f"alpha {cfg.alpha}"))

    def design_fn(key):
        return design.design_round(key, theta, stats, best, seeds, mc, cfg.design, mesh=mesh)

    static = {"model_config": mc, "design_config": cfg.design}
    x0, a0, *score0 = design._design_start(theta, stats, best, jnp.asarray(seeds), **static)
    carry0 = (x0, a0, jax.random.key(5), *score0)
    design_flops = _flops(
        design._design_step.lower(carry0, jnp.int32(0), theta, stats, best, **static)
    )
    _, t_dcompile = _timed(lambda: design_fn(jax.random.key(5)))
    rows.append(("design: compile + 1st run", t_dcompile, ""))
    (proposals, acq, _trace), t_design = _timed(lambda: design_fn(jax.random.key(6)))
    s = cfg.design.num_steps
    rows.append(
        (
            f"design: {s} steps x {cfg.num_samples} seqs",
            t_design,
            f"{t_design / s * 1e3:.0f} ms/step",
        )
    )
    values, t_oracle = _timed(lambda: ehrlich.evaluate(fn, proposals))
    rows.append(("oracle", t_oracle, f"{cfg.num_samples} evaluations"))

    # a round-10 fit: unique feasible grows by ~n per round (frac_feasible ~ 0.5..1)
    steps10 = math.ceil(0.8 * (len(data.mlm_tokens) / 0.8 + 10 * cfg.num_samples) / 128)
    t_fit10 = t_step * steps10 * cfg.train.epochs
    rows.append(
        ("fit at round 10 (extrapolated)", t_fit10, f"<= {steps10} steps/epoch, all feasible")
    )
    round1 = t_prep + t_fit + t_seeds + t_design + t_oracle
    rows.append(("round 1 total (compiled)", round1, ""))
    # 10 rounds: the fit grows linearly from round 1's steps to round 10's; design is constant
    fit_steps = [steps + (steps10 - steps) * r / 9 for r in range(10)]
    rows.append(
        (
            "10 rounds (extrapolated)",
            sum(t_step * n * cfg.train.epochs for n in fit_steps) + 10 * (t_design + t_seeds),
            "",
        )
    )
    rate = args.peak_tflops * 1e12 * args.utilisation
    flops10 = sum(n * cfg.train.epochs for n in fit_steps) * train_flops + 10 * s * design_flops
    rows.append(
        (
            "10 rounds on an accelerator (FLOP floor)",
            flops10 / rate,
            f"{flops10:.3g} FLOPs at {args.peak_tflops:g} TFLOP/s x {args.utilisation:g}",
        )
    )

    width = max(len(r[0]) for r in rows)
    print(
        f"LaMBO-2 round on {cfg.function} ({fn.config.name}); model {cfg.model_preset} "
        f"{n_params:,} params; E {cfg.train.epochs}, S {s}, n {cfg.num_samples}; "
        f"{jax.devices()[0].platform} x{len(jax.devices())}"
    )
    for name, seconds, note in rows:
        print(f"{name:<{width}}  {seconds:9.2f} s  {note}")
    feasible = np.isfinite(np.asarray(values))
    print(
        f"proposals: feasible {feasible.mean():.2f}, unique "
        f"{len(np.unique(np.asarray(proposals), axis=0)) / len(feasible):.2f}, best "
        f"{float(np.max(np.asarray(values))):.4f}, mean acquisition {float(acq.mean()):.2f}"
    )
    result = {
        "function": cfg.function,
        "preset": args.preset,
        "model_preset": cfg.model_preset,
        "num_parameters": n_params,
        "epochs": cfg.train.epochs,
        "design_steps": s,
        "num_samples": cfg.num_samples,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "devices": [str(d) for d in jax.devices()],
        "phases": [{"phase": n, "seconds": t, "note": note} for n, t, note in rows],
        "frac_feasible": float(feasible.mean()),
        "train_step_flops": train_flops,
        "design_step_flops": design_flops,
        "accelerator": {"peak_tflops": args.peak_tflops, "utilisation": args.utilisation},
    }
    write_json(args.out, result)


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    main()
