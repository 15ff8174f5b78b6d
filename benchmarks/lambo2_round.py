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
set against the dense FP32 rate of one 2048^3 matmul on the same device
(:func:`matmul_rate`: the share of the attainable rate each step uses), and which give a
compute-bound floor for an accelerator: ``--peak-tflops`` (default 67, an H100 SXM's
dense FP32 rate; the port trains in FP32) at ``--utilisation`` (default 0.25: batch-128 CNN steps
are small kernels). Writes ``benchmarks/results/lambo2_round.json``.
Usage: ``python benchmarks/lambo2_round.py [--preset cpu] [--epochs E] [--design-steps 32]``.

``--fused`` trains with ``train.fused = true`` (:func:`llome_jax.lambo2.train.fused_train_step`:
one Adam step on the sum of the 17 leaf losses, simultaneous instead of sequential updates;
docs/design/lambo2_port.md decision 15), so two runs, with and without it, compare a round.

``--compare-steps`` measures only the training step, per-leaf (:func:`train_step`) against fused,
side by side in one process on a synthetic batch of the preset's shapes: XLA instruction counts
of each compiled program (all computations; the entry computation; its non-trivial instructions,
a proxy for thunks / kernel launches), compile seconds, FLOPs, and ``--reps`` interleaved timed
calls after ``--warmup`` calls each (median, min, speed-up over the first variant). The fused
step's default layout is one encoder pass per leaf on CPU and one batched pass (vmapped heads)
elsewhere; on the CPU backend the batched layout is a third variant, ``fused_batched``, the
program an accelerator compiles. ``--variants`` picks some; ``--no-timing`` compiles and counts
only (the ``paper`` preset on CPU). Writes
``benchmarks/results/lambo2_fused_step.json`` (with date, commit, ``lscpu``, load average)::

    python benchmarks/lambo2_round.py --compare-steps --preset cpu --reps 8
    python benchmarks/lambo2_round.py --compare-steps --preset paper --no-timing \\
        --variants per_leaf,fused_batched --out benchmarks/results/lambo2_fused_step_paper.json
"""

from __future__ import annotations

import argparse
import collections
import datetime
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import time
from typing import Any

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


def matmul_rate(n: int = 2048, reps: int = 10) -> float:
    """FLOP/s of one ``n x n @ n x n`` FP32 matmul on the default device (``2 n^3`` FLOPs, median
    of ``reps`` calls after a warm-up): the dense rate this machine attains, against which the
    train and design steps' FLOPs are set (on 2 Zen 4 cores ~2e11)."""
    a = jnp.ones((n, n), jnp.float32)
    product = jax.jit(jnp.matmul)
    jax.block_until_ready(product(a, a))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(product(a, a))
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def _rate_note(flops: float, seconds: float, peak: float) -> str:
    """``"72 GFLOP/s, 35 % of the matmul rate"``."""
    return f"{flops / seconds / 1e9:.0f} GFLOP/s, {100 * flops / seconds / peak:.0f} % of matmul"


_TRIVIAL_OPS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:^|[\s}\]])([a-z][a-z0-9\-]*)\(")


def hlo_counts(compiled: Any) -> dict[str, Any]:
    """Instruction counts of a compiled XLA program (its optimised HLO, ``compiled.as_text()``).

    ``total``: instructions of every computation (fusion bodies, loop bodies included);
    ``entry``: the entry computation's; ``launches``: entry instructions other than
    parameter / constant / tuple / get-tuple-element / bitcast (each is one thunk of XLA:CPU's
    runtime and, on a GPU, roughly one kernel launch); ``entry_by_op``: entry counts by opcode.
    """
    total = 0
    entry: collections.Counter[str] = collections.Counter()
    computation = None
    for line in compiled.as_text().splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            computation = "ENTRY" if line.startswith("ENTRY") else line.split()[0]
            continue
        if line.startswith("}"):
            computation = None
            continue
        match = _INSTRUCTION.match(line) if computation else None
        if not match:
            continue
        total += 1
        if computation == "ENTRY":
            opcode = _OPCODE.search(match.group(1))
            entry[opcode.group(1) if opcode else "?"] += 1
    launches = sum(n for op, n in entry.items() if op not in _TRIVIAL_OPS)
    return {
        "total": total,
        "entry": sum(entry.values()),
        "launches": launches,
        "entry_by_op": dict(entry.most_common()),
    }


def _machine() -> dict[str, Any]:
    """Date, commit, ``lscpu | head`` and the load average, for the JSON record."""

    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    root = pathlib.Path(__file__).resolve().parents[1]
    commit = run("git", "-C", str(root), "rev-parse", "--short", "HEAD").strip()
    dirty = bool(run("git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"))
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit + ("+dirty" if dirty else ""),
        "lscpu": run("lscpu").splitlines()[:10],
        "loadavg": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
    }


