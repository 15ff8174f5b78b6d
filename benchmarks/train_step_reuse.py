"""What a LLOME run pays to get its train step: compiled once, or once per schedule and run.

An LLOME round trains ``epochs x ceil(units / batch)`` steps with a learning rate that decays
linearly to 0 at the last one, so rounds with another amount of data have another schedule
length ``T`` (a 10-round ``cpu`` run on f2 trains 242, 128, 56 and 8 steps in its rounds). With
the schedule compiled into the step (an optax transformation from ``train.make_optimizer``),
every new ``T`` compiles the step again, and so does every new run in the same process (the
paper driver's workers, a notebook, the tests). Built from the ``OptimizerConfig``
(``train.make_train_step``'s default in the LLOME loop), ``(lr, W, T)`` are run-time inputs and
the program is shared by structure. This benchmark times both, side by side in one process, for
the rounds' lengths of two runs of a preset (two models with equal graphs, other weights):

* ``compiled in``: ``make_train_step(loss, model, make_optimizer(config))`` per (run, ``T``);
* ``at run time``: ``make_train_step(loss, model, config)`` per (run, ``T``).

Each cell is the time to build the step and run its first update (compilation included); the
updates are the same up to the schedule's rounding (``x / c`` compiled in becomes
``x * (1 / c)``; see ``tests/test_train.py``).

    python benchmarks/train_step_reuse.py                  # cpu preset, SFT
    python benchmarks/train_step_reuse.py --preset smoke --loss marge

Writes ``benchmarks/results/train_step_reuse.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's llome_jax, not an installed copy

#: the SFT rounds' step counts of a 10-round ``cpu`` run on f2 (results/fair, seed 1)
LENGTHS = (242, 128, 56, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu", help="LLOME preset (default cpu)")
    parser.add_argument("--loss", default="sft", help="the rounds' loss (default sft)")
    parser.add_argument(
        "--lengths",
        default=",".join(map(str, LENGTHS)),
        help="schedule lengths T of the rounds, comma-separated",
    )
    parser.add_argument("--runs", type=int, default=2, help="runs in the process (default 2)")
    parser.add_argument("--output", default=str(RESULTS / "train_step_reuse.json"))
    args = parser.parse_args()
    lengths = [int(t) for t in args.lengths.split(",")]

    import jax
    import numpy as np

    from llome_jax.llome import finetune
    from llome_jax.llome.presets import preset
    from llome_jax.llome.runtime import Runtime
    from llome_jax.losses import LossBatch, get_loss
    from llome_jax.train import TrainBatch, init_train_state, make_optimizer, make_train_step

    cfg = preset(args.preset)
    batch_size = cfg.finetune.batch_size_for(args.loss)
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPU cores; "
        f"preset {args.preset}, loss {args.loss}, batch {batch_size}, lengths {lengths}"
    )
    rng = np.random.default_rng(0)
    records = []
    for mode in ("compiled in", "at run time"):
        for run in range(args.runs):
            rt = Runtime.build(cfg.replace(seed=run))  # same graph, other weights
            # pairs shaped as the run's: random sequences of the run's function
            x = rng.integers(0, rt.objective.num_states, (2, batch_size, rt.objective.length))
            ids, target, attention = rt.codec.encode_pairs(x[0], x[1])
            batch = TrainBatch.create(
                ids,
                target,
                attention,
                loss=LossBatch.create(reward=np.ones(batch_size, np.float32)),
            )
            hparams = finetune.loss_params(cfg, args.loss)
            for length in lengths:
                config = finetune.optimizer_config(cfg, args.loss, length)
                optimizer = make_optimizer(config) if mode == "compiled in" else config
                start = time.perf_counter()
                step = make_train_step(
                    get_loss(args.loss),
                    rt.model,
                    optimizer,
                    num_microbatches=finetune.microbatches(cfg, None, batch_size),
                    max_grad_norm=cfg.finetune.max_grad_norm,
                )
                state = init_train_state(jax.random.key(0), rt.model, optimizer)
                state, _ = step(state, batch, hparams)
                jax.block_until_ready(state)
                seconds = time.perf_counter() - start
                records.append({"mode": mode, "run": run, "length": length, "seconds": seconds})
                print(f"  {mode:11}  run {run}  T {length:4d}: {seconds:6.2f} s", flush=True)
    totals = {
        mode: sum(r["seconds"] for r in records if r["mode"] == mode)
        for mode in ("compiled in", "at run time")
    }
    print()
    for mode, total in totals.items():
        print(f"{mode:11}: {total:6.1f} s for {args.runs} runs x {len(lengths)} lengths")
    payload = {
        "benchmark": "train_step_reuse",
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "preset": args.preset,
        "loss": args.loss,
        "batch_size": batch_size,
        "lengths": lengths,
        "records": records,
        "totals": totals,
    }
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.output).write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
