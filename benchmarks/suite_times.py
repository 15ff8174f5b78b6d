"""Where the test suite's time goes: per file, per test (with its compile share) and per fixture.

Run the suite with ``LLOME_JAX_TEST_TIMINGS=DIR/t.jsonl pytest -n 2`` (``tests/suite_timing.py``
writes one JSON line per test phase, one file per xdist worker), then

    python benchmarks/suite_times.py DIR/t.jsonl [--top 30] [--json OUT.json]

prints the summed worker time per test file, the slowest tests split into compile (tracing,
lowering and XLA's compile, from ``jax.monitoring``) and the rest, and the setup time of
fixtures (a test's setup phase is its fixtures' first use in the module or session).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import pathlib


def read(prefix: str) -> list[dict]:
    """Every line of ``prefix`` and ``prefix.<worker>``."""
    rows = []
    for path in sorted(glob.glob(prefix) + glob.glob(prefix + ".*")):
        rows += [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]
    return rows


def summarise(rows: list[dict], top: int) -> dict:
    per_test: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: {"seconds": 0.0, "compile_seconds": 0.0, "setup_seconds": 0.0, "programs": 0}
    )
    for row in rows:
        entry = per_test[row["test"]]
        entry["seconds"] += row["seconds"]
        entry["compile_seconds"] += row["compile_seconds"]
        entry["programs"] += row.get("programs", 0)
        if row["phase"] == "setup":
            entry["setup_seconds"] += row["seconds"]
    per_file: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: {"tests": 0, "seconds": 0.0, "compile_seconds": 0.0, "programs": 0}
    )
    for nodeid, entry in per_test.items():
        f = per_file[nodeid.split("::")[0]]
        f["tests"] += 1
        f["seconds"] += entry["seconds"]
        f["compile_seconds"] += entry["compile_seconds"]
        f["programs"] += entry["programs"]
    total = sum(e["seconds"] for e in per_test.values())
    compiled = sum(e["compile_seconds"] for e in per_test.values())
    programs = sum(e["programs"] for e in per_test.values())
    slowest = sorted(per_test.items(), key=lambda kv: -kv[1]["seconds"])[:top]
    return {
        "tests": len(per_test),
        "worker_seconds": round(total, 1),
        "compile_seconds": round(compiled, 1),
        "programs": programs,
        "files": {
            k: {kk: round(vv, 1) for kk, vv in v.items()}
            for k, v in sorted(per_file.items(), key=lambda kv: -kv[1]["seconds"])
        },
        "slowest": [{"test": k, **{kk: round(vv, 1) for kk, vv in v.items()}} for k, v in slowest],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timings", help="the LLOME_JAX_TEST_TIMINGS path the suite wrote")
    parser.add_argument("--top", type=int, default=30, help="how many slowest tests to list")
    parser.add_argument("--json", help="also write the summary to this JSON file")
    args = parser.parse_args(argv)
    summary = summarise(read(args.timings), args.top)
    print(
        f"{summary['tests']} tests, {summary['worker_seconds']:.0f} s of worker time, "
        f"{summary['compile_seconds']:.0f} s of it compiling ({summary['programs']} programs)"
    )
    print("\nper file (worker seconds, compile seconds, programs, tests):")
    for name, f in summary["files"].items():
        print(
            f"  {f['seconds']:7.1f} {f['compile_seconds']:7.1f} {int(f['programs']):5d}"
            f" {int(f['tests']):4d}  {name}"
        )
    print(f"\nthe {args.top} slowest tests (seconds, compile, setup):")
    for t in summary["slowest"]:
        print(
            f"  {t['seconds']:7.1f} {t['compile_seconds']:7.1f} {t['setup_seconds']:7.1f}"
            f"  {t['test']}"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
