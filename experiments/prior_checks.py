"""Issue 65's two checks of the shipped prior on instances of f2's configuration that are not f2:
the fine-tuning learning rate of ``cpu-pretrained`` tuned on training instances (3 and 4), and
the prior against the GA on instances never seen (101 and 102). Reads run directories, writes a
CSV of every run's min regret at 20,000 labels after round 0 and prints per-arm medians and the
exact permutation tests.

    python experiments/prior_checks.py tuning /work/runs/tune65 docs/pretraining/tuning.csv
    python experiments/prior_checks.py unseen /work/runs/unseen65 docs/pretraining/unseen.csv
"""

from __future__ import annotations

import csv
import json
import pathlib
import re
import sys

import numpy as np

from llome_jax import stats

PATTERNS = {
    "tuning": re.compile(r"^lr(?P<arm>[0-9.]+)_i(?P<instance>\d+)_s(?P<seed>\d+)$"),
    "unseen": re.compile(r"^(?P<arm>ga|prior)_i(?P<instance>\d+)_s(?P<seed>\d+)$"),
}


#: labels after round 0 every run pays (``--budget 20000``), unless it stops at the optimum
BUDGET = 20_000


def final(run: pathlib.Path) -> tuple[int, float] | None:
    """``(labels paid after round 0, min regret)`` of the run's last record; ``None`` while it
    runs (below the budget and not stopped)."""
    try:
        lines = (run / "rounds.jsonl").read_text().splitlines()
    except OSError:
        return None
    records = [json.loads(line) for line in lines]
    first, last = records[0], records[-1]
    labels = int(last["num_evaluations"]) - int(first["num_evaluations"])
    if labels < BUDGET and not last.get("stop_reason") and float(last["min_regret"]) > 0:
        return None
    return labels, float(last["min_regret"])


def main(kind: str, runs: str, out: str) -> int:
    rows = []
    for run in sorted(pathlib.Path(runs).iterdir()):
        found = PATTERNS[kind].match(run.name)
        ended = final(run) if found and run.is_dir() else None
        if found is None or ended is None:
            continue
        labels, regret = ended
        rows.append({**found.groupdict(), "labels_after_round_0": labels, "min_regret": regret})
    with open(out, "w", newline="") as stream:
        writer = csv.DictWriter(
            stream, ["arm", "instance", "seed", "labels_after_round_0", "min_regret"]
        )
        writer.writeheader()
        writer.writerows(rows)
    arms: dict[str, list[dict]] = {}
    for row in rows:
        arms.setdefault(row["arm"], []).append(row)
    key = lambda row: (row["instance"], row["seed"])  # noqa: E731
    base = "0.003" if kind == "tuning" else "ga"  # the preset's learning rate; the GA
    reference = sorted(arms.get(base, []), key=key)
    for arm, members in sorted(arms.items()):
        members = sorted(members, key=key)
        values = [m["min_regret"] for m in members]
        lo, hi = stats.bootstrap_interval(values)
        line = f"{arm}: n = {len(values)}, median {np.median(values):.3f} ({lo:.3f}-{hi:.3f})"
        if arm != base and [key(m) for m in members] == [key(m) for m in reference]:
            diffs = [m["min_regret"] - r["min_regret"] for m, r in zip(members, reference)]
            p = stats.permutation_test(values, [r["min_regret"] for r in reference])
            shown = ", ".join(f"{d:+.3f}" for d in diffs)
            line += f"; paired differences {shown}; p (exact, two-sided) = {p:.3g}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:4]))
