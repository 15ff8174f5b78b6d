"""Pythia-70M-size speed on this machine: llome_jax (JAX/NNX) vs transformers (PyTorch).

Three measurements on the *same* random weights (ours are exported to torch with
``convert.hf_tensors``):

1. forward: logits for a batch of 8 x 128 tokens (tokens/s);
2. one training step: SFT loss on the target half of each sequence, AdamW, gradient clipping
   (ours: ``llome_jax.training.step.make_train_step`` with ``LOSSES["sft"]``; torch: forward, token-mean
   cross-entropy, backward, ``clip_grad_norm_``, ``AdamW.step``). Ours applies the output head
   to the batch's target window only (``TrainBatch.target_window``, here 64 of 127 positions);
   the same step with the head on every position (``target_window=None``) runs interleaved;
3. decoding: 8 left-padded prompts x 64 new tokens, greedy (ours: ``sample.generate``, one
   jitted while-loop with a KV cache; torch: ``GPTNeoXForCausalLM.generate``), new tokens/s.
   Ours is also timed for temperature/top-k sampling. ``--previous-sample REV`` also times the
   decoder of ``llome_jax/lm/sample.py`` at git revision ``REV`` on the same model, interleaved
   with the current one, and checks that both return identical tokens and log-probs.

The CPU is shared, so the two implementations are measured *interleaved* (ours, torch, ours,
...) and medians are reported; compilation is excluded (one warm-up call each) and reported
separately. Writes ``benchmarks/results/pythia_speed.json``.

Usage::

    python benchmarks/pythia_speed.py [--reps 5] [--train-reps 3] [--preset 70m] [--previous-sample REV]

``--bf16-drift`` instead measures how far bf16 generation (``SampleConfig(compute_dtype=
"bfloat16")``: parameters and KV cache in bf16) moves tokens and log-probs from fp32, on the
tiny test checkpoint (``tests/fixtures/pythia_tiny``) and a randomly initialised ``--preset``
(default 70m): batch 2, ``--drift-prompt`` prompt and ``--drift-tokens`` new tokens, greedy and
sampled (T = 1, no top-k, same keys); no torch needed (:func:`bf16_drift`). Writes
``benchmarks/results/pythia_bf16_drift.json``.

``--paper-chunk`` instead times one refinement chunk of the ``paper`` preset on a randomly
initialised ``--preset`` (e.g. 2.8b on a GPU; ``refine.batch_size`` rows unless
``--chunk-rows``, a ``--chunk-prompt``-token prompt, ``--chunk-new`` tokens at T = 1 with no stop
token, the worst case) once per ``--chunk-dtypes`` entry (``float32``: the default path;
``bfloat16``: ``SampleConfig.compute_dtype``), ``--reps`` timed calls after the compiling one,
with the compiled program's memory and the device's peak (:func:`paper_chunk`). Writes
``benchmarks/results/pythia_paper_chunk.json`` (``--out`` overrides)::

    JAX_PLATFORMS=cuda python benchmarks/pythia_speed.py --paper-chunk --preset 2.8b --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _median_interleaved(fns: dict, reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def _sample_module_at(rev: str) -> types.ModuleType:
    """``llome_jax/lm/sample.py`` as it was at git revision ``rev``, imported as a module."""
    root = pathlib.Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:llome_jax/lm/sample.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"sample_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, f"{rev}:llome_jax/lm/sample.py", "exec"), module.__dict__)
    return module


def bf16_drift(model, prompts, mask, new_tokens: int, sample_keys: int = 4) -> dict:
    """fp32 vs bf16 generation (``SampleConfig.compute_dtype``) on the same prompts and keys.

    For greedy decoding and for ``sample_keys`` sampled runs (T = 1, no top-k; the same key, so
    the same Gumbel noise in both dtypes) of ``new_tokens`` tokens from ``prompts [B, P]``:

    * ``frac_tokens_differ``: generated positions whose token differs (after a row's first
      difference the contexts differ too, so later positions count as well);
    * ``rows_identical``: rows whose whole output is the same;
    * ``max_abs_dlogprob`` / ``mean_abs_dlogprob``: ``|log p_bf16 - log p_fp32|`` of the chosen
      token (``logprobs_raw``, log-softmax of the raw logits) over the positions before a row's
      first difference (same context, same token);
    * ``greedy_margin_*``: the fp32 top-1 minus top-2 logit at each greedy step (how close the
      decisions were), from a full forward over prompt + output.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from llome_jax.lm.sample import SampleConfig, generate
    from llome_jax.training.step import position_ids_from_mask

    def run(dtype, key, temperature):
        cfg = SampleConfig(max_new_tokens=new_tokens, top_k=None, compute_dtype=dtype)
        out = generate(key, model, prompts, mask, cfg, temperature=temperature)
        return np.asarray(out.tokens), np.asarray(out.logprobs_raw)

    def compare(key, temperature) -> dict:
        t32, lp32 = run(None, key, temperature)
        t16, lp16 = run("bfloat16", key, temperature)
        differ = t32 != t16
        same_prefix = np.cumsum(differ, axis=1) == 0
        delta = np.abs(lp16 - lp32)[same_prefix]
        return {
            "tokens": differ.size,
            "differ": int(differ.sum()),
            "rows_identical": int((~differ.any(axis=1)).sum()),
            "rows": differ.shape[0],
            "deltas": delta.tolist(),
            "fp32_tokens": t32,
        }

    greedy = compare(jax.random.key(0), 0.0)
    sampled = [compare(jax.random.key(1 + k), 1.0) for k in range(sample_keys)]
    full_ids = np.concatenate([prompts, greedy["fp32_tokens"]], axis=1)
    full_mask = np.concatenate([mask, np.ones_like(greedy["fp32_tokens"])], axis=1)
    logits = np.asarray(
        model(jnp.asarray(full_ids), jnp.asarray(full_mask), position_ids_from_mask(full_mask))
    )[:, prompts.shape[1] - 1 : -1]
    top2 = np.sort(logits, axis=-1)[..., -2:]
    margin = (top2[..., 1] - top2[..., 0]).reshape(-1)

    def summary(parts: list[dict]) -> dict:
        deltas = np.asarray([d for part in parts for d in part["deltas"]], np.float64)
        tokens = sum(part["tokens"] for part in parts)
        return {
            "tokens": tokens,
            "frac_tokens_differ": sum(part["differ"] for part in parts) / tokens,
            "rows_identical": f"{sum(p['rows_identical'] for p in parts)}/"
            f"{sum(p['rows'] for p in parts)}",
            "compared_logprobs": int(deltas.size),
            "max_abs_dlogprob": float(deltas.max()) if deltas.size else float("nan"),
            "mean_abs_dlogprob": float(deltas.mean()) if deltas.size else float("nan"),
        }

    return {
        "greedy": summary([greedy]),
        "sampled_T1": summary(sampled),
        "greedy_margin_min": float(margin.min()),
        "greedy_margin_median": float(np.median(margin)),
    }


