"""``llome-jax convert-pythia HF_DIR OUT_DIR``: HF GPT-NeoX checkpoint -> orbax checkpoint."""

from __future__ import annotations

import argparse

NAME = "convert-pythia"
HELP = (
    "Convert a local Hugging Face Pythia/GPT-NeoX checkpoint (config.json + safetensors) into an "
    "orbax checkpoint that llome_jax.lm.convert.from_pretrained loads faster."
)
ORDER = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hf_dir", help="HF checkpoint directory (config.json + model.safetensors)")
    parser.add_argument("out_dir", help="output directory (llome_pythia.json + params/)")
    parser.add_argument(
        "--param-dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="stored parameter dtype (default float32, the library's training precision)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty OUT_DIR")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip reloading OUT_DIR and comparing logits"
    )


def run(args: argparse.Namespace) -> int:
    import pathlib
    import time

    import jax.numpy as jnp
    import numpy as np

    from llome_jax.lm import convert, pythia

    start = time.perf_counter()
    out = pathlib.Path(args.out_dir)
    if out.exists() and any(out.iterdir()) and not args.force:
        raise ValueError(f"{out} exists and is not empty (use --force to overwrite)")
    model = convert.load_hf(args.hf_dir, param_dtype=args.param_dtype)
    loaded = time.perf_counter()
    convert.save_converted(model, out, source=args.hf_dir, overwrite=args.force)
    saved = time.perf_counter()
    count = pythia.num_parameters(model)
    print(
        f"converted {args.hf_dir} -> {out}: {count:,} parameters ({args.param_dtype}); "
        f"read {loaded - start:.1f}s, wrote {saved - loaded:.1f}s"
    )
    if not args.no_verify:
        reloaded = convert.from_pretrained(out)
        ids = jnp.arange(8, dtype=jnp.int32)[None] % model.config.vocab_size
        diff = float(np.max(np.abs(np.asarray(model(ids)) - np.asarray(reloaded(ids)))))
        if diff != 0.0:
            raise ValueError(f"verification failed: reloaded logits differ by {diff}")
        print("verified: reloaded checkpoint gives identical logits")
    return 0
