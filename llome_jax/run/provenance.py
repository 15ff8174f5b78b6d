"""Where a run came from: package and library versions, git commit, devices, the machine and its
load, the command line.

:func:`provenance` is recorded in every run directory's ``config.json`` under ``"provenance"``,
one entry per invocation (the first run, then each ``--resume``), so a result can be traced to the
code and machine that produced it. It never affects what a run computes, and a resume does not
compare it.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
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


def _cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name: the first ``model name`` line of ``/proc/cpuinfo`` (``cpuinfo``: its
    text, for tests), else :func:`platform.processor`; ``None`` when neither says."""
    if cpuinfo is None:
        try:
            cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or None


def _cores() -> int | None:
    """CPU cores this process may run on (its affinity mask: ``taskset``, SLURM's cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _load() -> float | None:
    """The host's 1-minute load average (runnable processes), ``None`` where not available."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def provenance() -> dict[str, Any]:
    """This process's provenance: ``llome_jax`` version, ``commit`` (and ``dirty``) when the
    package runs from a git checkout (else ``None``), Python and library versions, JAX backend,
    device count and kind, the machine (``host``, ``cpu`` model, the ``cores`` this process may
    use and the host's 1-minute ``load`` average when it started: what a wall-clock reading
    must say), the command line and the UTC start time."""
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
        "host": platform.node() or None,
        "cpu": _cpu_model(),
        "cores": _cores(),
        "load": _load(),
        "command": list(sys.argv),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
