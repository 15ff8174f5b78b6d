"""The ``local`` executor from a user's script, and the compilation cache a sweep shares.

A script that calls ``run_sweep`` at its top level, without an ``if __name__ == "__main__":``
guard, is run as users write it: under ``multiprocessing``'s ``spawn`` every task ran the script
again and died (``the process exited with status 1``); each task is now a fresh interpreter of
its own (:mod:`llome_jax.sweep.child`). The same script runs two sweeps with ``cache="shared"``
(one directory for every task): the second sweep's new run compiles nothing the first did not,
so it adds no entry to the cache. A task whose ``OUT`` its node cannot see fails in one line.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from llome_jax.sweep import plan_from_dict
from llome_jax.sweep.tasks import Task, run_task

SCRIPT = """
import json, pathlib, sys
from llome_jax.sweep import plan_from_dict, run_sweep

out = pathlib.Path(sys.argv[1])
plan = "name: c\\nscale: smoke\\nfunctions: [f2]\\nmethods: [GA]\\nrounds: 1\\nseeds: "
cache = out / ".jax_cache" / "shared"
first = run_sweep(plan_from_dict(__import__("yaml").safe_load(plan + "[0]")), out, "local",
                  workers=1, cache="shared", report=False)
entries = sorted(p.name for p in cache.iterdir())
second = run_sweep(plan_from_dict(__import__("yaml").safe_load(plan + "[0, 1]")), out, "local",
                   workers=1, cache="shared", report=False)
print(json.dumps({"done": [list(first.done), list(second.done)], "failures": second.failures,
                  "first": entries, "second": sorted(p.name for p in cache.iterdir())}))
"""


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_and_the_shared_cache_compiles_once(
    tmp_path: pathlib.Path,
) -> None:
    script = tmp_path / "sweep_script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.pop("LLOME_JAX_COMPILATION_CACHE", None)  # the suite may turn caches off
    found = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert found.returncode == 0, found.stderr[-3000:]
    result = json.loads(found.stdout.strip().splitlines()[-1])
    assert result["done"] == [["f2/GA_seed0"], ["f2/GA_seed0", "f2/GA_seed1"]]
    assert result["failures"] == 0
    assert result["first"], "the first sweep cached nothing in OUT/.jax_cache/shared"
    assert result["second"] == result["first"]  # seed 1 read every program seed 0 compiled


def test_a_task_that_cannot_see_out_fails_in_one_line(tmp_path: pathlib.Path) -> None:
    plan = plan_from_dict(
        yaml.safe_load("name: c\nscale: smoke\nfunctions: [f2]\nmethods: [GA]\nseeds: [0]")
    )
    missing = tmp_path / "elsewhere"  # as on a node without the driver's storage
    task = Task("f2/GA_seed0", plan.spec("f2/GA_seed0"), plan.scale, str(missing))
    result = run_task(task)
    assert (result.status, result.name, result.attempt, result.pid) == (
        "failed",
        "f2/GA_seed0",
        1,
        os.getpid(),
    )
    assert result.error.startswith(f"{missing} does not exist on ")
    assert result.error.endswith(
        "a sweep's OUT must be on storage every node sees (NFS, Lustre, ...)"
    )
    assert not missing.exists()  # nothing written there
