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
