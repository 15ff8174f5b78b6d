"""The paper's figures at laptop scale: ``llome-jax paper`` as a script (the same flags).

    python experiments/paper.py --scale smoke --out results/paper          # every figure, minutes
    python experiments/paper.py --scale cpu --out results/paper_cpu --dry-run   # the plan and its cost
    python experiments/paper.py --out results/paper --report-only          # redraw from finished runs

The driver is the package :mod:`llome_jax.bench` (the plan, the runs, the figures, the verdicts,
the report); its docstring lists every flag's use. Run directories, output files and CSV columns
are those this script always wrote, so an existing ``OUT`` is read and resumed as before.
"""

from __future__ import annotations

import sys

from llome_jax.bench.cli import main

if __name__ == "__main__":
    from llome_jax.host.memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
