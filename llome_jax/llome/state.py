"""What LLOME carries between rounds: :class:`LoopState`, round 0 and the checkpoint format.

The state is a pytree: device arrays (policy, reference, optimizer state, counters, the next
round's key) go through orbax; the archive of every labelled sequence (host numpy, grows every
round) goes into the checkpoint's JSON metadata, so a restored state is bit-identical.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ga import loop as ga_loop
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.finetune import optimizer_config
from llome_jax.llome.runtime import Runtime, initial_params, named_key
from llome_jax.run.checkpoint import CheckpointError
from llome_jax.run.runner import optimum_stop_reason, round0_key
from llome_jax.training.optimizer import make_optimizer

__all__ = [
    "STOP_REASONS",
    "LoopState",
    "abstract_state",
    "found_optimum",
    "init_state",
    "restore_checkpoint",
    "save_checkpoint",
    "stop_message",
]

#: ``LoopState.stop_code`` -> message (code 1 for an Ehrlich function; :func:`stop_message`).
STOP_REASONS: dict[int, str] = {
    0: "",
    1: "the optimum (f = 1) was found",
    2: "too few unique valid candidates were generated to continue",
    3: "the labelled set yields no training pairs",
}


def stop_message(code: int, optimal_value: float | None = 1.0) -> str:
    """``STOP_REASONS[code]``, with the objective's optimum ``f*`` in code 1's message."""
    if code == 1 and optimal_value is not None:
        return optimum_stop_reason(optimal_value, optimal_value)
    return STOP_REASONS.get(int(code), "")


def found_optimum(values: Any, optimal_value: float | None) -> bool:
    """Whether ``max(values) >= f*`` (never when ``f*`` is unknown or ``values`` is empty)."""
    values = np.asarray(values)
    return optimal_value is not None and values.size > 0 and float(values.max()) >= optimal_value


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------
_ARRAY_FIELDS = (
    "round",
    "key",
    "params",
    "reference_params",
    "opt_state",
    "num_evaluations",
    "mean_hamming",
    "temperature_offset",
    "stop_code",
)
_ARCHIVE_FIELDS = ("archive_sequences", "archive_values", "archive_rounds")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[*_ARRAY_FIELDS, *_ARCHIVE_FIELDS],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class LoopState:
    """Everything carried between LLOME rounds (a pytree; checkpointed after each round).

    Attributes:
      round: int32 ``[]`` completed rounds (0 = only the GA seed data).
      key: typed PRNG key of the *next* round (split once per round).
      params: policy parameters (pure dict) after the last round's training.
      reference_params: the reference the last round trained against (the previous policy; at
        round 0 a copy of the initial parameters). The next round's reference is ``params``.
      opt_state: optimizer state at the end of the last round's training (diagnostic: every
        round starts a fresh optimizer, as the reference).
      num_evaluations: int32 ``[]`` labels paid so far (``llome_jax.oracle``).
      mean_hamming: float32 ``[]`` mean fractional Hamming distance of the last round's valid
        generations to their inputs (NaN: none yet) - drives the temperature offset.
      temperature_offset: float32 ``[]`` the offset the last round sampled with.
      stop_code: int32 ``[]`` 0 = continue, else a key of ``STOP_REASONS``.
      archive_sequences: int32 ``[N, L]`` every labelled sequence (host numpy, grows per round).
      archive_values: float32 ``[N]`` their values (``-inf`` infeasible).
      archive_rounds: int32 ``[N]`` round of labelling (0 = GA). ``S_i`` = rows of round ``i``.
    """

    round: Any
    key: Any
    params: Any
    reference_params: Any
    opt_state: Any
    num_evaluations: Any
    mean_hamming: Any
    temperature_offset: Any
    stop_code: Any
    archive_sequences: Any
    archive_values: Any
    archive_rounds: Any

    @property
    def round_index(self) -> int:
        return int(self.round)

    def latest(self) -> tuple[np.ndarray, np.ndarray]:
        """``S_i``: ``(sequences [m, L], values [m])`` labelled in the newest round."""
        rows = np.asarray(self.archive_rounds) == int(self.round)
        return np.asarray(self.archive_sequences)[rows], np.asarray(self.archive_values)[rows]


# --------------------------------------------------------------------------------------------
# Initial state (round 0: GA seed data, initial model)
# --------------------------------------------------------------------------------------------
def init_state(key: jax.Array, rt: Runtime, cfg: LoopConfig) -> LoopState:
    """Round 0: ``n0`` GA generations from the objective's start sequence and the initial model.

    ``key`` is the run key, ``jax.random.key(cfg.seed)``: the GA and the rounds use keys derived
    from it (``runtime.named_key``); the model was initialised by ``Runtime.build``.
    """
    archive = ga_loop.run_archive(
        round0_key(key),  # the round 0 every optimizer shares
        rt.objective,
        rt.x0,
        cfg.round0_generations,
        cfg.round0_ga,
    )
    sequences, values, _ = archive.to_numpy()
    params = initial_params(rt.model)
    optimizer = make_optimizer(optimizer_config(cfg, cfg.loss(1), 1))
    return LoopState(
        round=jnp.zeros((), jnp.int32),
        key=named_key(key, "loop"),
        params=params,
        reference_params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        num_evaluations=jnp.asarray(
            cfg.round0_generations * cfg.round0_ga.num_particles, jnp.int32
        ),
        mean_hamming=jnp.asarray(np.nan, jnp.float32),
        temperature_offset=jnp.zeros((), jnp.float32),
        stop_code=jnp.asarray(
            1 if found_optimum(values, rt.objective.optimal_value) else 0, jnp.int32
        ),
        archive_sequences=sequences.astype(np.int32),
        archive_values=values.astype(np.float32),
        archive_rounds=np.zeros(values.shape, np.int32),
    )


def abstract_state(rt: Runtime, cfg: LoopConfig, round_index: int) -> LoopState:
    """Shapes/dtypes of the device part of the state saved at ``round_index`` (archive empty)."""
    params = jax.eval_shape(lambda: initial_params(rt.model))
    loss = cfg.loss(max(round_index, 1))
    optimizer = make_optimizer(optimizer_config(cfg, loss, 1))
    scalar_i = jax.ShapeDtypeStruct((), jnp.int32)
    scalar_f = jax.ShapeDtypeStruct((), jnp.float32)
    return LoopState(
        round=scalar_i,
        key=jax.eval_shape(lambda: jax.random.key(0)),
        params=params,
        reference_params=params,
        opt_state=jax.eval_shape(optimizer.init, params),
        num_evaluations=scalar_i,
        mean_hamming=scalar_f,
        temperature_offset=scalar_f,
        stop_code=scalar_i,
        archive_sequences=None,
        archive_values=None,
        archive_rounds=None,
    )


# --------------------------------------------------------------------------------------------
# Checkpoints: device arrays through orbax, the (growing) archive as JSON metadata
# --------------------------------------------------------------------------------------------
def _device_part(state: LoopState) -> LoopState:
    return dataclasses.replace(
        state, archive_sequences=None, archive_values=None, archive_rounds=None
    )


def _archive_metadata(state: LoopState) -> dict[str, Any]:
    values = np.asarray(state.archive_values, np.float32)
    return {
        "archive_sequences": np.asarray(state.archive_sequences).astype(int).tolist(),
        # float32 -> Python float is exact; -inf is written as a string (strict JSON).
        "archive_values": [repr(float(x)) for x in values],
        "archive_rounds": np.asarray(state.archive_rounds).astype(int).tolist(),
    }


def _state_from_checkpoint(device: LoopState, metadata: Mapping[str, Any]) -> LoopState:
    sequences = np.asarray(metadata["archive_sequences"], np.int32)
    values = np.asarray([float(x) for x in metadata["archive_values"]], np.float32)
    rounds = np.asarray(metadata["archive_rounds"], np.int32)
    if sequences.ndim != 2:
        sequences = sequences.reshape(len(values), -1)
    return dataclasses.replace(
        device, archive_sequences=sequences, archive_values=values, archive_rounds=rounds
    )


def save_checkpoint(manager: Any, state: LoopState, extra: Mapping[str, Any] | None = None) -> None:
    """Save ``state`` as step ``state.round`` (archive in the JSON metadata)."""
    metadata = {"round": state.round_index, **_archive_metadata(state), **(extra or {})}
    manager.save(state.round_index, _device_part(state), metadata)


def restore_checkpoint(manager: Any, rt: Runtime, cfg: LoopConfig) -> LoopState | None:
    """The newest readable checkpoint as a :class:`LoopState` (``None`` if there is none)."""
    last_error: Exception | None = None
    for step in reversed(manager.all_steps()):
        try:
            device, metadata = manager.restore(step, abstract_state(rt, cfg, step))
            return _state_from_checkpoint(device, metadata)
        except (CheckpointError, KeyError, ValueError) as err:
            last_error = err
    if last_error is not None:
        raise last_error
    return None
