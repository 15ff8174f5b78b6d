"""A run's provenance names the machine a wall-clock reading ran on (``llome_jax.run.provenance``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from llome_jax.run.provenance import _cpu_model

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme

processor\t: 1
model name\t: Another CPU
"""


def test_the_cpu_model_is_the_first_model_name_line():
    assert _cpu_model(CPUINFO) == "AMD EPYC 7B13"


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs util-linux's taskset")
def test_cores_are_the_ones_this_process_may_run_on_not_the_hosts():
    """Under ``taskset -c 0`` (as ``llome-jax paper --workers`` pins its processes) a run may
    use one core, whatever the host has."""
    code = (
        "import json; from llome_jax.run.provenance import provenance; p = provenance(); "
        "print(json.dumps({k: p[k] for k in ('cores', 'load', 'host')}))"
    )
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    ).stdout
    recorded = json.loads(out.splitlines()[-1])
    assert recorded["cores"] == 1 and isinstance(recorded["load"], float)
