"""Output shared by the benchmark scripts (stdlib only: ``lambo2_cortex_reference.py`` runs in
another virtual environment)."""

from __future__ import annotations

import json
import pathlib
from typing import Any


def write_json(path: str | pathlib.Path, payload: Any) -> pathlib.Path:
    """Write ``payload`` as indented JSON to ``path`` (parents created) and say where."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out}")
    return out


def compiled_memory_gib(compiled: Any) -> dict[str, float]:
    """``compiled.memory_analysis()`` per device, in GiB, with the peak it implies (arguments +
    outputs - aliased + temporaries); empty where the backend reports none."""
    mem = compiled.memory_analysis()
    if mem is None:
        return {}
    gib = 2**30
    row = {
        "argument_gib": mem.argument_size_in_bytes / gib,
        "output_gib": mem.output_size_in_bytes / gib,
        "alias_gib": mem.alias_size_in_bytes / gib,
        "temp_gib": mem.temp_size_in_bytes / gib,
        "code_gib": mem.generated_code_size_in_bytes / gib,
    }
    row["peak_estimate_gib"] = (
        row["argument_gib"] + row["output_gib"] - row["alias_gib"] + row["temp_gib"]
    )
    return row
