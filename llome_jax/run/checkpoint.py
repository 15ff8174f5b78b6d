"""Orbax checkpoints of whole state pytrees plus JSON metadata, restored into abstract targets.

One wrapper serves every stateful part of llome_jax: the fine-tuning ``TrainState`` (params,
optimizer state, step, PRNG key), the LLOME ``LoopState`` (one checkpoint per round) and LaMBO-2's
state. Usage::

    with CheckpointManager(run_dir / "checkpoints") as ckpt:
        ckpt.save(step, state, {"round": 3, "config": cfg_dict})
        ...
        latest = ckpt.latest_step()                       # None when nothing was saved yet
        abstract = jax.eval_shape(lambda: init_state(...))  # or a real state of the same shape
        state, meta = ckpt.restore(latest, abstract)

Format (orbax-checkpoint V0 ``CheckpointManager`` with ``args.Composite``; one directory per step):
``<dir>/<step>/state`` (``StandardSave`` of the pytree; typed PRNG keys are stored as their raw
``jax.random.key_data`` and re-wrapped with ``jax.random.wrap_key_data`` on restore, so the format
does not depend on orbax's key support) and ``<dir>/<step>/metadata`` (``JsonSave``). Orbax writes
each step into a temporary directory and renames it only once complete, so an interrupted save
never shadows the previous good checkpoint; old steps are deleted only after a newer one has been
committed (``max_to_keep``, default 2). Restoring never deletes anything; a missing step raises
``FileNotFoundError`` and an unreadable one :class:`CheckpointError` naming the other steps.

Saves are synchronous by default (``save`` returns once the step is on disk), which is what
"interrupted runs lose nothing" needs; ``async_save=True`` overlaps writing with computation
(call :meth:`wait_until_finished` before relying on it).
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

__all__ = ["CheckpointError", "CheckpointManager", "abstract_like"]

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be read into the requested target."""


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _key_impl(abstract_key: Any) -> str:
    found: list[str] = []
    jax.eval_shape(lambda k: found.append(jax.random.key_impl(k)), abstract_key)
    return found[0]


def _default_sharding() -> jax.sharding.Sharding:
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _abstract_leaf(leaf: Any) -> jax.ShapeDtypeStruct:
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return leaf
    if not isinstance(leaf, jax.Array):
        leaf = jnp.asarray(leaf)
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)


def abstract_like(tree: Any) -> Any:
    """Abstract target (``ShapeDtypeStruct`` with shardings; typed keys kept) of a pytree."""
    return jax.tree.map(_abstract_leaf, tree)


def _to_storable(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _storable_abstract(abstract: Any) -> Any:
    def convert(leaf: Any) -> Any:
        leaf = _abstract_leaf(leaf)
        sharding = getattr(leaf, "sharding", None)
        if _is_key(leaf):
            data = jax.eval_shape(jax.random.key_data, leaf)
            if isinstance(sharding, jax.sharding.NamedSharding):
                sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
            elif sharding is not None and not isinstance(
                sharding, jax.sharding.SingleDeviceSharding
            ):
                sharding = None
            return jax.ShapeDtypeStruct(
                data.shape, data.dtype, sharding=sharding or _default_sharding()
            )
        return jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=sharding or _default_sharding()
        )

    return jax.tree.map(convert, abstract)


def _rewrap_keys(restored: Any, abstract: Any) -> Any:
    def rewrap(value: Any, target: Any) -> Any:
        if _is_key(target):
            return jax.random.wrap_key_data(value, impl=_key_impl(target))
        return value

    return jax.tree.map(rewrap, restored, abstract)


