"""Host memory: have glibc's ``malloc`` back large blocks with transparent huge pages.

Why. XLA:CPU allocates the temporaries of a compiled call afresh on every call. Blocks above
glibc's mmap threshold (at most 32 MiB) come from new anonymous mappings. The first write to each
4 KiB page of such a block is a page fault in which the kernel zeroes the page. One train step of
the LLOME ``cpu`` preset has 198 MB of temporaries, so every step took 48K page faults (measured
with ``/usr/bin/time -v``: 1.9M minor faults for 40 steps), about 140 ms of kernel time against
a ~260 ms step. The glibc tunable ``glibc.malloc.hugetlb=1`` (glibc >= 2.35) makes ``malloc``
``madvise`` its blocks for transparent huge pages. With it a step takes 2 MiB faults (14x fewer
page faults over a 31-step run) and runs ~1.25x faster on the 2-core development CPU
(docs/benchmarks.md).

A tunable is read once, when the process starts, so :func:`reexec_with_huge_pages` re-executes
the current command line with it added to ``GLIBC_TUNABLES``. The ``llome-jax`` command and the
experiment scripts call it first thing; library code never does. It is a no-op unless all of the
following hold:

* the system is Linux with glibc >= 2.35;
* transparent huge pages are in ``madvise`` mode (with ``always`` every large mapping already
  gets them; with ``never`` the tunable does nothing);
* the tunable is not set yet;
* ``LLOME_JAX_HUGE_PAGES`` is not ``0``, the opt-out, e.g. for a before/after measurement.

Results do not change: only how pages are mapped.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence

__all__ = ["OPT_OUT", "TUNABLE", "huge_pages_environment", "reexec_with_huge_pages"]

#: The glibc tunable that makes ``malloc`` ask for transparent huge pages.
TUNABLE = "glibc.malloc.hugetlb=1"
#: Environment variable that turns the re-execution off when set to ``0``.
OPT_OUT = "LLOME_JAX_HUGE_PAGES"
_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def _glibc_version() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    if name != "glibc":
        return None
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def _thp_mode() -> str | None:
    """The bracketed mode of ``/sys/kernel/mm/transparent_hugepage/enabled`` (or ``None``)."""
    try:
        with open(_THP_MODE) as file:
            text = file.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def huge_pages_environment(
    environ: Mapping[str, str],
    *,
    system: str,
    glibc: tuple[int, int] | None,
    thp_mode: str | None,
) -> dict[str, str] | None:
    """The environment to re-execute with, or ``None`` when nothing is to be done.

    Pure: the system facts are arguments (:func:`reexec_with_huge_pages` reads them). The tunable
    is appended to an existing ``GLIBC_TUNABLES`` with ``:``.
    """
    if environ.get(OPT_OUT) == "0" or system != "Linux" or thp_mode != "madvise":
        return None
    if glibc is None or glibc < (2, 35):
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" in current:
        return None
    env = dict(environ)
    env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}" if current else TUNABLE
    return env


def reexec_with_huge_pages(argv: Sequence[str] | None = None) -> None:
    """Re-execute this Python process with :data:`TUNABLE` (see the module docstring); returns
    only when nothing is to be done. ``argv`` defaults to ``sys.orig_argv`` (the interpreter's own
    command line, ``-m`` and ``-c`` included). Call it before any work: nothing survives the exec.
    """
    env = huge_pages_environment(
        os.environ, system=platform.system(), glibc=_glibc_version(), thp_mode=_thp_mode()
    )
    if env is None:
        return
    args = list(sys.orig_argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args[1:]], env)
