"""Blind local search on the ask/tell base: how far do unguided single mutants get?

Each round proposes ``labels_per_round`` new sequences, each ``mutations`` uniformly random
substitutions (a different state each) of a uniformly chosen incumbent among the ``incumbents``
best labelled sequences (ties at the cut broken at random); nothing labelled is proposed again.
Nothing is learnt: it is the floor a model-guided method should clear at the same label budget
(the paper driver's ``local search`` method, docs/experiments.md).

The proposals are :func:`propose`'s, drawn from a NumPy PCG64
generator seeded ``1000 + seed`` whose state is the optimizer's pytree state (ten uint32 words),
so a resumed run draws what an uninterrupted one does and the runs made before this plug-in
(``experiments/local_search.py``'s own loop) are repeated label for label.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from llome_jax.optimizers.base import AskTellOptimizer, BenchmarkSettings, LabelledData

__all__ = [
    "LocalSearch",
    "LocalSearchConfig",
    "generator_from_words",
    "generator_words",
    "propose",
]

_MASK = (1 << 32) - 1


@dataclasses.dataclass(frozen=True)
class LocalSearchConfig(BenchmarkSettings):
    """:class:`BenchmarkSettings` and the search's own: ``incumbents`` (the best labelled
    sequences mutated, 200) and ``mutations`` (substitutions per proposal, 1)."""

    incumbents: int = 200
    mutations: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("incumbents", "mutations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")


def generator_words(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's state as uint32 ``[10]`` (state and increment, 4 words each, then
    ``has_uint32`` and ``uinteger``)."""
    st = rng.bit_generator.state
    words = [(st["state"][k] >> (32 * i)) & _MASK for k in ("state", "inc") for i in range(4)]
    return np.asarray([*words, st["has_uint32"], st["uinteger"]], np.uint32)


def generator_from_words(words: Any) -> np.random.Generator:
    """The generator :func:`generator_words` wrote."""
    w = [int(x) for x in np.asarray(words, np.uint64)]
    bits = np.random.PCG64()
    bits.state = {
        "bit_generator": "PCG64",
        "state": {
            "state": sum(w[i] << (32 * i) for i in range(4)),
            "inc": sum(w[4 + i] << (32 * i) for i in range(4)),
        },
        "has_uint32": w[8],
        "uinteger": w[9],
    }
    return np.random.Generator(bits)


def propose(
    rng: np.random.Generator,
    sequences: np.ndarray,
    values: np.ndarray,
    seen: set[bytes],
    num: int,
    incumbents: int,
    mutations: int,
    num_states: int,
) -> np.ndarray:
    """``num`` new distinct sequences, each ``mutations`` random substitutions of one of the
    ``incumbents`` best labelled sequences (ties at the cut broken at random)."""
    order = rng.permutation(len(values))
    order = order[np.argsort(-values[order], kind="stable")][:incumbents]
    top = sequences[order]
    length = sequences.shape[1]
    out: list[np.ndarray] = []
    stale = 0
    while len(out) < num:
        if stale == 20:
            raise ValueError(
                f"only {len(out)} of {num} new sequences found around the {len(top)} incumbents."
            )
        found = len(out)
        parents = top[rng.integers(0, len(top), 4 * num)]
        children = parents.copy()
        rows = np.arange(len(children))
        for _ in range(mutations):
            position = rng.integers(0, length, len(children))
            shift = rng.integers(1, num_states, len(children))  # a different state
            children[rows, position] = (children[rows, position] + shift) % num_states
        for child in children:
            key = child.astype(np.uint8).tobytes()
            if key not in seen:
                seen.add(key)
                out.append(child)
                if len(out) == num:
                    break
        stale = stale + 1 if len(out) == found else 0
    return np.stack(out)


class LocalSearch(AskTellOptimizer):
    """Blind local search (module docstring) as an :class:`AskTellOptimizer`."""

    name = "local_search"
    config_class = LocalSearchConfig

    def init_state(self, key: jax.Array, data: LabelledData) -> Any:
        return {"rng": generator_words(np.random.default_rng(1_000 + self.cfg.seed))}

    def ask(
        self, key: jax.Array, state: Any, data: LabelledData, num: int
    ) -> tuple[np.ndarray, Any]:
        rng = generator_from_words(state["rng"])
        seen = {s.astype(np.uint8).tobytes() for s in data.sequences}
        batch = propose(
            rng,
            np.asarray(data.sequences, np.int64),
            np.asarray(data.values, np.float64),
            seen,
            num,
            self.cfg.incumbents,
            self.cfg.mutations,
            data.num_states,
        )
        return batch.astype(np.int32), {"rng": generator_words(rng)}

    def record(
        self, state: Any, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> dict[str, Any]:
        """``num_improving``: this round's labels above the best label before it."""
        before = data.values[: len(data.values) - len(values)]
        best = float(np.max(before)) if before.size else float("-inf")
        return {"num_improving": int(np.sum(values > best))}
