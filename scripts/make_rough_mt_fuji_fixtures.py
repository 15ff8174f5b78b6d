"""Golden Rough Mt. Fuji data from pytorch-holo 0.0.5 (run with a venv that has holo and torch).

    python3 -m venv /tmp/holo-venv
    /tmp/holo-venv/bin/pip install pytorch-holo==0.0.5 torch numpy
    /tmp/holo-venv/bin/python scripts/make_rough_mt_fuji_fixtures.py

Writes two files (run from the repository root):

* ``llome_jax/rough_mt_fuji/data/holo_instances.json``: the instances the package ships (holo's
  centroid and random term, drawn from ``torch.Generator().manual_seed(random_seed)``), with
  holo's optimum, its value and holo-bench's start sequence. The reference is the authors'
  ``test_function/rough_mt_fuji.yaml``: ``dim=256, additive_term=0.25, random_term_std=1.0,
  negate=True, random_seed=0``.
* ``tests/fixtures/rough_mt_fuji_holo.json``: those instances and a few more (``dim < 8``, a
  non-dyadic additive term, ``dim = 520``), each with test sequences and holo's values: float32
  ``evaluate_true`` of the int64 sequences and float32 ``forward`` (``negate=True``, noise-free)
  of the same sequences as floats, written as exact decimals of the float32 values.

holo-bench's start sequence (``scripts/benchmark_optimizer.py``): ``torch.manual_seed(random_seed)``
and then ``test_function.initial_solution()``, which draws ``torch.randint(2, (1, dim))`` from
torch's *global* generator (holo's ``random_solution`` does not use the instance's generator).
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch
from holo.test_functions.closed_form import RoughMtFuji

PACKAGE = pathlib.Path("llome_jax/rough_mt_fuji/data/holo_instances.json")
FIXTURE = pathlib.Path("tests/fixtures/rough_mt_fuji_holo.json")

#: (dim, additive_term, random_term_std, random_seed, number of random test sequences)
SHIPPED = [(256, 0.25, 1.0, 0, 24)]
EXTRA = [(2, 0.25, 1.0, 0, 4), (7, 0.25, 1.0, 3, 12), (33, 0.1, 0.7, 1, 16), (520, 0.25, 1.0, 5, 4)]


def bits(x: torch.Tensor) -> str:
    return "".join(str(int(b)) for b in x.reshape(-1).tolist())


def floats(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.reshape(-1).to(torch.float32).numpy()]


def instance(dim: int, a: float, std: float, seed: int) -> tuple[RoughMtFuji, dict]:
    torch.manual_seed(seed)  # holo-bench's script: the global seed, then the test function
    fn = RoughMtFuji(dim=dim, additive_term=a, random_term_std=std, negate=True, random_seed=seed)
    start = fn.initial_solution()
    record = {
        "dim": dim,
        "additive_term": a,
        "random_term_std": std,
        "random_seed": seed,
        "centroid": bits(fn.centroids),
        "random_term": floats(fn._random_term),
        "optimal_solution": bits(fn.optimal_solution()),
        "optimal_value": float(fn._optimal_value.to(torch.float32)),
        "initial_solution": bits(start),
        "source": f"pytorch-holo 0.0.5 (torch {torch.__version__}), random_seed={seed}",
    }
    return fn, record


def cases(fn: RoughMtFuji, record: dict, count: int, rng: np.random.Generator) -> list[str]:
    dim = record["dim"]
    optimum = np.array([int(c) for c in record["optimal_solution"]])
    rows = [np.zeros(dim, int), np.ones(dim, int), optimum]
    rows.append(np.array([int(c) for c in record["centroid"]]))
    rows.append(np.array([int(c) for c in record["initial_solution"]]))
    for flips in (1, 2, 5):
        row = optimum.copy()
        where = rng.choice(dim, size=min(flips, dim), replace=False)
        row[where] = 1 - row[where]
        rows.append(row)
    rows += list(rng.integers(0, 2, (count, dim)))
    return ["".join(map(str, row)) for row in rows]


def main() -> None:
    if torch.__version__ < "2":
        sys.exit("needs torch >= 2")
    rng = np.random.default_rng(20250)
    shipped, fixtures = {}, []
    for dim, a, std, seed, count in SHIPPED + EXTRA:
        fn, record = instance(dim, a, std, seed)
        sequences = cases(fn, record, count, rng)
        x = torch.tensor([[int(c) for c in s] for s in sequences], dtype=torch.int64)
        true = fn.evaluate_true(x)
        forward = fn.forward(x.float(), noise=False)
        assert true.dtype == torch.float32 and forward.dtype == torch.float32
        fixtures.append(
            {
                **record,
                "sequences": sequences,
                "evaluate_true": floats(true),
                "forward_negated": floats(forward),
            }
        )
        if (dim, a, std, seed, count) in SHIPPED:
            shipped[f"RMF({dim})"] = record
    PACKAGE.parent.mkdir(parents=True, exist_ok=True)
    PACKAGE.write_text(json.dumps(shipped, indent=0) + "\n")
    meta = {
        "about": "pytorch-holo 0.0.5 RoughMtFuji values (scripts/make_rough_mt_fuji_fixtures.py)",
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "instances": fixtures,
    }
    FIXTURE.write_text(json.dumps(meta, separators=(",", ":")) + "\n")
    print(f"wrote {PACKAGE} ({len(shipped)} instance) and {FIXTURE} ({len(fixtures)} instances)")


if __name__ == "__main__":
    main()
