"""Copy the paper's six Ehrlich instances from ../shared/fixtures/paper_instances into the package.

Run from the repository root: ``python scripts/build_paper_instances.py``. Keeps only what the
package needs at run time (explicit instance and the GA's initial solution), not the test vectors.
"""

from __future__ import annotations

import json
import pathlib

SOURCE = pathlib.Path("../shared/fixtures/paper_instances")
TARGET = pathlib.Path("llome_jax/ehrlich/data/paper_instances.json")
ALIASES = {
    "f1_v8_L128_c8_k8_q8": "f1",
    "f2_v32_L32_c4_k4_q4": "f2",
    "f3_v32_L128_c4_k4_q4": "f3",
    "f4_v32_L128_c8_k8_q8": "f4",
}
KEEP = (
    "config",
    "transition_matrix",
    "stationary_dist",
    "motifs",
    "spacings_holo",
    "initial_solution",
    "initial_solution_value",
    "optimal_solution",
)


def main() -> None:
    index = json.loads((SOURCE / "index.json").read_text())
    instances = {}
    for entry in index["files"]:
        record = json.loads((SOURCE / entry["file"]).read_text())
        stem = record["name"]
        instances[stem] = {key: record[key] for key in KEEP}
        instances[stem]["alias"] = ALIASES.get(stem)
        instances[stem]["source"] = (
            f"pytorch-holo 0.0.5, random_seed={record['config']['random_seed']}"
        )
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(json.dumps(instances, separators=(",", ":")))
    print(f"wrote {len(instances)} instances to {TARGET}")


if __name__ == "__main__":
    main()
