"""How the test order decides when ``pytest -n 2`` ends: replay recorded test durations through
pytest-xdist's ``load`` scheduler, for pytest's alphabetical module order and for the order of
``tests/conftest.py`` (modules that hold a ``slow`` test first).

The ``load`` scheduler sends tests in collection order: each worker first gets a chunk of a
quarter of its share; a worker left with fewer than ``max(2, pending / workers / 4)`` tests is
refilled to ``max(2, pending / workers / 2)``, unless its last test took >= 0.1 s and it still
holds two (xdist 3.x ``LoadScheduling.check_schedule``). Replaying measured durations through
these rules gives each worker's finishing time under either order with the same durations,
which one run on a noisy machine cannot (worker start-up and crashes are left out). The result
of one replay is sensitive to small changes (two more tests move chunk boundaries and the end by
tens of seconds), so each log is also replayed ``--draws`` times with every test's duration
times a log-normal factor (``--noise``, default sigma 0.2), and the saving is reported as the
spread of those replays.

Record durations during a run (one line per test phase, from every worker), then replay::

    PYTHONPATH=benchmarks SUITE_ORDER_LOG=durations.tsv \\
        .venv/bin/python -m pytest -n 2 -p no:cacheprovider -p suite_order
    python benchmarks/suite_order.py durations.tsv    # -> benchmarks/results/suite_order.json

The replay collects the tests (``pytest --collect-only``, a few seconds) for the test ids and
their order within each module.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import heapq
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def pytest_runtest_logreport(report: Any) -> None:
    """Plugin part (``-p suite_order``): append ``seconds, phase, outcome, test id, worker,
    time`` for every test phase to ``$SUITE_ORDER_LOG``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    with open(os.environ.get("SUITE_ORDER_LOG", "suite_durations.tsv"), "a") as f:
        f.write(
            f"{report.duration:.2f}\t{report.when}\t{report.outcome}\t{report.nodeid}"
            f"\t{worker}\t{time.time():.1f}\n"
        )


def durations_per_test(path: pathlib.Path) -> dict[str, float]:
    """Seconds per test id (setup + call + teardown), from the controller's lines of a log
    (each phase once; a rerun test keeps its first record)."""
    seconds: dict[str, float] = collections.defaultdict(float)
    seen = set()
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        duration, phase, node = float(fields[0]), fields[1], fields[3]
        worker = fields[4] if len(fields) > 4 else "controller"
        if worker != "controller" or (node, phase) in seen:
            continue
        seen.add((node, phase))
        seconds[node] += duration
    return dict(seconds)


def replay(order: list[str], seconds: dict[str, float], workers: int = 2) -> list[float]:
    """Each worker's finishing time (s) when xdist's ``load`` scheduler hands out ``order``."""
    pending = list(range(len(order)))
    held: list[list[int]] = [[] for _ in range(workers)]

    def send(w: int, count: int) -> None:
        held[w].extend(pending[:count])
        del pending[:count]

    for w in range(workers):
        send(w, max(min(len(order) // workers // 4, len(order)), 2))
    events = [(seconds.get(order[held[w][0]], 0.0), w) for w in range(workers) if held[w]]
    heapq.heapify(events)
    finish = [0.0] * workers
    while events:
        now, w = heapq.heappop(events)
        done = held[w].pop(0)
        finish[w] = now
        if pending:
            low = max(2, len(pending) // workers // 4)
            high = max(2, len(pending) // workers // 2)
            long_test = seconds.get(order[done], 0.0) >= 0.1 and len(held[w]) >= 2
            if len(held[w]) < low and not long_test:
                send(w, high - len(held[w]))
        if held[w]:
            heapq.heappush(events, (now + seconds.get(order[held[w][0]], 0.0), w))
    return finish


def collected() -> list[str]:
    """Test ids in the order pytest collects them here: ``tests/conftest.py``'s order (modules
    holding a ``slow`` test first), so the replay measures whatever order it sets."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=pathlib.Path, help="duration logs to replay")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--noise",
        type=float,
        default=0.2,
        help="sigma of the log-normal factor on every test's duration in the noisy replays",
    )
    parser.add_argument("--draws", type=int, default=30, help="noisy replays per log")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "suite_order.json")
    args = parser.parse_args()
    slow_first = collected()
    alphabetical = sorted(slow_first, key=lambda t: t.split("::")[0])  # stable: module order
    rng = random.Random(0)

    def saved(seconds: dict[str, float]) -> float:
        """Seconds by which the slow-first order ends sooner than the alphabetical one."""
        return max(replay(alphabetical, seconds, args.workers)) - max(
            replay(slow_first, seconds, args.workers)
        )

    print(
        f"{'log':36s} {'summed':>7s} {'alphabetical':>12s} {'slow first':>10s}"
        f"  saved with noise: median (min..max)"
    )
    rows, all_saved = [], []
    for path in args.logs:
        seconds = durations_per_test(path)
        ends = [replay(order, seconds, args.workers) for order in (alphabetical, slow_first)]
        noisy = [
            saved({t: v * rng.lognormvariate(0.0, args.noise) for t, v in seconds.items()})
            for _ in range(args.draws)
        ]
        all_saved += noisy
        summed = sum(seconds.get(t, 0.0) for t in slow_first)
        print(
            f"{path.name:36s} {summed:7.0f} {max(ends[0]):12.0f} {max(ends[1]):10.0f}"
            f"  {statistics.median(noisy):5.0f} ({min(noisy):.0f}..{max(noisy):.0f})"
        )
        rows.append(
            {
                "log": path.name,
                "summed_s": summed,
                "tests_missing": sum(t not in seconds for t in slow_first),
                "workers_finish_s": {"alphabetical": ends[0], "slow_first": ends[1]},
                "saved_s_noisy": noisy,
            }
        )
    deciles = statistics.quantiles(all_saved, n=10)
    summary = {
        "median_s": statistics.median(all_saved),
        "mean_s": statistics.fmean(all_saved),
        "p10_s": deciles[0],
        "p90_s": deciles[-1],
    }
    print(
        f"all noisy replays: median {summary['median_s']:.0f} s, mean {summary['mean_s']:.0f} s,"
        f" 10th-90th percentile {summary['p10_s']:.0f} to {summary['p90_s']:.0f} s"
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    payload = {
        "benchmark": "suite_order",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "workers": args.workers,
        "tests": len(slow_first),
        "module_order": list(dict.fromkeys(t.split("::")[0] for t in slow_first)),
        "noise_sigma": args.noise,
        "draws": args.draws,
        "saved_s": summary,
        "replays": rows,
    }
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _report import write_json

    write_json(args.out, payload)


if __name__ == "__main__":
    main()
