"""Rebuild ``tests/fixtures/pythia_tiny``: a tiny random GPT-NeoX checkpoint and transformers' outputs.

The committed fixture lets ``tests/test_pythia.py`` check logit parity with
``transformers.GPTNeoXForCausalLM`` on machines without torch. Every weight (LayerNorms included) is
perturbed away from the default init, which would hide GELU / LayerNorm mistakes.

Written files:
  config.json          released-Pythia spelling (``rotary_pct``, ``rotary_emb_base``)
  model.safetensors    float32 weights as ``save_pretrained`` writes them (head ``embed_out.weight``)
  input_ids.npy        int32 [2, 12], row 1 left-padded by 4 tokens
  attention_mask.npy   int32 [2, 12]
  logits.npy           float32 [2, 12, V] ``model(input_ids, attention_mask=mask).logits``
  greedy.json          HF ``generate`` (greedy, 8 new tokens): tokens and
                       ``compute_transition_scores(normalize_logits=True)``

Usage (needs torch and transformers, i.e. the ``hf`` extra)::

    python scripts/make_pythia_fixture.py [--out tests/fixtures/pythia_tiny]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile

import numpy as np

SEED = 1234
VOCAB = 96
HIDDEN = 32
LAYERS = 2
HEADS = 4
INTERMEDIATE = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = pathlib.Path(__file__).resolve().parents[1]
    parser.add_argument("--out", default=str(root / "tests" / "fixtures" / "pythia_tiny"))
    args = parser.parse_args()

    import torch
    import transformers

    torch.manual_seed(SEED)
    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        rotary_pct=0.5,
        rotary_emb_base=10000,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = transformers.GPTNeoXForCausalLM(config).eval()
    with torch.no_grad():
        for _, param in model.named_parameters():
            scale = 0.3 if param.ndim == 1 else 0.08
            param.add_(torch.randn_like(param) * scale)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        (out / "model.safetensors").write_bytes(
            (pathlib.Path(tmp) / "model.safetensors").read_bytes()
        )
    hub_config = {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INTERMEDIATE,
        "hidden_act": "gelu",
        "rotary_pct": 0.5,
        "rotary_emb_base": 10000,
        "max_position_embeddings": 64,
        "layer_norm_eps": 1e-5,
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
    (out / "config.json").write_text(json.dumps(hub_config, indent=2) + "\n")

    rng = np.random.default_rng(SEED)
    ids = rng.integers(1, VOCAB, (2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, :4] = 0
    ids[mask == 0] = 0
    with torch.no_grad():
        logits = model(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
        gen = model.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            do_sample=False,
            max_new_tokens=8,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
            eos_token_id=None,
        )
        scores = model.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)
    np.save(out / "input_ids.npy", ids)
    np.save(out / "attention_mask.npy", mask.astype(np.int32))
    np.save(out / "logits.npy", logits.astype(np.float32))
    greedy = {
        "max_new_tokens": 8,
        "tokens": gen.sequences[:, ids.shape[1] :].tolist(),
        "logprobs": scores.numpy().astype(float).tolist(),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    (out / "greedy.json").write_text(json.dumps(greedy, indent=1) + "\n")
    print(f"wrote {out}: max |logit| {np.abs(logits).max():.3f}")


if __name__ == "__main__":
    main()
