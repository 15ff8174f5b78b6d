"""The paper-scale benchmark scripts still run against the current presets.

``benchmarks/paper_scale_aot.py`` reads the ``paper`` preset's batch sizes; when the presets became
nested it failed with a ``KeyError`` and no test noticed. Here it lowers the refinement sampler
for Pythia-70M on 2 fake CPU devices (seconds; the 2.8B model is the script's default).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

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
