"""The text format of LLOME: Ehrlich sequences <-> prompts and targets, and parsing outputs.

Text format (paper App. "Algorithms"; byte for byte the authors' code, docs/design/refinement.md)::

    prompt = "<inc> " + json.dumps(x) + "\\n"       e.g. "<inc> [3, 1, 5]\\n"
    target =            json.dumps(y)               e.g. "[3, 1, 6]"

``json.dumps``' default ``", "`` separators, no BOS/EOS (SFT/MargE; DPO may append EOS). The model
is prompted with ``prompt`` and its output is read up to and including the first ``]`` *token*
(as the authors' code cuts it), parsed as JSON and validated (a list of ``L`` integers in
``[0, v)``).

A *compact* variant for the Ehrlich tokenizer (``SequenceCodec(..., separators=False)``) drops the
``,`` tokens: ``<inc> [ 3 1 5 ] \n`` then ``[ 3 1 6 ]``, ``L + 4`` and ``L + 2`` tokens instead of
``2L + 3`` and ``2L + 1``. The commas carry no information for a model trained from scratch on
this vocabulary (they sit at fixed positions), so the compact format halves the tokens of every
training example and the decoding steps of every generation. It is not the paper's format (which a
pretrained model's tokenizer needs); the text path reads it as JSON after inserting the commas.

The structure tokens of the format (:data:`STRUCTURE_TOKENS`) are words of the Ehrlich
tokenizer (:mod:`llome_jax.lm.tokenizer`); :class:`~llome_jax.lm.codec.SequenceCodec` turns the
format into token ids and back. This module needs neither ``transformers`` nor ``tokenizers``.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "INVALID_JSON",
    "INVALID_LENGTH",
    "INVALID_NOT_INTEGER",
    "INVALID_NOT_LIST",
    "INVALID_RANGE",
    "INVALID_TOKEN",
    "PROMPT_TAG",
    "STRUCTURE_TOKENS",
    "ParsedSequence",
    "format_prompt",
    "format_target",
    "parse_sequence",
]

#: The control code opening every prompt ("increase": propose a better sequence).
PROMPT_TAG = "<inc>"
#: The format's structure tokens, in the Ehrlich tokenizer's id order (after its special tokens).
STRUCTURE_TOKENS = (PROMPT_TAG, "[", "]", ",", "\n")

# Error classes of parse_sequence (the prefix of its error string).
INVALID_JSON = "invalid JSON"
INVALID_NOT_LIST = "not a list"
INVALID_NOT_INTEGER = "non-integer element"
INVALID_LENGTH = "wrong length"
INVALID_RANGE = "value out of range"
#: A generated token id outside the tokenizer's vocabulary (e.g. Pythia's padded vocab rows).
INVALID_TOKEN = "token id outside the vocabulary"


# ---------------------------------------------------------------------------------------------
# Text format and parsing
# ---------------------------------------------------------------------------------------------
def _as_int_list(sequence: Any) -> list[int]:
    arr = np.asarray(sequence)
    if arr.ndim != 1:
        raise ValueError(f"sequence must be 1-D [L]; got shape {arr.shape}.")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"sequence must hold integers; got dtype {arr.dtype}.")
    return [int(v) for v in arr.tolist()]


def format_target(sequence: Any) -> str:
    """``json.dumps(list(sequence))``: ``"[3, 1, 5]"`` (the authors' target format).

    Example:
      >>> format_target([3, 1, 5])
      '[3, 1, 5]'
    """
    return json.dumps(_as_int_list(sequence))


def format_prompt(sequence: Any) -> str:
    """``"<inc> " + json.dumps(list(sequence)) + "\\n"`` (the authors' prompt format).

    Example:
      >>> format_prompt([3, 1, 5])
      '<inc> [3, 1, 5]\\n'
    """
    return f"{PROMPT_TAG} {format_target(sequence)}\n"


class ParsedSequence(NamedTuple):
    """Result of :func:`parse_sequence`: exactly one of the fields is ``None``.

    Attributes:
      sequence: int32 ``[L]`` when valid.
      error: the reason it is invalid; starts with one of the ``INVALID_*`` constants.
    """

    sequence: np.ndarray | None
    error: str | None


def parse_sequence(text: str, length: int, num_states: int) -> ParsedSequence:
    """Parse generated text into an Ehrlich sequence, validating it (the authors' rule).

    Valid iff ``json.loads(text)`` succeeds, gives a list, every element ``e`` is a number with
    ``int(e) == e`` (so ``3.0`` is accepted, as the reference; ``true`` is rejected, unlike the
    reference's ``int(True) == True``), the list has ``length`` elements and every value lies in
    ``[0, num_states)``. Never raises on bad text.

    Args:
      text: the decoded output (already truncated at the first ``]`` token).
      length: ``L``.
      num_states: ``v``.

    Returns:
      :class:`ParsedSequence`.

    Example:
      >>> parse_sequence("[1, 0, 2.0]", 3, 4).sequence.tolist()
      [1, 0, 2]
      >>> parse_sequence("[1, 0]", 3, 4).error
      'wrong length: 2 elements, expected 3'
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return ParsedSequence(None, f"{INVALID_JSON}: {exc}")
    if not isinstance(value, list):
        return ParsedSequence(None, f"{INVALID_NOT_LIST}: got {type(value).__name__}")
    out = np.empty(len(value), np.int64)
    for i, e in enumerate(value):
        ok = isinstance(e, int | float) and not isinstance(e, bool)
        if ok and isinstance(e, float):
            ok = math.isfinite(e) and e == int(e)
        if not ok:
            return ParsedSequence(None, f"{INVALID_NOT_INTEGER}: element {i} is {e!r}")
        out[i] = int(e) if abs(e) < 2**62 else -1  # huge values are out of range anyway
    if len(value) != length:
        return ParsedSequence(None, f"{INVALID_LENGTH}: {len(value)} elements, expected {length}")
    bad = np.flatnonzero((out < 0) | (out >= num_states))
    if bad.size:
        i = int(bad[0])
        return ParsedSequence(
            None, f"{INVALID_RANGE}: element {i} is {value[i]!r}, not in [0, {num_states})"
        )
    return ParsedSequence(out.astype(np.int32), None)
