"""Small file primitives shared by the run directory, its integrity checks and pretraining.

* :func:`atomic_write_text`: a file replaced whole or not at all (temporary file + rename), so a
  crash never leaves half a ``config.json``;
* :func:`read_config`: a JSON object file (a run's ``config.json``) with an error that names the
  file when it is missing, unreadable or not an object.

They import nothing from ``llome_jax``, so every module may use them (``rundir`` and
``run_integrity`` both do, without importing each other).
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
from typing import Any

__all__ = ["atomic_write_text", "read_config"]


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename), with the permissions of
    an ordinary new file (``0o666`` less the umask; ``tempfile.mkstemp``'s ``0o600`` would
    make ``config.json`` unreadable to the rest of a group)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}"
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
    try:
        with os.fdopen(handle, "w", newline="") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """A run's ``config.json`` (or any JSON object file) as a dict.

    Raises:
      FileNotFoundError: no such file. ValueError: unreadable, not JSON, or not a JSON object;
        the message names the file.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path} is not readable JSON ({error}); restore it or start a new run"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not a run configuration")
    return data
