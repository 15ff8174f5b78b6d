"""Language models: Pythia (GPT-NeoX) in Flax NNX, HF conversion, tokenizer, sampling, log-probs."""
