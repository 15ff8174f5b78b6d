"""Language models: Pythia (GPT-NeoX) in Flax NNX, HF conversion, tokenizer, sampling, log-probs."""

from llome_jax.moved import moved_names

#: ``llome_jax.lm.from_pretrained`` is :func:`llome_jax.lm.convert.from_pretrained` (imported on
#: first use, with a one-time note of the new path).
__getattr__ = moved_names(__name__, {"from_pretrained": "llome_jax.lm.convert"})
