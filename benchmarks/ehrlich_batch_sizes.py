"""Ehrlich evaluation over many batch sizes: size buckets vs one compilation per size.

After a warm-up at the sizes below, times 100 calls with sizes ``n0 .. n0 + 99`` (shuffled) and
100 calls of the largest size, for

* ``bucketed``: ``ehrlich.evaluate`` (host inputs padded to ``ehrlich.bucket_size`` rows), and
* ``per-size``: the same validation and kernel without padding (what ``evaluate`` did before
  the buckets: every new batch size compiles the kernel).

The goal: the 100 varying sizes cost at most 2x the 100 calls of the largest size.
Writes ``benchmarks/results/ehrlich_batch_sizes.json``.

    python benchmarks/ehrlich_batch_sizes.py --function f2 --start 1000
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import time

import jax
import numpy as np

from llome_jax import ehrlich
from llome_jax.ehrlich import function as F  # noqa: N812


def per_size(fn: ehrlich.Ehrlich, x: np.ndarray) -> jax.Array:
    return F._evaluate(fn, ehrlich.validate_tokens(fn, x), F.default_chunk_size(fn.config))


def _time(call, fn, x, sizes) -> float:
    t = time.perf_counter()
    for n in sizes:
        call(fn, x[:n]).block_until_ready()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--function", default="f2")
    parser.add_argument("--start", type=int, default=1000)
    parser.add_argument("--out", default="benchmarks/results/ehrlich_batch_sizes.json")
    args = parser.parse_args()

    fn = ehrlich.resolve_function(args.function)
    top = args.start + 99
    x = np.asarray(ehrlich.initial_solution(jax.random.key(0), fn, top))
    varying = np.random.default_rng(0).permutation(np.arange(args.start, top + 1)).tolist()
    rows = {}
    for name, call in (("bucketed", ehrlich.evaluate), ("per-size", per_size)):
        warm = _time(call, fn, x, [args.start, top])  # compiles the sizes' first shapes
        fixed = _time(call, fn, x, [top] * 100)
        vary = _time(call, fn, x, varying)
        rows[name] = {
            "warm_up_s": warm,
            "100_calls_fixed_size_s": fixed,
            "100_calls_varying_sizes_s": vary,
            "ratio_varying_to_fixed": vary / fixed,
        }
        print(
            f"{name:>9}: warm-up {warm:.3f} s, 100 x n={top}: {fixed:.4f} s, 100 sizes "
            f"{args.start}-{top}: {vary:.4f} s (ratio {vary / fixed:.2f})"
        )
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    result = {
        "benchmark": "ehrlich_batch_sizes",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}",
        "commit": commit,
        "function": args.function,
        "sizes": [args.start, top],
        "results": rows,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
