"""Subprocess workers for tests that need a fresh process (run by the tests, not by pytest).

* ``python workers.py distributed HOST:PORT NUM_PROCESSES PROCESS_ID OUT_DIR``: one process of a
  multi-process data-parallel run (tests/test_train.py). Every process builds the same tiny model
  and global batches, keeps its own slice of each batch, runs MargE steps on the global mesh and
  writes the final parameters to ``OUT_DIR/result_<pid>.json``.
* ``python workers.py train_then_die CHECKPOINT_DIR STEPS``: trains ``STEPS`` steps, checkpoints
  the state, then kills itself with SIGKILL (tests/test_checkpoint.py).

``setup()`` and ``train(state, step_fn, batches, start, stop)`` are shared with the tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

NUM_BATCHES = 4
GLOBAL_BATCH = 8


def setup():
    """``(model, optimizer, batches, loss_fn, hparams)``: a tiny MargE problem, deterministic."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from llome_jax.testing import TinyCausalLM, TinyLMConfig, toy_token_batch
    from llome_jax.training.loss_inputs import LossBatch, LossParams
    from llome_jax.training.losses import marge_loss
    from llome_jax.training.optimizer import OptimizerConfig, make_optimizer
    from llome_jax.training.step import TrainBatch
    from llome_jax.types import SeqLogProbs

    config = TinyLMConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, max_position=16)
    model = TinyCausalLM(config, rngs=nnx.Rngs(0))
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-2, total_steps=10))
    batches = []
    for seed in range(NUM_BATCHES):
        ids, tmask, amask = toy_token_batch(
            seed, batch_size=GLOBAL_BATCH, seq_len=10, vocab_size=32
        )
        reward = np.random.default_rng(seed).uniform(0, 1, GLOBAL_BATCH).astype(np.float32)
        ref = SeqLogProbs(
            jnp.linspace(-30.0, -20.0, GLOBAL_BATCH),
            jnp.asarray(tmask[:, 1:].sum(1), jnp.float32),
        )
        batches.append(
            TrainBatch.create(
                ids, tmask, amask, reference=ref, loss=LossBatch.create(reward=reward)
            )
        )
    return model, tx, batches, marge_loss, LossParams(beta=2.0, kl_weight=1.0)


def flat(tree):
    import jax
    import numpy as np

    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def train_single_device(num_steps: int = 2):
    """Reference for the distributed test: the same training on one device."""
    import jax

    from llome_jax.training.step import init_train_state, make_train_step

    model, tx, batches, loss_fn, hp = setup()
    step = make_train_step(loss_fn, model, tx)
    state = init_train_state(jax.random.key(0), model, tx)
    for batch in batches[:num_steps]:
        state, _ = step(state, batch, hp)
    return flat(state.params)


def distributed(coordinator: str, num_processes: int, process_id: int, out_dir: str) -> None:
    from llome_jax.host import parallel

    parallel.initialize_distributed(coordinator, num_processes, process_id, cpu_collectives="gloo")
    import jax
    import numpy as np

    from llome_jax.training.step import init_train_state, make_train_step

    mesh = parallel.make_mesh()
    model, tx, batches, loss_fn, hp = setup()
    step = make_train_step(loss_fn, model, tx, mesh=mesh)
    state = parallel.replicate(init_train_state(jax.random.key(0), model, tx), mesh)
    local = GLOBAL_BATCH // num_processes
    rows = slice(process_id * local, (process_id + 1) * local)
    for batch in batches[:2]:
        local_batch = jax.tree.map(lambda x: np.asarray(x)[rows], batch)
        state, _ = step(state, parallel.global_batch_from_local(local_batch, mesh), hp)
    params = flat(jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state.params))
    result = {
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "params": params.tolist(),
    }
    (pathlib.Path(out_dir) / f"result_{process_id}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


def train_then_die(checkpoint_dir: str, num_steps: int) -> None:
    import jax

    from llome_jax.run.checkpoint import CheckpointManager
    from llome_jax.training.step import init_train_state, make_train_step

    model, tx, batches, loss_fn, hp = setup()
    step = make_train_step(loss_fn, model, tx)
    state = init_train_state(jax.random.key(42), model, tx)
    for batch in batches[:num_steps]:
        state, _ = step(state, batch, hp)
    manager = CheckpointManager(checkpoint_dir)
    manager.save(num_steps, state, {"loss": "marge", "steps_done": num_steps})
    print("saved", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no atexit, no orbax finalisation


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "distributed":
        distributed(args[0], int(args[1]), int(args[2]), args[3])
    elif command == "train_then_die":
        train_then_die(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown command {command!r}")
