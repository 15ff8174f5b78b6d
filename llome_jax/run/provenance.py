"""Where a run came from: package and library versions, git commit, devices, the command line.

:func:`provenance` is recorded in every run directory's ``config.json`` under ``"provenance"``,
one entry per invocation (the first run, then each ``--resume``), so a result can be traced to the
code and machine that produced it. It never affects what a run computes, and a resume does not
compare it.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import pathlib
import platform
import subprocess
import sys
from typing import Any

import jax

import llome_jax

__all__ = ["provenance"]

_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(root: pathlib.Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """This process's provenance: ``llome_jax`` version, ``commit`` (and ``dirty``) when the
    package runs from a git checkout (else ``None``), Python and library versions, JAX backend,
    device count and kind, the command line and the UTC start time."""
    root = pathlib.Path(llome_jax.__file__).resolve().parent.parent
    commit = _git(root, "rev-parse", "HEAD") if (root / ".git").exists() else None
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    devices = jax.devices()
    return {
        "llome_jax": llome_jax.__version__,
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "python": platform.python_version(),
        **{package: _version(package) for package in _PACKAGES},
        "backend": jax.default_backend(),
        "devices": len(devices),
        "device_kind": devices[0].device_kind,
        "command": list(sys.argv),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
