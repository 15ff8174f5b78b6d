"""The ``paper`` preset at Pythia-2.8B scale without a GPU: AOT-compile its train steps and report
the compiled memory per device.

Lowers ``jax.jit`` on ``jax.ShapeDtypeStruct`` inputs only (no weights are allocated) for an
8-device data-parallel mesh of fake CPU devices (``--xla_force_host_platform_device_count``), with
the preset's batch sizes and micro-batching: MargE (AdamW, float32) and DPO (RMSprop, bfloat16
matmuls, chosen + rejected sequences), ``T`` tokens per sequence (f2 prompts and targets with the
Pythia tokenizer: ~134). ``generate`` lowers the refinement sampler (``lm.sample``'s KV-cache
``while_loop``) for one chunk of the preset's ``refine.batch_size`` rows sharded over the mesh, the
float32 policy replicated, ``--prompt-tokens`` prompt and ``--new-tokens`` decoded tokens. Prints and
writes ``compiled.memory_analysis()`` per step (arguments, outputs, temporaries, generated code;
per device) to ``benchmarks/results/paper_scale_aot.json``.

These are XLA:CPU buffer assignments: a GPU compile fuses differently, so read them as an estimate
of the per-device plan (parameters + optimizer state + activations), not as a GPU measurement.

Usage: ``python benchmarks/paper_scale_aot.py [--model 2.8b] [--tokens 134] [--devices 8]
[--losses marge,dpo,generate]``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="2.8b")
parser.add_argument("--tokens", type=int, default=134)
parser.add_argument("--devices", type=int, default=8)
parser.add_argument("--losses", default="marge,dpo,generate", help="steps; 'generate' = sampler")
parser.add_argument(
    "--prompt-tokens", type=int, default=67, help="prompt tokens (train: the rest are targets)"
)
parser.add_argument(
    "--full-head",
    action="store_true",
    help="train steps: apply the output head to every position (target_window=None) instead of "
    "the product's default window over the targets",
)
parser.add_argument("--new-tokens", type=int, default=73, help="generate: decoded tokens at most")
parser.add_argument(
    "--out", default=str(pathlib.Path(__file__).parent / "results" / "paper_scale_aot.json")
)
args = parser.parse_args()
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _report import compiled_memory_gib, write_json  # noqa: E402  (benchmarks/_report.py)

from llome_jax.host import parallel  # noqa: E402
from llome_jax.llome.finetune import microbatches  # noqa: E402
from llome_jax.llome.presets import preset  # noqa: E402
from llome_jax.lm.logprobs import target_window  # noqa: E402
from llome_jax.lm.pythia import PythiaConfig, abstract_model  # noqa: E402
from llome_jax.training.loss_inputs import LossBatch  # noqa: E402
from llome_jax.training.loss_registry import default_params, get_loss, loss_spec  # noqa: E402
from llome_jax.training.optimizer import make_optimizer, paper_optimizer  # noqa: E402
from llome_jax.training.step import TrainBatch, TrainState, make_train_step, split_params  # noqa: E402
from llome_jax.types import SeqLogProbs  # noqa: E402


def _sds(shape, dtype, mesh, spec):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=jax.sharding.NamedSharding(mesh, spec))


def main() -> None:
    from jax.sharding import PartitionSpec as P

    paper = preset("paper", weights="(abstract: no weights are read)")
    mesh = parallel.make_mesh(args.devices)
    rows = []
    for loss in [x.strip() for x in args.losses.split(",") if x.strip()]:
        if loss == "generate":
            rows.append(_generate_row(paper, mesh))
            continue
        triples = loss_spec(loss).data == "triples"
        dtype = paper.finetune.dpo_compute_dtype if triples else "float32"
        config = PythiaConfig.preset(args.model, compute_dtype=dtype)
        model = abstract_model(config)
        units = paper.finetune.batch_size_for(loss)
        m = microbatches(paper, mesh, units)
        opt = make_optimizer(paper_optimizer(loss, 1000))
        step = make_train_step(get_loss(loss), model, opt, num_microbatches=m, mesh=mesh)
        _, params, _ = split_params(model)
        params = jax.tree.map(lambda x: _sds(x.shape, x.dtype, mesh, P()), params)
        state = TrainState(
            params=params,
            opt_state=jax.eval_shape(opt.init, params),
            step=jax.ShapeDtypeStruct((), jnp.int32),
            key=jax.eval_shape(lambda: jax.random.key(0)),
        )
        rows_b = 2 * units if triples else units
        data = P(parallel.DATA_AXIS)
        tokens = (rows_b, args.tokens)
        # The window TrainBatch.create would pick for rows of prompt + target tokens.
        target_rows = np.zeros((1, args.tokens), np.int32)
        target_rows[:, args.prompt_tokens :] = 1
        window = None if args.full_head else target_window(target_rows)
        batch = TrainBatch(
            input_ids=_sds(tokens, jnp.int32, mesh, data),
            attention_mask=_sds(tokens, jnp.int32, mesh, data),
            target_mask=_sds(tokens, jnp.int32, mesh, data),
            reference=SeqLogProbs(
                _sds((rows_b,), jnp.float32, mesh, data), _sds((rows_b,), jnp.float32, mesh, data)
            ),
            loss=LossBatch(
                reward=_sds((units,), jnp.float32, mesh, data),
                weight=_sds((units,), jnp.float32, mesh, data),
                group=_sds((units,), jnp.int32, mesh, data),
            ),
            target_window=window,
        )
        hparams = default_params(loss).as_arrays()
        t0 = time.perf_counter()
        compiled = step.jitted.lower(state, batch, hparams, step.rest).compile()
        seconds = time.perf_counter() - t0
        row = _memory_row(
            compiled,
            seconds,
            loss=loss,
            model=args.model,
            compute_dtype=dtype,
            units_per_step=units,
            sequences_per_step=rows_b,
            tokens=args.tokens,
            num_microbatches=m,
            target_window=window,
        )
        rows.append(row)
        print(
            f"{loss:>6} {args.model} {dtype:>8}: {units} units x {args.tokens} tokens on "
            f"{args.devices} devices, M={m}; per device: arguments {row['argument_gib']:.2f} GiB,"
            f" temporaries {row['temp_gib']:.2f} GiB, outputs {row['output_gib']:.2f} GiB "
            f"(aliased {row['alias_gib']:.2f}); peak ~{row['peak_estimate_gib']:.2f} GiB; "
            f"compiled in {seconds:.0f} s",
            flush=True,
        )
    write_json(
        args.out,
        {"machine": platform.processor() or platform.machine(), "rows": rows},
    )


def _memory_row(compiled: Any, seconds: float, **fields: Any) -> dict[str, Any]:
    return {
        **fields,
        "devices": args.devices,
        "compile_seconds": seconds,
        **compiled_memory_gib(compiled),
    }


def _generate_row(paper: Any, mesh: Any) -> dict[str, Any]:
    """AOT-compile one chunk of refinement sampling (``refine.batch_size`` rows over the mesh)."""
    from flax import nnx
    from jax.sharding import PartitionSpec as P

    from llome_jax.lm.sample import SampleConfig, _sharded_core

    config = PythiaConfig.preset(args.model)
    graphdef, state = nnx.split(abstract_model(config))
    state = jax.tree.map(lambda x: _sds(x.shape, x.dtype, mesh, P()), state)
    rows_b = paper.refine.batch_size
    data = P(parallel.DATA_AXIS)
    prompt = (rows_b, args.prompt_tokens)
    sample = SampleConfig(
        max_new_tokens=args.new_tokens, top_k=None, stop_token_ids=(0,), vocab_limit=50277
    )
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=_replicated(mesh))
    t0 = time.perf_counter()
    lowered = _sharded_core(mesh).lower(
        graphdef,
        state,
        key,
        _sds(prompt, jnp.int32, mesh, data),
        _sds(prompt, jnp.int32, mesh, data),
        _sds((rows_b,), jnp.float32, mesh, data),
        sample,
    )
    compiled = lowered.compile()
    row = _memory_row(
        compiled,
        time.perf_counter() - t0,
        loss="generate",
        model=args.model,
        compute_dtype=config.compute_dtype,
        sequences_per_step=rows_b,
        tokens=args.prompt_tokens + args.new_tokens,
    )
    print(
        f"generate {args.model}: {rows_b} rows x ({args.prompt_tokens} + {args.new_tokens}) "
        f"tokens on {args.devices} devices; per device: arguments {row['argument_gib']:.2f} GiB, "
        f"temporaries {row['temp_gib']:.2f} GiB, outputs {row['output_gib']:.3f} GiB; peak "
        f"~{row['peak_estimate_gib']:.2f} GiB; compiled in {row['compile_seconds']:.0f} s",
        flush=True,
    )
    return row


def _replicated(mesh: Any) -> Any:
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


if __name__ == "__main__":
    main()
