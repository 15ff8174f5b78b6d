"""Train-step throughput for every loss (issue 5): steps/s and tokens/s per model size and loss,
the cost of the reference forward pass, exact gradient accumulation, and data-parallel overhead.

For each model size (``tiny``, ``small``: the Pythia presets used in tests and laptop runs;
``70m``: Pythia-70M dimensions, vocabulary 50304) and each loss in ``loss_registry.LOSSES``:

* one jitted, donating train step (``train.make_train_step``, paper optimizer, clip 1.0) on a
  batch shaped like the f2 pipeline (prompt 69 + target 65 = 134 tokens; DPO: the batch holds
  B/2 pairs, i.e. B sequences, so every row costs the same);
* ``ref fwd``: the reference model's forward pass over the same batch
  (``dataset_logprobs.compute_logprobs``), as a fraction of a step. llome_jax runs it once per round over
  the dataset; the authors' trainers recomputed it in every step. With one epoch (the paper's
  setting) the FLOPs are the same; precomputing frees the second model from device memory during
  training and amortises over epochs (the "smaller Pythia" configuration trains 5 epochs).
* ``marge (M=4)``: MargE with 4-way gradient accumulation, exact over the global batch (one extra
  forward pass per micro-batch);
* data-parallel overhead on CPU: the same step on 8 fake CPU devices (batch split over "data")
  vs. 1 device, in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``. The 8
  fake devices share the machine's cores, so this measures partitioning/collective overhead, not
  speed-up.

The model is ``llome_jax.lm.pythia.Pythia`` when that module is available, otherwise a stand-in
transformer of the same dimensions (``llome_jax.testing.TinyCausalLM``; the JSON records which).

    python benchmarks/train_step.py             # tiny, small, 70m; all losses; 8-device overhead
    python benchmarks/train_step.py --quick     # tiny only, fewer steps
    python benchmarks/train_step.py --sizes small --losses marge,dpo --steps 10

Writes ``benchmarks/results/train_step.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's llome_jax, not an installed copy

#: (vocab, hidden, layers, heads, intermediate) of the stand-in; with Pythia the preset of that name
#: fixes the dimensions and only the vocabulary (512, the Ehrlich/"smaller Pythia" size) is taken here.
SIZES = {
    "tiny": (512, 64, 6, 4, 128),
    "small": (512, 192, 6, 6, 768),
    "70m": (50304, 512, 6, 8, 2048),
}
PROMPT_LEN, TARGET_LEN = 69, 65


def build_model(size: str, model_kind: str):
    """``(model, kind)``: Pythia when available (and requested), else the stand-in."""
    from flax import nnx

    vocab, hidden, layers, heads, intermediate = SIZES[size]
    if model_kind in ("auto", "pythia"):
        try:
            from llome_jax.lm.pythia import Pythia, PythiaConfig
        except ImportError:
            if model_kind == "pythia":
                raise
        else:
            # tiny/small are from-scratch presets sized by the tokenizer; 70m keeps 50304.
            overrides = {} if size == "70m" else {"vocab_size": vocab}
            config = PythiaConfig.preset(size, **overrides)
            return Pythia(config, rngs=nnx.Rngs(0)), "pythia"
    from llome_jax.testing import TinyCausalLM, TinyLMConfig

    config = TinyLMConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=intermediate,
        max_position=PROMPT_LEN + TARGET_LEN,
    )
    return TinyCausalLM(config, rngs=nnx.Rngs(0)), "standin"


def make_batch(loss: str, batch_size: int, vocab: int, seed: int = 0):
    import numpy as np

    from llome_jax.training.loss_inputs import LossBatch
    from llome_jax.training.step import TrainBatch

    rng = np.random.default_rng(seed)
    seq_len = PROMPT_LEN + TARGET_LEN
    ids = rng.integers(1, vocab, (batch_size, seq_len)).astype(np.int32)
    target = np.zeros_like(ids)
    target[:, PROMPT_LEN:] = 1
    units = batch_size // 2 if loss == "dpo" else batch_size
    loss_batch = LossBatch.create(reward=rng.uniform(0, 1, units).astype(np.float32))
    return TrainBatch.create(ids, target, None, loss=loss_batch)


def _time_steps(step, state, batch, hparams, num_steps: int):
    import jax

    t0 = time.perf_counter()
    state, metrics = step(state, batch, hparams)
    jax.block_until_ready(metrics)
    first = time.perf_counter() - t0
    times = []
    for _ in range(num_steps):
        t0 = time.perf_counter()
        state, metrics = step(state, batch, hparams)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    times.sort()
    return state, first, times[len(times) // 2], times[0]


def measure(
    size: str,
    loss: str,
    batch_size: int,
    num_steps: int,
    model_kind: str,
    microbatches: int = 1,
    mesh=None,
) -> dict:
    import dataclasses

    import jax

    from llome_jax.host import parallel
    from llome_jax.training.dataset_logprobs import compute_logprobs
    from llome_jax.training.loss_registry import default_params, get_loss
    from llome_jax.training.optimizer import make_optimizer, paper_optimizer
    from llome_jax.training.step import init_train_state, make_train_step

    model, kind = build_model(size, model_kind)
    vocab = SIZES[size][0]
    batch = make_batch(loss, batch_size, vocab)
    tx = make_optimizer(paper_optimizer(loss, total_steps=1000))
    record = {
        "size": size,
        "loss": loss,
        "model": kind,
        "batch_size": batch_size,
        "seq_len": PROMPT_LEN + TARGET_LEN,
        "microbatches": microbatches,
        "devices": 1 if mesh is None else mesh.size,
    }
    ref_seconds = None
    if loss != "sft":
        compute_logprobs(
            model, None, batch.input_ids, batch.target_mask, batch_size=batch_size, mesh=mesh
        )  # compile
        t0 = time.perf_counter()
        reference = compute_logprobs(
            model, None, batch.input_ids, batch.target_mask, batch_size=batch_size, mesh=mesh
        )
        ref_seconds = time.perf_counter() - t0
        batch = dataclasses.replace(batch, reference=reference)
    step = make_train_step(get_loss(loss), model, tx, num_microbatches=microbatches, mesh=mesh)
    state = init_train_state(jax.random.key(0), model, tx)
    if mesh is not None:
        state, batch = parallel.replicate(state, mesh), parallel.shard_batch(batch, mesh)
    _, first, median, best = _time_steps(step, state, batch, default_params(loss), num_steps)
    tokens = batch_size * (PROMPT_LEN + TARGET_LEN)
    record |= {
        "compile_and_first_step_s": first,
        "step_s_median": median,
        "step_s_best": best,
        "steps_per_s": 1.0 / median,
        "tokens_per_s": tokens / median,
        "ref_forward_s": ref_seconds,
        "ref_forward_fraction_of_step": None if ref_seconds is None else ref_seconds / median,
    }
    return record


def sharding_worker(args: argparse.Namespace) -> None:
    """Runs in a subprocess with 8 fake CPU devices: the same step on 1 and on 8 devices."""
    from llome_jax.host import parallel

    out = []
    for size in args.sizes:
        for loss in args.sharding_losses:
            single = measure(size, loss, args.batch_size, args.steps, args.model)
            sharded = measure(
                size, loss, args.batch_size, args.steps, args.model, mesh=parallel.make_mesh(8)
            )
            out.append(
                {
                    "size": size,
                    "loss": loss,
                    "single": single,
                    "sharded": sharded,
                    "overhead": sharded["step_s_median"] / single["step_s_median"],
                }
            )
    print("JSON:" + json.dumps(out), flush=True)


def run_sharding_subprocess(args: argparse.Namespace) -> list[dict]:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "PYTHONPATH": str(REPO),
    }
    cmd = [
        sys.executable,
        __file__,
        "--sharding-worker",
        "--sizes",
        ",".join(args.sharding_sizes),
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--model",
        args.model,
        "--sharding-losses",
        ",".join(args.sharding_losses),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("JSON:"):
            return json.loads(line[5:])
    raise RuntimeError(f"sharding worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(records: list[dict], sharding: list[dict]) -> None:
    header = (
        f"{'size':6} {'loss':14} {'model':8} {'B':>3} {'steps/s':>8} {'tokens/s':>9} "
        f"{'step ms':>8} {'compile s':>9} {'ref fwd':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in records:
        name = r["loss"] + (f" (M={r['microbatches']})" if r["microbatches"] > 1 else "")
        ref = r["ref_forward_fraction_of_step"]
        print(
            f"{r['size']:6} {name:14} {r['model']:8} {r['batch_size']:>3} "
            f"{r['steps_per_s']:8.2f} {r['tokens_per_s']:9.0f} {1e3 * r['step_s_median']:8.1f} "
            f"{r['compile_and_first_step_s']:9.1f} {_fmt(ref, '8.0%') if ref else '       -'}"
        )
    if sharding:
        print("\n8 fake CPU devices vs 1 (same process, batch split over 'data'):")
        print(f"{'size':6} {'loss':8} {'1 dev ms':>9} {'8 dev ms':>9} {'overhead':>9}")
        for s in sharding:
            print(
                f"{s['size']:6} {s['loss']:8} {1e3 * s['single']['step_s_median']:9.1f} "
                f"{1e3 * s['sharded']['step_s_median']:9.1f} {s['overhead']:8.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model only, 3 timed steps")
    parser.add_argument("--sizes", default=None, help="comma list of tiny,small,70m")
    parser.add_argument("--losses", default="sft,marge,dpo,reinforce")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per cell")
    parser.add_argument("--model", choices=("auto", "pythia", "standin"), default="auto")
    parser.add_argument("--no-sharding", action="store_true", help="skip the 8-device run")
    parser.add_argument("--sharding-sizes", default=None)
    parser.add_argument("--sharding-losses", default="sft,marge")
    parser.add_argument("--sharding-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(RESULTS / "train_step.json"))
    args = parser.parse_args()
    if args.sharding_worker:
        args.sizes = args.sizes.split(",")
        args.sharding_losses = args.sharding_losses.split(",")
        sharding_worker(args)
        return
    args.sizes = (args.sizes or ("tiny" if args.quick else "tiny,small,70m")).split(",")
    unknown = set(args.sizes) - set(SIZES)
    if unknown:
        parser.error(f"unknown sizes {sorted(unknown)}; choose from {sorted(SIZES)}")
    args.losses = args.losses.split(",")
    args.steps = args.steps or (3 if args.quick else 5)
    args.sharding_sizes = (args.sharding_sizes or ("tiny" if args.quick else "tiny,small")).split(
        ","
    )
    args.sharding_losses = args.sharding_losses.split(",")

    import jax

    backend = jax.default_backend()
    print(
        f"jax {jax.__version__}, backend {backend}, {jax.device_count()} device(s), "
        f"{os.cpu_count()} CPU cores"
    )
    if backend == "cpu":
        print("No GPU in this session: CPU figures only (GPU rows would need a GPU run).")
    records = []
    for size in args.sizes:
        for loss in args.losses:
            records.append(measure(size, loss, args.batch_size, args.steps, args.model))
            print(f"  {size} {loss}: {1e3 * records[-1]['step_s_median']:.1f} ms/step", flush=True)
        if "marge" in args.losses and args.batch_size % 4 == 0:
            records.append(
                measure(size, "marge", args.batch_size, args.steps, args.model, microbatches=4)
            )
    sharding = [] if args.no_sharding else run_sharding_subprocess(args)
    print()
    print_table(records, sharding)
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "train_step",
        "jax": jax.__version__,
        "backend": backend,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpu": backend == "gpu",
        "records": records,
        "sharding": sharding,
    }
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.output).write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
