"""Ehrlich evaluation throughput and peak memory for the paper's f1-f4 (issue: Ehrlich core).

Each (function, batch) cell runs in a fresh subprocess: the batch (int32 ``[N, L]``, chain samples
with 2 % random substitutions, so a realistic mix of feasible and infeasible sequences) is built
on the device, the evaluator is compiled and warmed up, the process's peak-RSS counter is reset
(``/proc/self/clear_refs``), and the jitted ``evaluate`` is timed (best and median of several
calls). Peak RSS therefore covers the evaluation with its input resident, not input generation.

    python benchmarks/ehrlich_throughput.py                 # f1-f4 x 1e4, 1e5, 1e6
    python benchmarks/ehrlich_throughput.py --quick         # f2, f4 at 1e4, 1e5
    python benchmarks/ehrlich_throughput.py --devices 2     # also shard the batch over 2 CPU devices
    python benchmarks/ehrlich_throughput.py --quick --dtype uint8
        # token dtype of the batch (default int32)
    python benchmarks/ehrlich_throughput.py --quick --host --devices 2
        # also time the public call on a NumPy batch (validation, size buckets, the batch split
        # over the usable cores, results back on the host), interleaved with the jitted one
    JAX_PLATFORMS=cuda python benchmarks/ehrlich_throughput.py --functions f2,f4 --batches 1e7
        # on a GPU: the default path uses the backend's default chunk (65,536; each row reports
        # `chunk_size` and `backend`); add --chunk-sizes 512,0 to time other chunks beside it
    python benchmarks/ehrlich_throughput.py --quick --holo-python /path/to/venv/bin/python
        # also time pytorch-holo's Ehrlich on the same cells, in the same run
        # (that interpreter needs torch and pytorch-holo; see _holo_ehrlich_worker.py)

Reference (pytorch-holo 0.0.5, torch 2.13, 2 threads, batch 1e5, this machine kind): ~1.7e5 seq/s on
f2, ~1.2e4 seq/s on f4, ~12 GB for f4 at 1e5.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REFERENCE_SEQ_PER_S = {"f2": 1.7e5, "f4": 1.2e4}
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as stream:
            stream.write("5")
        return True
    except OSError:
        return False


def measure(
    function: str,
    batch: int,
    devices: int,
    repeats: int,
    dtype: str = "int32",
    host: bool = False,
    chunk_sizes: tuple[int, ...] = (),
) -> dict:
    """Runs inside the worker subprocess. With ``host``, ``ehrlich.evaluate`` called on the
    batch as a NumPy array is timed on the same batch, alternating call by call with the jitted
    kernel (so load changes hit both); with
    ``chunk_sizes``, so is the jitted kernel with each of these ``chunk_size=`` values (0 = the
    whole batch in one block), values checked bit for bit against the default."""
    import jax
    import jax.numpy as jnp

    from llome_jax import ehrlich, ga

    fn = ehrlich.paper_function(function)
    length = fn.config.dim
    pool = ehrlich.initial_solution(jax.random.key(0), fn, 4096)
    chunk = 8192 if batch >= 8192 else batch

    @jax.jit
    def make_batch(key):
        def one(k):
            k1, k2 = jax.random.split(k)
            rows = pool[jax.random.randint(k1, (chunk,), 0, pool.shape[0])]
            return ga.mutate(k2, rows, 0.02, fn.config.num_states)

        keys = jax.random.split(key, -(-batch // chunk))
        return jax.lax.map(one, keys).reshape(-1, length)[:batch]

    x = make_batch(jax.random.key(1)).astype(dtype).block_until_ready()
    evaluate = jax.jit(ehrlich.evaluate)
    if devices > 1:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = jax.make_mesh((devices,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
        local = jax.jit(
            jax.shard_map(
                lambda f, xs: ehrlich.evaluate(f, xs),
                mesh=mesh,
                in_specs=(P(), P("data")),
                out_specs=P("data"),
            )
        )
        evaluate = local
    values = evaluate(fn, x).block_until_ready()  # compile + warm up
    frac_feasible = float(jnp.mean(jnp.isfinite(values)))
    candidates = {"current": evaluate}
    if host:
        import numpy as np

        x_host = np.asarray(x)
        candidates["host"] = lambda f, _: ehrlich.evaluate(f, x_host)
        candidates["host_1"] = lambda f, _: ehrlich.evaluate(f, x_host, threads=1)
        if not bool(jnp.all(candidates["host"](fn, x).view(jnp.int32) == values.view(jnp.int32))):
            raise AssertionError("the host call and the jitted kernel disagree")
    for size in chunk_sizes:
        size = size or batch
        candidates[f"chunk_{size}"] = jax.jit(
            lambda f, xs, size=size: ehrlich.evaluate(f, xs, chunk_size=size)
        )
        other = candidates[f"chunk_{size}"](fn, x).block_until_ready()
        if not bool(jnp.all(other.view(jnp.int32) == values.view(jnp.int32))):
            raise AssertionError(f"chunk_size={size} changes the values")
    reset = _reset_peak_rss()
    timings: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, kernel in candidates.items():
            start = time.perf_counter()
            kernel(fn, x).block_until_ready()
            timings[name].append(time.perf_counter() - start)
    times = sorted(timings["current"])
    extra = {"dtype": dtype}
    if host:
        on_host = sorted(timings["host"])
        extra["host_best_seq_per_s"] = batch / on_host[0]
        extra["host_median_seq_per_s"] = batch / on_host[len(on_host) // 2]
        one = sorted(timings["host_1"])
        extra["host_1_thread_best_seq_per_s"] = batch / one[0]
        extra["host_1_thread_median_seq_per_s"] = batch / one[len(one) // 2]
        extra["usable_cores"] = len(os.sched_getaffinity(0))
    for name in timings:
        if name.startswith("chunk_"):
            extra[f"{name}_best_seq_per_s"] = batch / min(timings[name])
    return {
        **extra,
        "function": function,
        "name": fn.config.name,
        "batch": batch,
        "devices": devices,
        "best_seq_per_s": batch / times[0],
        "median_seq_per_s": batch / times[len(times) // 2],
        "peak_rss_mb": _peak_rss_mb() if reset else None,
        "input_mb": batch * length * 4 / 2**20,
        "frac_feasible": frac_feasible,
        # what evaluate() uses with no chunk_size on this backend (L1-sized on CPU, 65,536 on a
        # GPU/TPU): the "current" timings are the default path
        "chunk_size": ehrlich.default_chunk_size(fn.config),
        "backend": jax.default_backend(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--functions", default="f1,f2,f3,f4")
    parser.add_argument("--batches", default="1e4,1e5,1e6")
    parser.add_argument(
        "--devices", type=int, default=1, help="also measure sharding over this many CPU devices"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="f2 and f4 at 1e4 and 1e5 only")
    parser.add_argument("--dtype", default="int32", help="token dtype of the batch (int32, uint8)")
    parser.add_argument(
        "--host",
        action="store_true",
        help="also time ehrlich.evaluate on the batch as a NumPy array (split over the cores)",
    )
    parser.add_argument(
        "--holo-python",
        metavar="PYTHON",
        help="an interpreter with torch and pytorch-holo: time holo's Ehrlich on the same cells "
        "(batches <= 1e5) and report the speed-up measured in this run",
    )
    parser.add_argument(
        "--chunk-sizes",
        default="",
        help="also time evaluate(..., chunk_size=N) for these comma-separated N (0 = the whole "
        "batch), interleaved with the default (which depends on the backend: "
        "ehrlich.default_chunk_size; reported as chunk_size)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/ehrlich_throughput[suffix].json)",
    )
    parser.add_argument(
        "--worker", nargs=3, metavar=("FUNCTION", "BATCH", "DEVICES"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        function, batch, devices = args.worker[0], int(float(args.worker[1])), int(args.worker[2])
        sizes = tuple(int(float(c)) for c in args.chunk_sizes.split(",") if c.strip())
        row = measure(function, batch, devices, args.repeats, args.dtype, args.host, sizes)
        print(json.dumps(row))
        return
    functions = ["f2", "f4"] if args.quick else args.functions.split(",")
    batches = [1e4, 1e5] if args.quick else [float(b) for b in args.batches.split(",")]
    device_counts = sorted({1, args.devices})
    rows = []
    header = (
        f"{'function':8s} {'name':18s} {'batch':>9s} {'dev':>3s} {'best seq/s':>11s} "
        f"{'median':>11s} {'peak RSS':>9s} {('vs holo' if args.holo_python else 'vs ref'):>7s}"
    )
    print(header)
    print("-" * len(header))
    for devices in device_counts:
        for function in functions:
            for batch in batches:
                env = dict(os.environ)
                env["XLA_FLAGS"] = (
                    f"--xla_force_host_platform_device_count={devices}" if devices > 1 else ""
                )
                env.setdefault("JAX_PLATFORMS", "cpu")
                command = (
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        function,
                        str(int(batch)),
                        str(devices),
                        "--repeats",
                        str(args.repeats if batch < 1e6 else 3),
                        "--dtype",
                        args.dtype,
                    ]
                    + (["--host"] if args.host and devices == 1 else [])
                    + (["--chunk-sizes", args.chunk_sizes] if args.chunk_sizes else [])
                )
                result = subprocess.run(
                    command, capture_output=True, text=True, env=env, check=False
                )
                if result.returncode != 0:
                    print(f"{function} {batch:.0e}: failed\n{result.stderr[-2000:]}")
                    continue
                row = json.loads(result.stdout.strip().splitlines()[-1])
                reference = REFERENCE_SEQ_PER_S.get(function)
                row["speedup_vs_reference"] = (
                    row["best_seq_per_s"] / reference if reference else None
                )
                if args.holo_python and devices == 1 and batch <= 1e5:
                    holo = subprocess.run(
                        [
                            args.holo_python,
                            str(pathlib.Path(__file__).with_name("_holo_ehrlich_worker.py")),
                            function,
                            str(int(batch)),
                            "3",
                        ],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if holo.returncode == 0:
                        row["holo"] = json.loads(holo.stdout.strip().splitlines()[-1])
                        reference = row["holo"]["best_seq_per_s"]
                        row["speedup_vs_holo_same_run"] = row["best_seq_per_s"] / reference
                        row["speedup_vs_reference"] = row["speedup_vs_holo_same_run"]
                    else:
                        print(f"holo {function} {batch:.0e}: failed\n{holo.stderr[-2000:]}")
                rows.append(row)
                ratio = f"{row['speedup_vs_reference']:.0f}x" if reference else "-"
                peak = f"{row['peak_rss_mb']:.0f} MB" if row["peak_rss_mb"] else "n/a"
                print(
                    f"{function:8s} {row['name']:18s} {int(batch):>9d} {devices:>3d} "
                    f"{row['best_seq_per_s']:>11.3e} "
                    f"{row['median_seq_per_s']:>11.3e} {peak:>9s} {ratio:>7s}"
                    + f"  default chunk {row['chunk_size']} ({row['backend']})"
                    + (
                        f"  host call {row['host_best_seq_per_s']:.3e}"
                        f" (threads=1: {row['host_1_thread_best_seq_per_s']:.3e})"
                        if "host_best_seq_per_s" in row
                        else ""
                    )
                    + "".join(
                        f"  {key.removesuffix('_best_seq_per_s')} {value:.3e}"
                        for key, value in row.items()
                        if key.startswith("chunk_") and key.endswith("_best_seq_per_s")
                    ),
                    flush=True,
                )
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = ("" if args.dtype == "int32" else f"_{args.dtype}") + ("_host" if args.host else "")
    target = pathlib.Path(args.out) if args.out else RESULTS / f"ehrlich_throughput{suffix}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    import platform

    meta = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "note": (
            "CPU only; no GPU was available for this measurement."
            if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu"
            else f"JAX_PLATFORMS={os.environ['JAX_PLATFORMS']}"
        ),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=pathlib.Path(__file__).resolve().parent,
            check=False,
        ).stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
    }
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
