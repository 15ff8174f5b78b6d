"""The ``paper`` preset's Pythia-2.8B steps executed on one real accelerator: time and memory.

The GPU twin of ``paper_scale_aot.py`` (which only compiles, on fake CPU devices). Here the
parameters are real (random, float32: no checkpoint is read) and every step runs:

* ``marge`` / ``sft`` / ``dpo``: the preset's train step (``train.make_train_step``, the paper's
  optimizer, its batch of ``finetune.batch_size`` units (``sft_batch_size`` for SFT; DPO: chosen +
  rejected rows, bf16 matmuls) of ``--tokens`` tokens, micro-batched as ``finetune.microbatches``
  does for the device count), ``--steps`` timed steps after the compiling one;
* ``generate``: one refinement chunk (``refine.batch_size`` rows, ``--prompt-tokens`` left-padded
  prompt, ``--new-tokens`` decoded at most, temperature 1, no early stop), ``--steps`` timed calls.

Each phase reports compile seconds, the median step, tokens/s, the compiled program's memory
(``compiled.memory_analysis()``) and the device's peak bytes in use (``memory_stats()``, when the
backend reports it). Run one phase per process (``--losses marge``) for a clean peak.

Usage: ``python benchmarks/paper_scale_gpu.py [--model 2.8b] [--losses marge,generate]
[--steps 3]``; on a CPU, ``--model 70m --microbatches 4`` is a quick check of the script.
Writes ``benchmarks/results/paper_scale_gpu.json`` (rows appended per phase).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _report import compiled_memory_gib  # benchmarks/_report.py

GIB = 2**30


def _device_memory() -> dict[str, float]:
    stats = jax.devices()[0].memory_stats() or {}
    return {
        "peak_gib": stats.get("peak_bytes_in_use", float("nan")) / GIB,
        "in_use_gib": stats.get("bytes_in_use", float("nan")) / GIB,
        "limit_gib": stats.get("bytes_limit", float("nan")) / GIB,
    }


def _timed_calls(call: Any, steps: int, name: str) -> dict[str, Any]:
    """Time ``call()`` ``steps + 1`` times: the first (warm-up) call and the median of the rest."""
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {
        f"first_{name}_seconds": times[0],
        f"{name}_seconds": statistics.median(times[1:]),
        f"{name}_seconds_all": times[1:],
    }


def _train_row(args: argparse.Namespace, paper: Any, loss: str) -> dict[str, Any]:
    from flax import nnx

    from llome_jax.llome.finetune import microbatches
    from llome_jax.lm.logprobs import target_window
    from llome_jax.lm.pythia import Pythia, PythiaConfig, abstract_model
    from llome_jax.training.loss_inputs import LossBatch
    from llome_jax.training.loss_registry import default_params, get_loss, loss_spec
    from llome_jax.training.optimizer import make_optimizer, paper_optimizer
    from llome_jax.training.step import TrainBatch, init_train_state, make_train_step
    from llome_jax.types import SeqLogProbs

    triples = loss_spec(loss).data == "triples"
    dtype = paper.finetune.dpo_compute_dtype if triples else "float32"
    config = PythiaConfig.preset(args.model, compute_dtype=dtype)
    units = paper.finetune.batch_size_for(loss)
    m = args.microbatches or microbatches(paper, None, units)
    opt = make_optimizer(paper_optimizer(loss, 1000))
    t0 = time.perf_counter()
    model = Pythia(config, rngs=nnx.Rngs(0))
    state = init_train_state(jax.random.key(0), model, opt)
    del model
    jax.block_until_ready(state)
    t_init = time.perf_counter() - t0
    step = make_train_step(get_loss(loss), abstract_model(config), opt, num_microbatches=m)
    rows_b = 2 * units if triples else units
    rng = np.random.default_rng(0)
    prompt = args.tokens // 2
    input_ids = rng.integers(0, config.vocab_size, (rows_b, args.tokens), dtype=np.int32)
    target = np.zeros((rows_b, args.tokens), np.int32)
    target[:, prompt:] = 1
    batch = TrainBatch(
        input_ids=jnp.asarray(input_ids),
        attention_mask=jnp.ones((rows_b, args.tokens), jnp.int32),
        target_mask=jnp.asarray(target),
        reference=SeqLogProbs(
            jnp.full((rows_b,), -3.0 * (args.tokens - prompt)), jnp.full((rows_b,), -3.0)
        ),
        loss=LossBatch(
            reward=jnp.asarray(rng.normal(size=units), jnp.float32),
            weight=jnp.ones((units,), jnp.float32),
            group=jnp.zeros((units,), jnp.int32),
        ),
        target_window=None if args.full_head else target_window(target),
    )
    hparams = default_params(loss).as_arrays()
    t0 = time.perf_counter()
    compiled = step.jitted.lower(state, batch, hparams, step.rest).compile()
    t_compile = time.perf_counter() - t0
    metrics: dict[str, Any] = {}

    def one_step() -> None:
        nonlocal state, metrics
        state, metrics = compiled(state, batch, hparams, step.rest)
        jax.block_until_ready(metrics)

    timing = _timed_calls(one_step, args.steps, "step")
    return {
        "phase": loss,
        "model": args.model,
        "compute_dtype": dtype,
        "units_per_step": units,
        "sequences_per_step": rows_b,
        "tokens": args.tokens,
        "num_microbatches": m,
        "target_window": batch.target_window,
        "init_seconds": t_init,
        "compile_seconds": t_compile,
        **timing,
        "tokens_per_second": rows_b * args.tokens / timing["step_seconds"],
        "loss": float(metrics["loss"]),
        **compiled_memory_gib(compiled),
        **_device_memory(),
    }


def _generate_row(args: argparse.Namespace, paper: Any) -> dict[str, Any]:
    from flax import nnx

    from llome_jax.lm.pythia import Pythia, PythiaConfig
    from llome_jax.lm.sample import SampleConfig, _jitted_core

    config = PythiaConfig.preset(args.model)
    t0 = time.perf_counter()
    graphdef, state = nnx.split(Pythia(config, rngs=nnx.Rngs(0)))
    jax.block_until_ready(state)
    t_init = time.perf_counter() - t0
    rows_b = paper.refine.batch_size
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(1, 50277, (rows_b, args.prompt_tokens), dtype=np.int32))
    mask = jnp.ones_like(prompt)
    # no stop token: every row decodes all --new-tokens (the worst case of a chunk)
    sample = SampleConfig(max_new_tokens=args.new_tokens, top_k=None, vocab_limit=50277)
    temperature = jnp.ones((rows_b,), jnp.float32)
    call_args = (graphdef, state, jax.random.key(0), prompt, mask, temperature, sample)
    t0 = time.perf_counter()
    compiled = _jitted_core.lower(*call_args).compile()
    t_compile = time.perf_counter() - t0
    calls = iter(range(args.steps + 1))

    def one_call() -> None:
        key = jax.random.key(next(calls))
        jax.block_until_ready(compiled(state, key, prompt, mask, temperature))

    timing = _timed_calls(one_call, args.steps, "call")
    return {
        "phase": "generate",
        "model": args.model,
        "compute_dtype": config.compute_dtype,
        "rows": rows_b,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "init_seconds": t_init,
        "compile_seconds": t_compile,
        **timing,
        "new_tokens_per_second": rows_b * args.new_tokens / timing["call_seconds"],
        **compiled_memory_gib(compiled),
        **_device_memory(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="2.8b")
    parser.add_argument("--losses", default="marge,generate", help="phases: marge,sft,dpo,generate")
    parser.add_argument("--tokens", type=int, default=134, help="tokens per training sequence")
    parser.add_argument("--prompt-tokens", type=int, default=67)
    parser.add_argument("--new-tokens", type=int, default=73)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    parser.add_argument("--microbatches", type=int, default=None, help="override M (CPU checks)")
    parser.add_argument(
        "--full-head", action="store_true", help="output head on every position (no window)"
    )
    parser.add_argument(
        "--out", default=str(pathlib.Path(__file__).parent / "results" / "paper_scale_gpu.json")
    )
    args = parser.parse_args()

    from llome_jax.llome.presets import preset

    paper = preset("paper", weights="(random weights: none are read)")
    device = jax.devices()[0]
    out = pathlib.Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {"rows": []}
    report["device"] = f"{device.platform}: {device.device_kind}"
    report["jax"] = jax.__version__
    for phase in [x.strip() for x in args.losses.split(",") if x.strip()]:
        row = _generate_row(args, paper) if phase == "generate" else _train_row(args, paper, phase)
        row["device"] = report["device"]
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