def _drift_main(args: argparse.Namespace) -> None:
    import jax
    import numpy as np
    from flax import nnx

    from llome_jax.lm import convert
    from llome_jax.lm.pythia import Pythia, PythiaConfig, num_parameters

    fixture = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pythia_tiny"
    models = {"pythia_tiny fixture": convert.load_hf(fixture)}
    config = PythiaConfig.preset(args.preset)
    models[f"{args.preset} random init"] = nnx.jit(lambda: Pythia(config, rngs=nnx.Rngs(0)))()
    rows = {}
    for name, model in models.items():
        rng = np.random.default_rng(0)
        vocab = min(model.config.vocab_size, 50277)
        prompts = rng.integers(1, vocab, (2, args.drift_prompt)).astype(np.int32)
        mask = np.ones_like(prompts)
        mask[1, : args.drift_prompt // 4] = 0  # one left-padded row
        prompts[mask == 0] = 0
        start = time.perf_counter()
        row = bf16_drift(model, prompts, mask, args.drift_tokens)
        row.update(
            parameters=num_parameters(model),
            prompt=args.drift_prompt,
            new_tokens=args.drift_tokens,
            seconds=time.perf_counter() - start,
        )
        rows[name] = row
        print(json.dumps({name: row}), flush=True)
    out = pathlib.Path(args.out).with_name("pythia_bf16_drift.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"jax": jax.__version__, "backend": jax.default_backend(), "machine": platform.machine()}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


def paper_chunk(args: argparse.Namespace) -> dict:
    """One refinement chunk per dtype in ``args.chunk_dtypes`` (see the module docstring).

    The device's ``peak_bytes_in_use`` is a process-wide high-water mark, so the dtypes run in
    the given order (default bf16 first) and each row's ``peak_gib`` is the peak so far; the
    compiled program's own memory (``compiled_*_gib``) is per dtype. ``tokens_identical`` compares
    each dtype's first call with the first dtype's (same key).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _report import compiled_memory_gib  # benchmarks/_report.py
    from flax import nnx

    from llome_jax.llome.presets import preset
    from llome_jax.lm.pythia import Pythia, PythiaConfig, num_parameters
    from llome_jax.lm.sample import SampleConfig, _jitted_core, split_for_generation

    config = PythiaConfig.preset(args.preset)
    t0 = time.perf_counter()
    model = nnx.jit(lambda: Pythia(config, rngs=nnx.Rngs(0)))()
    jax.block_until_ready(nnx.state(model))
    init_seconds = time.perf_counter() - t0
    rows_b = args.chunk_rows or preset("paper", weights="(random: none read)").refine.batch_size
    vocab = min(config.vocab_size, 50277)
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(1, vocab, (rows_b, args.chunk_prompt), dtype=np.int32))
    mask = jnp.ones_like(prompt)
    temperature = jnp.ones((rows_b,), jnp.float32)
    first_tokens = None
    out = []
    for dtype in [d.strip() for d in args.chunk_dtypes.split(",") if d.strip()]:
        sample = SampleConfig(
            max_new_tokens=args.chunk_new,
            top_k=None,
            vocab_limit=vocab,
            compute_dtype=None if dtype == "float32" else dtype,
        )
        graphdef, state = split_for_generation(model, sample)
        t0 = time.perf_counter()
        compiled = _jitted_core.lower(
            graphdef, state, jax.random.key(0), prompt, mask, temperature, sample
        ).compile()
        compile_seconds = time.perf_counter() - t0
        times, tokens = [], None
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            gen = compiled(state, jax.random.key(0), prompt, mask, temperature)
            jax.block_until_ready(gen)
            times.append(time.perf_counter() - t0)
            tokens = np.asarray(gen.tokens) if rep == 0 else tokens
        first_tokens = tokens if first_tokens is None else first_tokens
        seconds = statistics.median(times[1:]) if args.reps else times[0]
        stats = jax.devices()[0].memory_stats() or {}
        row = {
            "dtype": dtype,
            "model": args.preset,
            "parameters": num_parameters(model),
            "rows": rows_b,
            "prompt_tokens": args.chunk_prompt,
            "new_tokens": args.chunk_new,
            "init_seconds": init_seconds,
            "compile_seconds": compile_seconds,
            "first_call_seconds": times[0],
            "call_seconds": seconds,
            "call_seconds_all": times[1:],
            "new_tokens_per_second": rows_b * args.chunk_new / seconds,
            "tokens_identical_to_first_dtype": float(np.mean(tokens == first_tokens)),
            **compiled_memory_gib(compiled),
            "peak_gib_so_far": stats.get("peak_bytes_in_use", float("nan")) / 2**30,
            "device": str(jax.devices()[0].device_kind),
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return {"meta": {"jax": jax.__version__, "backend": jax.default_backend()}, "rows": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="70m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=32, help="decoding prompt length")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--train-reps", type=int, default=3)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument(
        "--previous-sample",
        metavar="REV",
        help="also time llome_jax/lm/sample.py at this git revision (interleaved, same model)",
    )
    parser.add_argument(
        "--out", default=str(pathlib.Path(__file__).parent / "results" / "pythia_speed.json")
    )
    parser.add_argument(
        "--bf16-drift",
        action="store_true",
        help="only measure fp32 vs bf16 generation (tokens, log-probs) on the tiny fixture and "
        "a random --preset model; no torch",
    )
    parser.add_argument("--drift-prompt", type=int, default=8, help="--bf16-drift prompt length")
    parser.add_argument("--drift-tokens", type=int, default=8, help="--bf16-drift new tokens")
    parser.add_argument(
        "--paper-chunk",
        action="store_true",
        help="only time one paper-preset refinement chunk per --chunk-dtypes entry; no torch",
    )
    parser.add_argument("--chunk-dtypes", default="bfloat16,float32")
    parser.add_argument("--chunk-rows", type=int, default=None, help="default refine.batch_size")
    parser.add_argument("--chunk-prompt", type=int, default=67)
    parser.add_argument("--chunk-new", type=int, default=73)
    args = parser.parse_args()
    if args.bf16_drift:
        _drift_main(args)
        return
    if args.paper_chunk:
        report = paper_chunk(args)
        default = pathlib.Path(__file__).parent / "results" / "pythia_speed.json"
        out = pathlib.Path(args.out)
        out = out.with_name("pythia_paper_chunk.json") if out == default else out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {out}")
        return
    previous = _sample_module_at(args.previous_sample) if args.previous_sample else None

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import transformers
    from flax import nnx

    from llome_jax.lm import convert
    from llome_jax.lm.pythia import Pythia, PythiaConfig, num_parameters
    from llome_jax.lm.sample import SampleConfig, generate
    from llome_jax.training.loss_registry import LOSSES, default_params
    from llome_jax.training.optimizer import OptimizerConfig, make_optimizer
    from llome_jax.training.step import TrainBatch, init_train_state, make_train_step

    torch.set_num_threads(os.cpu_count() or 1)
    config = PythiaConfig.preset(args.preset)
    model = nnx.jit(lambda: Pythia(config, rngs=nnx.Rngs(0)))()
    hf_cfg = convert.hf_config_dict(config, spelling="transformers5")
    tmodel = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**hf_cfg)).eval()
    exported = convert.hf_tensors(model, head_name="lm_head.weight")
    state = {k: torch.from_numpy(v.copy()) for k, v in exported.items()}
    missing, unexpected = tmodel.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m or "masked_bias" in m for m in missing), missing
    print(
        f"Pythia-{args.preset}: {num_parameters(model):,} parameters; torch attention "
        f"implementation: {tmodel.config._attn_implementation}; {os.cpu_count()} CPUs"
    )

    big = PythiaConfig.preset("2.8b")
    big_count = num_parameters(nnx.eval_shape(lambda: Pythia(big, rngs=nnx.Rngs(0))))
    print(
        f"Pythia-2.8B built abstractly (nnx.eval_shape): {big_count:,} parameters, "
        f"{4 * big_count / 1e9:.1f} GB in fp32"
    )

    b, t = args.batch, args.seq
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50000, (b, t)).astype(np.int32)
    mask = np.ones_like(ids)
    results: dict[str, dict] = {}

    # ---------------------------------------------------------------- forward
    graphdef, params = nnx.split(model)

    @jax.jit
    def forward(params, ids, mask):
        return nnx.merge(graphdef, params)(ids, mask)

    jids, jmask = jnp.asarray(ids), jnp.asarray(mask)
    start = time.perf_counter()
    ref = np.asarray(forward(params, jids, jmask))
    compile_fwd = time.perf_counter() - start
    tids, tmask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask)
    with torch.no_grad():
        diff = float(np.abs(tmodel(tids, attention_mask=tmask).logits.numpy() - ref).max())
    print(f"forward parity: max |logit diff| = {diff:.2e}")

    def ours_fwd():
        forward(params, jids, jmask).block_until_ready()

    def torch_fwd():
        with torch.no_grad():
            return tmodel(tids, attention_mask=tmask).logits

    times = _median_interleaved({"ours": ours_fwd, "torch": torch_fwd}, args.reps)
    results["forward"] = {
        "shape": [b, t],
        "ours_s": statistics.median(times["ours"]),
        "torch_s": statistics.median(times["torch"]),
        "ours_compile_s": compile_fwd,
        "max_abs_logit_diff": diff,
        "all_s": times,
    }

    # ---------------------------------------------------------------- train step
    if not args.skip_train:
        target = np.zeros_like(ids)
        target[:, t // 2 :] = 1
        batch = TrainBatch.create(ids, target, mask)
        batch_full_head = TrainBatch.create(ids, target, mask, target_window=None)
        opt = make_optimizer(
            OptimizerConfig(learning_rate=1e-5, total_steps=1000, weight_decay=0.0)
        )
        step = make_train_step(LOSSES["sft"], model, opt)
        hparams = default_params("sft")
        train_state = [init_train_state(jax.random.key(0), model, opt) for _ in range(2)]
        start = time.perf_counter()
        train_state[0], metrics = step(train_state[0], batch, hparams)
        jax.block_until_ready(metrics)
        compile_train = time.perf_counter() - start
        train_state[1], metrics_full = step(train_state[1], batch_full_head, hparams)
        loss_diff = abs(float(metrics["loss"]) - float(metrics_full["loss"]))
        print(f"train step: |loss(window) - loss(full head)| = {loss_diff:.2e}")

        def ours_train():
            train_state[0], m = step(train_state[0], batch, hparams)
            jax.block_until_ready(m)

        def ours_train_full_head():
            train_state[1], m = step(train_state[1], batch_full_head, hparams)
            jax.block_until_ready(m)

        tmodel.train()
        topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-5, weight_decay=0.0)
        labels = tids.clone()
        labels[:, : t // 2] = -100

        def torch_train():
            topt.zero_grad(set_to_none=True)
            logits = tmodel(tids, attention_mask=tmask).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
            topt.step()

        torch_train()  # warm-up (allocates optimizer state)
        times = _median_interleaved(
            {"ours": ours_train, "torch": torch_train, "ours_full_head": ours_train_full_head},
            args.train_reps,
        )
        tmodel.eval()
        results["train_step"] = {
            "shape": [b, t],
            "target_window": batch.target_window,
            "ours_s": statistics.median(times["ours"]),
            "torch_s": statistics.median(times["torch"]),
            "ours_full_head_s": statistics.median(times["ours_full_head"]),
            "first_step_loss_diff": loss_diff,
            "ours_compile_s": compile_train,
            "all_s": times,
        }
        # torch's weights changed: reload ours for the decoding comparison
        tmodel.load_state_dict(state, strict=False)

    # ---------------------------------------------------------------- decoding
    p, n = args.prompt, args.new_tokens
    prompts = rng.integers(1, 50000, (b, p)).astype(np.int32)
    pmask = np.ones_like(prompts)
    for i in range(b):
        pmask[i, : i % 4] = 0
    prompts[pmask == 0] = 0
    greedy_cfg = SampleConfig(max_new_tokens=n, top_k=50)
    key = jax.random.key(0)
    start = time.perf_counter()
    gen = generate(key, model, prompts, pmask, greedy_cfg, temperature=0.0)
    jax.block_until_ready(gen)
    compile_dec = time.perf_counter() - start
    generate(key, model, prompts, pmask, greedy_cfg, temperature=1.0).tokens.block_until_ready()
    tprompts, tpmask = torch.tensor(prompts, dtype=torch.long), torch.tensor(pmask)

    def hf_generate():
        with torch.no_grad():
            return tmodel.generate(
                tprompts,
                attention_mask=tpmask,
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=n,
                pad_token_id=0,
                eos_token_id=None,
            )

    hf_tokens = hf_generate()[:, p:].numpy()
    same = float((hf_tokens == np.asarray(gen.tokens)).mean())
    print(f"greedy decoding: {same:.1%} of tokens identical to HF generate")

    def ours_greedy():
        generate(key, model, prompts, pmask, greedy_cfg, temperature=0.0).tokens.block_until_ready()

    def ours_sample():
        generate(key, model, prompts, pmask, greedy_cfg, temperature=1.0).tokens.block_until_ready()

    decoders = {"ours": ours_greedy, "torch": hf_generate, "ours_sample": ours_sample}
    if args.previous_sample:
        previous_cfg = previous.SampleConfig(max_new_tokens=n, top_k=50)
        fields = ("tokens", "logprobs", "logprobs_raw", "lengths", "stopped")
        for temperature in (0.0, 1.0):
            now = generate(key, model, prompts, pmask, greedy_cfg, temperature=temperature)
            then = previous.generate(key, model, prompts, pmask, previous_cfg, temperature)
            same_bits = all(
                np.array_equal(np.asarray(getattr(now, f)), np.asarray(getattr(then, f)))
                for f in fields
            )
            print(f"T = {temperature}: identical to {args.previous_sample}: {same_bits}")
            results.setdefault("previous_identical", {})[str(temperature)] = same_bits

        def previous_greedy():
            previous.generate(
                key, model, prompts, pmask, previous_cfg, 0.0
            ).tokens.block_until_ready()

        def previous_sample():
            previous.generate(
                key, model, prompts, pmask, previous_cfg, 1.0
            ).tokens.block_until_ready()

        decoders.update(previous=previous_greedy, previous_sample=previous_sample)
    times = _median_interleaved(decoders, args.reps)
    results["decode"] = {
        "batch": b,
        "prompt": p,
        "new_tokens": n,
        "ours_s": statistics.median(times["ours"]),
        "torch_s": statistics.median(times["torch"]),
        "ours_sample_s": statistics.median(times["ours_sample"]),
        "ours_compile_s": compile_dec,
        "greedy_token_agreement": same,
        "all_s": times,
    }
    if args.previous_sample:
        results["decode"]["previous_rev"] = args.previous_sample
        results["decode"]["previous_s"] = statistics.median(times["previous"])
        results["decode"]["previous_sample_s"] = statistics.median(times["previous_sample"])

    # ---------------------------------------------------------------- report
    def row(name: str, work: int, cell: dict, ours_key: str, unit: str, target: float | None):
        """(name, ours/s, torch/s, speed-up, unit, target) from a cell's median seconds."""
        ours_s, torch_s = cell[ours_key], cell["torch_s"]
        return (name, work / ours_s, work / torch_s, torch_s / ours_s, unit, target)

    fw, de = results["forward"], results["decode"]
    rows = [row(f"forward {b}x{t}", b * t, fw, "ours_s", "tokens/s", 1.5)]
    if "train_step" in results:
        tr = results["train_step"]
        rows.append(row(f"train step {b}x{t} (SFT, AdamW)", b * t, tr, "ours_s", "tokens/s", 1.5))
        rows.append(
            row(
                "  same step, head on all positions",
                b * t,
                tr,
                "ours_full_head_s",
                "tokens/s",
                None,
            )
        )
    rows.append(row(f"greedy decode {b}x{n} new", b * n, de, "ours_s", "new tokens/s", 3.0))
    rows.append(
        row(f"sampled decode {b}x{n} (T=1,k=50)", b * n, de, "ours_sample_s", "new tokens/s", None)
    )
    if args.previous_sample:
        for label, key_now, key_then in (
            ("greedy", "ours_s", "previous_s"),
            ("sampled", "ours_sample_s", "previous_sample_s"),
        ):
            print(
                f"{label} decode at {args.previous_sample}: {b * n / de[key_then]:.1f} new tokens/s,"
                f" now {b * n / de[key_now]:.1f} ({de[key_then] / de[key_now]:.2f}x)"
            )
    print(f"\n{'measurement':38s} {'ours':>12s} {'torch':>12s} {'speed-up':>9s}  unit (target)")
    for name, ours, theirs, ratio, unit, target in rows:
        goal = f">= {target}x" if target else ""
        print(f"{name:38s} {ours:12.1f} {theirs:12.1f} {ratio:8.2f}x  {unit} {goal}")
    print(
        f"compile (excluded above): forward {fw['ours_compile_s']:.1f}s, "
        + (
            f"train step {results['train_step']['ours_compile_s']:.1f}s, "
            if "train_step" in results
            else ""
        )
        + f"decode {de['ours_compile_s']:.1f}s"
    )
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "preset": args.preset,
        "parameters": num_parameters(model),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "jax": jax.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_attn_implementation": tmodel.config._attn_implementation,
        "load_average": os.getloadavg(),
        "pythia_2p8b_parameters": big_count,
    }
    rows_json = [dict(zip(("name", "ours", "torch", "speedup", "unit", "target"), r)) for r in rows]
    out.write_text(json.dumps({"meta": meta, "results": results, "table": rows_json}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
