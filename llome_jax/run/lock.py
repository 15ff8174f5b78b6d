"""The run directory's lock: one process at a time runs or resumes a run directory.

``acquire_lock(directory)`` holds an exclusive, non-blocking ``flock`` on ``directory/.lock`` for
the life of the returned file. Only ``EWOULDBLOCK``/``EAGAIN`` means that another process holds
it (busy); any other error means the file system cannot lock (e.g. NFS without locking) and stops
with a message naming the lock file, so that a sweep never leaves a run to nobody.
"""

from __future__ import annotations

import errno
import pathlib
from typing import Any

#: the lock file's name inside a run directory
LOCK = ".lock"


class RunDirectoryInUseError(RuntimeError):
    """Another process holds the run directory's lock (it is running or resuming that run)."""


class RunDirectoryLockError(OSError):
    """The run directory's lock could not be taken for another reason than another holder (the
    file system refuses ``flock``: e.g. ``ENOLCK`` on an NFS mount without locking)."""


def acquire_lock(directory: pathlib.Path) -> Any:
    """An open file on ``directory/.lock`` with an exclusive, non-blocking ``flock`` on it.

    Raises:
      RunDirectoryInUseError: when another open file (another process) holds the lock
        (``EWOULDBLOCK``/``EAGAIN``, and only then: a sweep leaves such a run to its holder).
      RunDirectoryLockError: any other ``flock`` error (the file system cannot lock): it names
        the lock file and the error, so that no run is silently left to nobody.
    """
    try:
        import fcntl
    except ImportError:  # no flock on this platform: no protection, as before
        return None
    handle = open(directory / LOCK, "a")  # held open for the run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        handle.close()
        lock = directory / LOCK
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunDirectoryInUseError(
                f"{directory} is in use: another process is running or resuming this run (it "
                f"holds {lock}). Wait for it to finish or stop it, then --resume."
            ) from None
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        raise RunDirectoryLockError(
            error.errno,
            f"cannot lock {lock}: {error.strerror or error} ({code}); this file system does not "
            "support flock here (e.g. an NFS mount with nolock): put OUT on one that does",
        ) from error
    return handle
