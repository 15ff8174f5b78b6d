"""pytorch-holo's Ehrlich throughput, run by ``ehrlich_throughput.py --holo-python PYTHON``.

Runs under an interpreter that has ``torch`` and ``pytorch-holo`` (import ``holo``) but not
``llome_jax``; prints one JSON line. The batch mirrors the JAX worker's: the function's own
initial solution with 2 % random substitutions, so feasible and infeasible rows mix.

    python _holo_ehrlich_worker.py FUNCTION BATCH REPEATS
"""

from __future__ import annotations

import json
import sys
import time

import torch
from holo.test_functions.closed_form import Ehrlich

# The paper's configurations (num_states, dim, num_motifs, motif_length, quantization).
CONFIGS = {
    "f1": (8, 128, 8, 8, 8),
    "f2": (32, 32, 4, 4, 4),
    "f3": (32, 128, 4, 4, 4),
    "f4": (32, 128, 8, 8, 8),
}


def main() -> None:
    function, batch, repeats = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3])
    torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else torch.get_num_threads())
    v, dim, c, k, q = CONFIGS[function]
    fn = Ehrlich(num_states=v, dim=dim, num_motifs=c, motif_length=k, quantization=q)
    generator = torch.Generator().manual_seed(1)
    x = fn.initial_solution().reshape(1, -1).expand(batch, -1).clone()
    flip = torch.rand(x.shape, generator=generator) < 0.02
    x[flip] = torch.randint(0, v, (int(flip.sum()),), generator=generator)
    with torch.no_grad():
        values = fn(x)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    times.sort()
    print(
        json.dumps(
            {
                "function": function,
                "batch": batch,
                "threads": torch.get_num_threads(),
                "best_seq_per_s": batch / times[0],
                "median_seq_per_s": batch / times[len(times) // 2],
                "frac_feasible": float(torch.isfinite(values).float().mean()),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
