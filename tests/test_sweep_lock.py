"""The run directory's lock on a cluster's file systems: only ``EWOULDBLOCK``/``EAGAIN`` from
``flock`` means that another process holds the run ("busy", left to that process); any other
error (``ENOLCK`` on an NFS mount without locking, ``EINVAL``, ``EBADF``, ...) stops with a clear
message naming the lock file, and a sweep's worker records it as a failure instead of leaving
the run to nobody."""

from __future__ import annotations

import errno
import fcntl
import pathlib

import pytest

from llome_jax.run import lock as run_lock
from llome_jax.run import rundir
from llome_jax.run.lock import RunDirectoryInUseError


def _failing_flock(code: int):
    def flock(handle, operation):
        raise OSError(code, f"{errno.errorcode[code]} for the test")

    return flock


@pytest.mark.parametrize("code", [errno.EWOULDBLOCK, errno.EAGAIN])
def test_only_would_block_means_busy(
    code: int, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fcntl, "flock", _failing_flock(code))
    with pytest.raises(RunDirectoryInUseError, match="in use"):
        run_lock.acquire_lock(tmp_path)


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EINVAL, errno.EBADF, errno.EIO])
def test_any_other_lock_error_stops_with_a_clear_message(
    code: int, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fcntl, "flock", _failing_flock(code))
    with pytest.raises(OSError) as caught:
        run_lock.acquire_lock(tmp_path)
    error = caught.value
    assert not isinstance(error, RunDirectoryInUseError), "not 'busy': nobody holds the run"
    text = str(error)
    assert str(tmp_path / rundir.RunDirectory.LOCK) in text  # which lock
    assert errno.errorcode[code] in text  # what the file system said
    assert "lock" in text.lower()


def test_a_sweep_worker_fails_instead_of_calling_the_run_busy(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_one`` (what every sweep task and ``llome-jax paper`` worker calls) raises the lock
    error, so it is recorded with its traceback, and writes nothing; EAGAIN stays "busy"."""
    import dataclasses

    from llome_jax.bench import execution
    from llome_jax.bench.plan import SCALES, build_plan

    scale = dataclasses.replace(SCALES["smoke"], functions=("f2",))
    (spec,) = build_plan(scale, ["GA"], ["solver"])
    run_dir = tmp_path / "runs" / spec.name
    monkeypatch.setattr(fcntl, "flock", _failing_flock(errno.EAGAIN))
    assert execution.run_one(spec, scale, run_dir, progress=False) == "busy"
    monkeypatch.setattr(fcntl, "flock", _failing_flock(errno.ENOLCK))
    with pytest.raises(OSError) as caught:
        execution.run_one(spec, scale, run_dir, progress=False)
    assert not isinstance(caught.value, RunDirectoryInUseError)
    assert not (run_dir / "config.json").exists() and not (run_dir / "done.json").exists()
