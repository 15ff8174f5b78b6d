"""The paper-scale benchmark scripts still run against the current presets.

``benchmarks/paper_scale_aot.py`` reads the ``paper`` preset's batch sizes; when the presets became
nested it failed with a ``KeyError`` and no test noticed. Here it lowers the refinement sampler
for Pythia-70M on 2 fake CPU devices (seconds; the 2.8B model is the script's default).
``benchmarks/suite_order.py`` (why ``tests/conftest.py`` runs slow modules first) replays test
durations through pytest-xdist's scheduler: checked by hand and against xdist's own class.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_paper_scale_aot_generate_runs(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "aot.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "paper_scale_aot.py"),
            "--model",
            "70m",
            "--devices",
            "2",
            "--losses",
            "generate",
            "--new-tokens",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    # Pythia-70M: 70,426,624 float32 parameters (the HF checkpoint's count) = 0.2624 GiB, the
    # sampler's only non-negligible argument (replicated, so per device too).
    assert abs(row["argument_gib"] - 70_426_624 * 4 / 2**30) < 0.005


def _suite_order() -> Any:
    """``benchmarks/suite_order.py`` as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "suite_order", REPO / "benchmarks" / "suite_order.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_suite_order_replays_the_load_scheduler_by_hand() -> None:
    """``benchmarks/suite_order.py``'s replay against a schedule worked out by hand: 8 tests,
    2 workers, chunks of 2 (a quarter of 4, at least 2). Worker 0 holds ``a`` (10 s) and ``b``;
    worker 1 finishes ``c`` at 1 s, holds one test (< 2), so it is refilled to 2 with ``e``,
    and so on one test at a time until it has run ``c``-``h`` (1 s each) by 6 s; the pending list
    is then empty and worker 0 ends ``a``, ``b`` at 11 s. With ``a`` last (``b``-``h``, then
    ``a``): both workers take one new test per finished one, worker 1 is handed ``a`` at 2 s
    and starts it at 3 s, so the run ends at 13 s while worker 0 idles from 4 s."""
    suite_order = _suite_order()
    seconds = {"a": 10.0, **dict.fromkeys("bcdefgh", 1.0)}
    assert suite_order.replay(list("abcdefgh"), seconds) == [11.0, 6.0]
    assert suite_order.replay(list("bcdefgha"), seconds) == [4.0, 13.0]


def _xdist_finish_times(order: list[str], seconds: dict[str, float]) -> list[float]:
    """Each worker's finishing time with pytest-xdist's own ``LoadScheduling`` handing out
    ``order`` to two fake workers that run their tests one after the other."""
    import heapq

    from xdist.scheduler.load import LoadScheduling

    class Config:
        def getvalue(self, name: str) -> list[str]:
            assert name == "tx"
            return ["2*popen"]

        def getoption(self, name: str) -> None:
            assert name == "maxschedchunk"
            return None

    class Worker:
        def __init__(self, name: str) -> None:
            self.shutting_down = False
            self.gateway = type("Gateway", (), {"id": name})()

        def send_runtest_some(self, indices: list[int]) -> None:
            pass

        def shutdown(self) -> None:
            self.shutting_down = True

    sched = LoadScheduling(Config())
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        sched.add_node(worker)
        sched.add_node_collection(worker, order)
    sched.schedule()
    events = [(seconds[order[sched.node2pending[w][0]]], i) for i, w in enumerate(workers)]
    heapq.heapify(events)
    finish = [0.0, 0.0]
    while events:
        now, i = heapq.heappop(events)
        done = sched.node2pending[workers[i]][0]
        sched.mark_test_complete(workers[i], done, seconds[order[done]])
        finish[i] = now
        if sched.node2pending[workers[i]]:
            nxt = sched.node2pending[workers[i]][0]
            heapq.heappush(events, (now + seconds[order[nxt]], i))
    return finish


def test_suite_order_replay_equals_xdists_own_scheduler() -> None:
    """The replay against pytest-xdist's ``LoadScheduling`` itself, driven by two fake workers:
    300 tests with long-tailed durations (most well under 0.1 s, some minutes) in three orders."""
    import numpy as np

    suite_order = _suite_order()
    rng = np.random.default_rng(0)
    names = [f"t{i:03d}" for i in range(300)]
    seconds = dict(zip(names, rng.lognormal(-2.0, 2.5, 300).round(2).tolist(), strict=True))
    for order in (names, names[::-1], [names[i] for i in rng.permutation(300)]):
        assert suite_order.replay(order, seconds) == _xdist_finish_times(order, seconds)
