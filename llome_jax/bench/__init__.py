"""The paper's figures at laptop scale: run every experiment (resumable) and write ``report.md``.

``llome-jax paper`` (or ``python experiments/paper.py``, the same flags) runs every experiment
behind the paper's figures and writes ``OUT/report.md`` with a PNG and a CSV per figure::

    llome-jax paper --scale smoke --out results/paper          # every figure, minutes
    llome-jax paper --scale cpu --out results/paper_cpu --dry-run   # the plan and its cost
    llome-jax paper --scale cpu --out results/paper_cpu --only solver --methods GA,LLOME-MargE
    llome-jax paper --out results/paper --report-only          # redraw from finished runs
    llome-jax paper --scale cpu --out results/paper --runs "f2/LaMBO-2_*"  # a second worker
    llome-jax paper --scale cpu --out results/paper --workers 2   # one process per core
    llome-jax paper --scale cpu --out results/paper --print-jobs > jobs.txt
        # one self-contained command per run, then the report's: for a SLURM array, Ray or GNU
        # parallel across machines (README: "Paper figures")

Every run (GA, LLOME-SFT/-MargE/-DPO/-REINFORCE, SFT_i-MargE_j pipelines, LaMBO-2, blind local
search) is a run directory ``OUT/runs/<function>/<method>_seed<k>/`` of the shared round driver
(:mod:`llome_jax.run.runner`): a finished run (``done.json``) is skipped, an interrupted one resumes
from its last checkpoint, and a run that another process holds is left to it ("busy"), so
several workers (``--runs`` picks each one's share by name) can fill one ``OUT``. The figures
are then computed from the run directories only, so ``--report-only`` redraws them and a second
invocation writes byte-identical CSVs. ``report.md`` puts the paper's claims (quoted from
``paper.tex``) beside our numbers, with one verdict per sub-claim (agree / disagree / not
comparable / inconclusive), and the label accounting of every figure's runs. Budgets are counted
in labels after round 0 (the GA seed data every method of a seed shares), so that both
accountings compare like with like: the paper's 30K is its 10K GA labels + 20K.

Scales: ``smoke`` (the LLOME and LaMBO-2 ``smoke`` presets on the paper's instances, 1 seed, a
pipeline check: its numbers say nothing about the paper) and ``cpu`` (the tuned ``cpu`` presets:
the paper's protocol, n0 = 10 GA generations of 1000, j = 2000, 10 rounds; 8 seeds on f2, 3 on
the half-quantised f2, 1 seed of LLOME/LaMBO-2 on f1, f3, f4 where a LaMBO-2 run takes ~3 h);
``paper`` (the paper's presets: Pythia-2.8B, the 128-wide LaMBO-2 CNN, 20K labels after round 0)
is for GPUs, through ``llome-jax sweep --scale paper --weights DIR`` (:mod:`llome_jax.sweep`).

Modules, by concern (each imports only what it needs; :mod:`.plan` and :mod:`.cli` load no JAX):

* :mod:`.plan` -- methods, figures, scales, :class:`~.plan.RunSpec` and :func:`~.plan.build_plan`:
  which runs the selected figures need, and their names.
* :mod:`.execution` -- each run's configuration and label budget; :func:`~.execution.run_one`
  runs, resumes or skips one run directory. :mod:`.local_search` (the blind local-search
  baseline) and :mod:`.difficulty` (the GA difficulty sweep) are the two runs that are not an
  optimizer of the library.
* :mod:`.results` -- reading run directories: curves, summaries at a label budget (through
  :func:`llome_jax.compare.curve_at`), CSV and markdown writers, the figures' ``Context``.
* :mod:`.figures` -- one function per figure (``OUT/<figure>.png``, ``.csv``, its verdicts).
* :mod:`.verdicts` -- one pure function per claim of the paper: agree / disagree / not
  comparable / inconclusive, each with its rule, test, n and p.
* :mod:`.report` -- ``report.md`` and ``curves.csv``.
* :mod:`.cli` -- the flags, the process pool (``--workers``) and the cluster jobs
  (``--print-jobs``).
"""
