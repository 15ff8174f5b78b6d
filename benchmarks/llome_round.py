"""One LLOME round of the ``cpu`` preset on f2, broken down by phase.

Runs round 0 (the GA seed data) and then ``--rounds`` LLOME rounds (default 2: the SFT round on the
GA data and the first MargE round, whose training set is the j = 2000 labelled sequences) and
prints, per round, the seconds spent in each phase:

* ``pairs``: PropEn pairs / triples (exact kNN) and tokenisation,
* ``train``: reference log-probs (MargE/DPO) and the optimizer steps (compilation included),
* ``generate``: iterative refinement (KV-cache sampling, parsing, next-input rule),
* ``filter``: the Filter step, ``oracle``: Ehrlich labels of the j selected sequences,

plus generated sequences per second, and writes ``benchmarks/results/llome_round.json``.
Usage: ``python benchmarks/llome_round.py [--preset cpu] [--rounds 2] [--function f2]
[--variant compact:text_format=compact] [--set KEY=VALUE]`` (variants run after the preset in the
same process, so before/after are measured side by side; ``--set`` changes the preset itself, for
before/after in separate processes, each paying its own compilation).
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import time

import jax
from _report import write_json  # benchmarks/_report.py


def run_rounds(cfg, rounds: int, progress: bool) -> tuple[float, list[dict]]:
    """GA seed data, then ``rounds`` LLOME rounds of ``cfg``: (GA seconds, per-round records)."""
    from llome_jax.llome.round import llome_round
    from llome_jax.llome.runtime import Runtime
    from llome_jax.llome.state import init_state

    t0 = time.perf_counter()
    runtime = Runtime.build(cfg)
    state = init_state(jax.random.key(cfg.seed), runtime, cfg)
    ga_seconds = time.perf_counter() - t0
    rows = []
    for _ in range(rounds):
        t = time.perf_counter()
        state, m = llome_round(state, runtime, cfg, progress=progress)
        if m["round"] is None:
            print(f"stopped: {m['stop_reason']}")
            break
        m["seconds"] = time.perf_counter() - t
        m["generated_per_second"] = m["num_generated"] / m["time_generate"]
        rows.append(m)
        if int(state.stop_code):
            print(f"stopped after round {m['round']}: {m['stop_reason']}")
            break
    return ga_seconds, rows


def print_table(name: str, cfg, ga_seconds: float, rows: list[dict]) -> None:
    phases = ("pairs", "train", "generate", "filter", "oracle")
    print(
        f"\nLLOME round timing [{name}], preset {cfg.preset}, {cfg.function}, "
        f"{jax.device_count()} {jax.devices()[0].platform} device(s); GA seed data: "
        f"{ga_seconds:.1f} s"
    )
    header = f"{'round':>5} {'loss':>6} {'pairs':>6} " + "".join(f"{p:>9}" for p in phases)
    header += f"{'total':>9} {'generated':>10} {'gen/s':>8} {'labelled':>9} {'min regret':>11}"
    print(header)
    for m in rows:
        print(
            f"{m['round']:>5} {m['loss']:>6} {m['num_pairs']:>6} "
            + "".join(f"{m['time_' + p]:>9.1f}" for p in phases)
            + f"{m['seconds']:>9.1f} {m['num_generated']:>10} {m['generated_per_second']:>8.0f}"
            + f" {m['num_selected']:>9} {m['min_regret']:>11.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--function", default="f2")
    parser.add_argument("--instance-seed", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loss", default="marge")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="also time the preset with these settings (repeatable), in the same process after "
        "the preset itself, e.g. compact:text_format=compact",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of the preset itself (repeatable), e.g. refine.share_prompts=false",
    )
    parser.add_argument(
        "--out", default=str(pathlib.Path(__file__).parent / "results" / "llome_round.json")
    )
    args = parser.parse_args()

    from llome_jax import configs
    from llome_jax.llome.config import schedule_for_loss
    from llome_jax.llome.presets import preset

    base = preset(
        args.preset,
        function=args.function,
        instance_seed=args.instance_seed,
        rounds=args.rounds,
        seed=args.seed,
        schedule=schedule_for_loss(args.loss),
    )
    if args.set:
        base = base.replace(**dict(configs.parse_assignment(s) for s in args.set))
    variants = {"preset": base}
    for text in args.variant:
        name, _, settings = text.partition(":")
        pairs = dict(configs.parse_assignment(s) for s in settings.split(",") if s.strip())
        variants[name] = base.replace(**pairs)
    results = {}
    for name, cfg in variants.items():
        ga_seconds, rows = run_rounds(cfg, args.rounds, args.progress)
        print_table(name, cfg, ga_seconds, rows)
        results[name] = {
            "config": cfg.to_dict(),
            "ga_seconds": ga_seconds,
            "rounds": [
                {k: v for k, v in m.items() if isinstance(v, int | float | str) or v is None}
                for m in rows
            ],
        }
    result = {
        "preset": args.preset,
        "function": base.function,
        "instance_seed": base.instance_seed,
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
        "variants": results,
    }
    write_json(args.out, result)


if __name__ == "__main__":
    from llome_jax.host.memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    main()
