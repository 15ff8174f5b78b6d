"""The process the ``local`` executor starts for one task: ``python -m llome_jax.sweep.child
TASK RESULT`` runs the pickled :class:`~llome_jax.sweep.tasks.Task` in ``TASK`` with
:func:`~llome_jax.sweep.tasks.run_task` and leaves its pickled result in ``RESULT``
(atomically: written beside it, then renamed).

A fresh interpreter rather than ``multiprocessing``'s ``spawn``: ``spawn`` runs the driver's
``__main__`` script again in every child, so a script that calls ``run_sweep`` without an
``if __name__ == "__main__":`` guard failed every task. This module imports nothing of the
caller's script.
"""

from __future__ import annotations

import os
import pickle
import sys

from llome_jax.sweep.tasks import run_task

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the task pickled in ``argv[0]``, its result pickled to ``argv[1]``; 0 once written."""
    task_path, result = argv if argv is not None else sys.argv[1:3]
    with open(task_path, "rb") as stream:
        task = pickle.load(stream)
    found = run_task(task)
    partial = result + ".partial"
    with open(partial, "wb") as stream:
        pickle.dump(found, stream)
    os.replace(partial, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