class CheckpointManager:
    """Step-indexed checkpoints of one state pytree plus a JSON metadata dict.

    Args:
      directory: root directory (created if missing).
      max_to_keep: number of most recent steps kept (older ones are deleted only after a newer
        one is committed); ``None`` keeps all. Default 2, so a good checkpoint survives even if
        the newest turns out unreadable.
      async_save: write in a background thread (see module docstring).
    """

    def __init__(
        self,
        directory: str | pathlib.Path,
        *,
        max_to_keep: int | None = 2,
        async_save: bool = False,
    ) -> None:
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError("max_to_keep must be >= 1 (or None to keep every step)")
        self.directory = pathlib.Path(directory).absolute()
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=True,
                enable_async_checkpointing=async_save,
                cleanup_tmp_directories=True,
            ),
        )

    # -- context manager ----------------------------------------------------------------------
    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finish pending saves and release resources."""
        self._manager.wait_until_finished()
        self._manager.close()

    def wait_until_finished(self) -> None:
        """Block until an asynchronous save has been committed."""
        self._manager.wait_until_finished()

    # -- queries ------------------------------------------------------------------------------
    def all_steps(self) -> list[int]:
        """Committed steps, ascending (interrupted saves are not listed)."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest committed step, or ``None`` if there is none."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    # -- save / restore -----------------------------------------------------------------------
    def save(self, step: int, state: Any, metadata: dict[str, Any] | None = None) -> None:
        """Save ``state`` (any pytree of arrays, typed keys allowed) and JSON ``metadata``.

        Raises:
          ValueError: if ``step`` is not newer than the latest saved step (orbax would silently
            skip it) or ``metadata`` is not JSON-serialisable. Nothing is written in that case.
        """
        step = int(step)
        metadata = {} if metadata is None else metadata
        try:
            json.dumps(metadata, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise ValueError(f"checkpoint metadata must be JSON-serialisable: {err}") from err
        latest = self.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(
                f"cannot save step {step}: step {latest} already exists in {self.directory}; "
                "steps must increase (delete newer steps first when rolling back)"
            )
        saved = self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_to_storable(state)),
                metadata=ocp.args.JsonSave(metadata),
            ),
            force=True,
        )
        if not saved:  # pragma: no cover - orbax declined (should not happen with force=True)
            raise RuntimeError(f"orbax declined to save step {step} in {self.directory}")

    def restore(self, step: int | None, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
        """Restore ``(state, metadata)`` of ``step`` (``None`` = latest) into ``abstract_state``.

        Args:
          step: which step; ``None`` for :meth:`latest_step`.
          abstract_state: the target structure: a pytree of ``jax.ShapeDtypeStruct`` (e.g.
            ``jax.eval_shape(init_fn)``, optionally with ``sharding=`` set: the restored arrays are
            placed accordingly; default: the first local device) or of concrete arrays with the
            right shapes. Typed-key leaves come back as typed keys.

        Raises:
          FileNotFoundError: no checkpoint at all, or not the requested step.
          CheckpointError: the step exists but is corrupt, incomplete or has another structure.
        """
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(
                f"no checkpoint in {self.directory}: start a fresh run or check the path"
            )
        step = steps[-1] if step is None else int(step)
        if step not in steps:
            raise FileNotFoundError(
                f"checkpoint step {step} not found in {self.directory}; available: {steps}"
            )
        target = _storable_abstract(abstract_state)
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(target),
                    metadata=ocp.args.JsonRestore(),
                ),
            )
            state = restored["state"]
            metadata = restored["metadata"]
            mismatch = jax.tree_util.tree_structure(state) != jax.tree_util.tree_structure(target)
            bad_shape = any(
                a.shape != b.shape or a.dtype != b.dtype
                for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(target), strict=True)
            )
            if mismatch or bad_shape:
                raise ValueError("restored tree does not match the target's structure/shapes")
        except Exception as err:
            others = [s for s in steps if s != step]
            raise CheckpointError(
                f"could not restore checkpoint step {step} from {self.directory}: "
                f"{type(err).__name__}: {str(err)[:500]}. The checkpoint is corrupt or incomplete, "
                f"or it was written for a different state structure. Nothing was deleted; other "
                f"steps available: {others}"
            ) from err
        return _rewrap_keys(state, abstract_state), dict(metadata or {})

    def restore_latest_good(self, abstract_state: Any) -> tuple[int, Any, dict[str, Any]] | None:
        """Restore the newest readable step, skipping (and logging) unreadable ones.

        Returns ``(step, state, metadata)``, or ``None`` if there are no checkpoints. Raises the
        last :class:`CheckpointError` if every step is unreadable.
        """
        last_error: CheckpointError | None = None
        for step in reversed(self.all_steps()):
            try:
                state, metadata = self.restore(step, abstract_state)
            except CheckpointError as err:
                log.warning("skipping unreadable checkpoint step %d: %s", step, err)
                last_error = err
                continue
            return step, state, metadata
        if last_error is not None:
            raise last_error
        return None