def compare_steps(args: argparse.Namespace, cfg: Any, mc: Any) -> dict[str, Any]:
    """Per-leaf vs fused training step, side by side (``--compare-steps``; module docstring)."""
    from llome_jax.lambo2 import data as lambo_data
    from llome_jax.lambo2 import model, train

    ens, b, n = mc.ensemble_size, cfg.train.batch_size, mc.padded_length
    rng = np.random.default_rng(args.seed)

    def tokens(*shape: int) -> np.ndarray:
        return rng.integers(0, mc.num_states, (*shape, n)).astype(np.int32)

    batch = jax.device_put(
        lambo_data.StepBatch(
            cls_tokens=tokens(ens, b),
            cls_labels=rng.integers(0, 2, (ens, b)).astype(np.int32),
            cls_valid=np.ones((ens, b), bool),
            reg_tokens=tokens(ens, b),
            reg_targets=rng.standard_normal((ens, b)).astype(np.float32),
            reg_valid=np.ones((ens, b), bool),
            mlm_tokens=tokens(b),
            mlm_valid=np.ones(b, bool),
        )
    )
    step_cfg = train.step_config_of(cfg.train)
    static = {"model_config": mc, "train_config": step_cfg}
    variants: dict[str, tuple[Any, dict[str, Any]]] = {
        "per_leaf": (train.train_step, {}),
        "fused": (train.fused_train_step, {}),
    }
    if jax.default_backend() == "cpu":
        variants["fused_batched"] = (train.fused_train_step, {"unroll": False})
    if args.variants:
        chosen = args.variants.split(",")
        unknown = sorted(set(chosen) - set(variants))
        if unknown:
            raise SystemExit(f"--variants: unknown {unknown}; choose from {sorted(variants)}")
        variants = {name: variants[name] for name in chosen}
    lr = jnp.float32(1e-3)
    results: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for name, (fn, extra) in variants.items():
        params = model.init_params(jax.random.key(1), mc)
        opt = train.init_opt_state(params, step_cfg)
        t0 = time.perf_counter()
        compiled = fn.lower(params, opt, batch, lr, jax.random.key(2), **static, **extra).compile()
        seconds = time.perf_counter() - t0
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        results[name] = {
            "compile_s": seconds,
            "flops": float(cost.get("flops", float("nan"))),
            "hlo": hlo_counts(compiled),
        }
        runs[name] = [compiled, params, opt]
        print(f"{name}: compiled in {seconds:.1f} s, {results[name]['hlo']['launches']} launches")
    if not args.no_timing:
        times: dict[str, list[float]] = {name: [] for name in variants}
        for rep in range(args.warmup + args.reps):
            for name, state in runs.items():  # interleaved: the load hits every variant alike
                compiled, params, opt = state
                t0 = time.perf_counter()
                params, opt, losses = compiled(params, opt, batch, lr, jax.random.key(10 + rep))
                jax.block_until_ready(losses)
                if rep >= args.warmup:
                    times[name].append(time.perf_counter() - t0)
                state[1:] = [params, opt]
        base = statistics.median(next(iter(times.values())))
        peak = matmul_rate()
        for name, ts in times.items():
            results[name].update(
                step_ms_median=1e3 * statistics.median(ts),
                step_ms_min=1e3 * min(ts),
                step_ms_all=[1e3 * t for t in ts],
                speedup_vs_first=base / statistics.median(ts),
                flops_per_s=results[name]["flops"] / statistics.median(ts),
                frac_of_matmul_rate=results[name]["flops"] / statistics.median(ts) / peak,
            )
        print(f"dense FP32 matmul (2048^3) on this machine: {peak / 1e9:.0f} GFLOP/s")
    width = max(map(len, results))
    print(f"train step, {cfg.model_preset} CNN, batch {b}, {2 * ens + 1} leaves:")
    for name, row in results.items():
        timing = (
            f"  {row['step_ms_median']:8.1f} ms median ({row['step_ms_min']:.1f} min), "
            f"x{row['speedup_vs_first']:.2f} vs {next(iter(results))}, "
            f"{100 * row['frac_of_matmul_rate']:.0f} % of matmul"
            if "step_ms_median" in row
            else ""
        )
        hlo = row["hlo"]
        print(
            f"{name:<{width}}  HLO {hlo['total']:6d} total, {hlo['entry']:5d} entry, "
            f"{hlo['launches']:5d} launches; compile {row['compile_s']:6.1f} s{timing}"
        )
    return {
        "benchmark": "lambo2_fused_step",
        **_machine(),
        "preset": args.preset,
        "model_preset": cfg.model_preset,
        "model": {
            "embed_dim": mc.embed_dim,
            "channel_dim": mc.channel_dim,
            "out_dim": mc.out_dim,
            "kernel_size": mc.kernel_size,
            "ensemble_size": ens,
            "length": n,
            "num_states": mc.num_states,
        },
        "batch_size": b,
        "warmup": args.warmup,
        "reps": 0 if args.no_timing else args.reps,
        "matmul_flops_per_s": None if args.no_timing else peak,
        "variants": results,
    }


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
    parser.add_argument("--fused", action="store_true", help="train with train.fused = true")
    parser.add_argument(
        "--compare-steps", action="store_true", help="per-leaf vs fused train step only"
    )
    parser.add_argument("--reps", type=int, default=8, help="timed steps (--compare-steps)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (--compare-steps)")
    parser.add_argument("--no-timing", action="store_true", help="compile and count only")
    parser.add_argument(
        "--variants", default=None, help="comma list: per_leaf,fused,fused_batched (all)"
    )
    parser.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/)")
    args = parser.parse_args()
    results_dir = pathlib.Path(__file__).parent / "results"
    if args.out is None:
        name = "lambo2_fused_step.json" if args.compare_steps else "lambo2_round.json"
        args.out = str(results_dir / name)

    from llome_jax import ehrlich, ga
    from llome_jax.ga import loop as ga_loop
    from llome_jax.host.parallel import make_mesh
    from llome_jax.lambo2 import data as lambo_data
    from llome_jax.lambo2 import design, model, optimizer, train
    from llome_jax.lambo2 import seeds as lambo_seeds

    overrides: dict = {"function": args.function, "seed": args.seed}
    overrides["num_samples"] = args.num_samples
    overrides["design"] = {"num_steps": args.design_steps}
    overrides["train"] = {"fused": True} if args.fused else {}
    if args.epochs is not None:
        overrides["train"]["epochs"] = args.epochs
    if args.model_preset is not None:
        overrides["model_preset"] = args.model_preset
    cfg = optimizer.preset(args.preset, **overrides)
    fn = ehrlich.resolve_function(cfg.function)
    mc = cfg.model_config(fn.config.num_states, fn.config.dim)
    if args.compare_steps:
        write_json(args.out, compare_steps(args, cfg, mc))
        return
    mesh = make_mesh(args.devices) if args.devices else None
    rows: list[tuple[str, float, str]] = []

    archive, t_ga = _timed(
        lambda: ga_loop.run_archive(
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
        lambda: lambo_data.prepare_training_data(history.x, history.y, history.t, mc, cfg.train)
    )
    steps = data.steps_per_epoch(cfg.train.batch_size)
    rows.append(("prepare task tables", t_prep, f"{steps} steps/epoch"))

    params = model.init_params(jax.random.key(1), mc)
    n_params = model.num_parameters(params)
    step_cfg = train.step_config_of(cfg.train)
    opt = train.init_opt_state(params, step_cfg)
    batches = lambo_data.epoch_batches(np.random.default_rng(0), data, mc, cfg.train.batch_size)
    batch = jax.device_put(batches[0])
    step_fn = train.fused_train_step if cfg.train.fused else train.train_step

    def one_step(p, o, k):
        return step_fn(p, o, batch, jnp.float32(1e-3), k, model_config=mc, train_config=step_cfg)

    train_flops = _flops(
        step_fn.lower(
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
            f"train step ({leaves} leaves, {'fused' if cfg.train.fused else 'per-leaf'})",
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
        idx = lambo_seeds.select_design_seeds(
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
    peak = matmul_rate()
    t_fit_step = t_fit / (steps * cfg.train.epochs)
    rows.append(("dense FP32 matmul 2048^3", 2 * 2048**3 / peak, f"{peak / 1e9:.0f} GFLOP/s"))
    rows.append(("train step inside fit", t_fit_step, _rate_note(train_flops, t_fit_step, peak)))
    rows.append(("design step", t_design / s, _rate_note(design_flops, t_design / s, peak)))

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
        "fused": cfg.train.fused,
        "design_steps": s,
        "num_samples": cfg.num_samples,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "devices": [str(d) for d in jax.devices()],
        "phases": [{"phase": n, "seconds": t, "note": note} for n, t, note in rows],
        "frac_feasible": float(feasible.mean()),
        "train_step_flops": train_flops,
        "design_step_flops": design_flops,
        "matmul_flops_per_s": peak,
        "accelerator": {"peak_tflops": args.peak_tflops, "utilisation": args.utilisation},
    }
    write_json(args.out, result)


if __name__ == "__main__":
    from llome_jax.host.memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    main()
