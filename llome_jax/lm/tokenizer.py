"""The tokenizers of LLOME, both :class:`transformers.PreTrainedTokenizerFast`:

* :func:`make_ehrlich_tokenizer`: a small word-level vocabulary built with ``tokenizers``::

      0 <pad>  1 <eos>  2 <unk>  3 <inc>  4 [  5 ]  6 ,  7 \\n  8.. "0" .. "v-1"

  Whitespace other than ``"\\n"`` only separates words. A prompt is ``2L + 3`` tokens
  (``<inc> [ x0 , x1 , ... ] \\n``), a target ``2L + 1``. ``tokenizer.decode`` joins tokens with
  spaces (``"[ 3 , 1 ]"``), which is the same JSON.
* :func:`load_tokenizer`: any ``tokenizer.json`` in a local directory (e.g. Pythia's GPT-NeoX BPE),
  read offline.

The text they tokenize is :mod:`llome_jax.lm.text_format`;
:class:`~llome_jax.lm.codec.SequenceCodec` turns sequences into token ids and back with either.
"""

from __future__ import annotations

import os

import numpy as np

# transformers warns on import that PyTorch is missing, which this package never needs; only
# that advisory kind of warning is silenced (not errors), and a user's own setting wins
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
import transformers
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from llome_jax.lm.text_format import STRUCTURE_TOKENS

__all__ = [
    "EHRLICH_SPECIAL_TOKENS",
    "load_tokenizer",
    "make_ehrlich_tokenizer",
]

#: Special tokens of the Ehrlich tokenizer, in id order.
EHRLICH_SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------
def make_ehrlich_tokenizer(num_states: int) -> transformers.PreTrainedTokenizerFast:
    """The Ehrlich tokenizer for states ``0 .. num_states - 1`` (module docstring for the layout).

    Built with ``tokenizers`` (WordLevel model; pre-tokenizer isolating ``[ ] , \\n`` and dropping
    other whitespace), wrapped as a ``PreTrainedTokenizerFast`` with ``pad_token="<pad>"``,
    ``eos_token="<eos>"``, ``unk_token="<unk>"``. ``save_pretrained(dir)`` / :func:`load_tokenizer`
    round-trip it offline.

    Example:
      >>> tok = make_ehrlich_tokenizer(8)
      >>> tok("<inc> [3, 1]\\n")["input_ids"]
      [3, 4, 11, 6, 9, 5, 7]
    """
    if (
        isinstance(num_states, bool)
        or not isinstance(num_states, int | np.integer)
        or num_states < 1
    ):
        raise ValueError(f"num_states must be a positive integer; got {num_states!r}.")
    words = [*EHRLICH_SPECIAL_TOKENS, *STRUCTURE_TOKENS, *(str(s) for s in range(num_states))]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[\[\],\n]"), "isolated"),
            pre_tokenizers.Split(Regex(r"[^\S\n]+"), "removed"),
        ]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | os.PathLike) -> transformers.PreTrainedTokenizerFast:
    """Load a tokenizer from a local directory (or a ``tokenizer.json`` file), never downloading.

    Works for a saved Ehrlich tokenizer and for a real Pythia (GPT-NeoX) tokenizer directory. When
    the tokenizer has no pad token, the EOS token is used (Pythia: ``<|endoftext|>`` = 0, as the
    authors' code).

    Raises:
      FileNotFoundError: no ``tokenizer.json`` at ``path``.
      ValueError: the file is not a readable tokenizer.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        file = os.path.join(path, "tokenizer.json")
    else:
        file = path
    if not os.path.isfile(file):
        raise FileNotFoundError(
            f"no tokenizer.json at {path!r}: pass a local directory holding tokenizer.json "
            "(e.g. a Pythia checkpoint directory, or one written by save_pretrained); nothing is "
            "downloaded."
        )
    try:
        if os.path.isdir(path):
            tok = transformers.PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
        else:
            tok = transformers.PreTrainedTokenizerFast(tokenizer_file=file)
    except Exception as exc:  # tokenizers raises plain Exceptions on malformed JSON
        raise ValueError(f"could not read the tokenizer at {file!r}: {exc}") from exc
    if tok.eos_token is None and "<|endoftext|>" in tok.get_vocab():
        tok.eos_token = "<|endoftext|>"
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok
