"""Ehrlich sequences <-> token ids: :class:`SequenceCodec`.

:class:`SequenceCodec` converts between integer arrays and token ids: a vectorised numpy path for
the Ehrlich tokenizer (no Python per sequence, ~122,000 generations per LLOME round) and a text
path (format -> tokenize; detokenize -> :func:`parse_sequence`) for any other tokenizer. On the
Ehrlich tokenizer both paths give identical results (tested).

The text format is :mod:`llome_jax.lm.text_format`, the tokenizers :mod:`llome_jax.lm.tokenizer`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from llome_jax.lm.text_format import (
    INVALID_JSON,
    INVALID_TOKEN,
    PROMPT_TAG,
    STRUCTURE_TOKENS,
    ParsedSequence,
    format_prompt,
    format_target,
    parse_sequence,
)

__all__ = [
    "SequenceCodec",
]


def _single_token(tokenizer: Any, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"the tokenizer must encode {text!r} as one token; got ids {ids}.")
    return int(ids[0])


def _is_word_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    try:
        return json.loads(backend.to_str())["model"]["type"] == "WordLevel"
    except (KeyError, ValueError, TypeError):
        return False


class SequenceCodec:
    """Ehrlich sequences <-> token ids for prompting, training and reading generations.

    Args:
      tokenizer: a ``PreTrainedTokenizerFast`` (:mod:`llome_jax.lm.tokenizer`:
        ``make_ehrlich_tokenizer`` or ``load_tokenizer``).
      num_states: ``v``.
      length: ``L``.
      max_new_tokens: generation budget; default ``2L + 1`` (exactly a target) on the Ehrlich
        tokenizer, the longest canonical target plus 8 otherwise (the reference used 512; longer
        outputs than a canonical target are never valid unless they contain whitespace).
      fast: force (``True``) or forbid (``False``) the vectorised path; default: used when the
        tokenizer is a word-level tokenizer with the Ehrlich vocabulary and a probe prompt
        encodes identically on both paths.
      separators: ``False`` for the compact format (:mod:`~llome_jax.lm.text_format`; Ehrlich
        tokenizer only): ``max_new_tokens`` defaults to ``L + 2`` and prompts are ``L + 4``
        tokens.

    Attributes:
      vocab_size: ``len(tokenizer)``.
      pad_token_id: the pad id (EOS if the tokenizer has no pad token).
      eos_token_id: the EOS id (``None`` if none).
      rbracket_id: the id of the ``]`` token: generation stops there and the output is cut there.
      stop_token_ids: ``(rbracket_id, eos_token_id)`` (without duplicates / ``None``).
      prompt_length: prompts are left-padded to at least this width (the longest canonical
        prompt: ``2L + 3`` on the Ehrlich tokenizer), so that the prompt shape, and thus the
        compiled sampler, stays fixed across refinement iterations.
      max_new_tokens: see above.
      fast: whether the vectorised path is used.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_states: int,
        length: int,
        *,
        max_new_tokens: int | None = None,
        fast: bool | None = None,
        separators: bool = True,
    ) -> None:
        if num_states < 1 or length < 1:
            raise ValueError(f"num_states and length must be >= 1; got {num_states}, {length}.")
        self.separators = bool(separators)
        self.tokenizer = tokenizer
        self.num_states = int(num_states)
        self.length = int(length)
        self.vocab_size = len(tokenizer)
        self.eos_token_id = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else (self.eos_token_id or 0))
        self.rbracket_id = _single_token(tokenizer, "]")
        stops = [self.rbracket_id]
        if self.eos_token_id is not None and self.eos_token_id != self.rbracket_id:
            stops.append(int(self.eos_token_id))
        self.stop_token_ids: tuple[int, ...] = tuple(stops)

        self.fast = False
        if fast is not False:
            self.fast = self._setup_fast()
            if fast and not self.fast:
                raise ValueError(
                    "fast=True needs a word-level tokenizer with the Ehrlich vocabulary "
                    f"(make_ehrlich_tokenizer(num_states>={num_states}))."
                )
        if not self.separators and not self.fast:
            raise ValueError(
                "the compact text format (separators=False) needs the Ehrlich tokenizer "
                "(make_ehrlich_tokenizer); a pretrained model's tokenizer uses the list format"
            )
        if self.fast:
            self.prompt_length = self._list_width() + 2
            worst_target = self._list_width()
        else:  # numbers are pre-tokenized separately: uniform sequences are the worst case
            uniform = [[s] * self.length for s in range(self.num_states)]
            self.prompt_length = max(map(len, self._encode_text(list(map(format_prompt, uniform)))))
            worst_target = max(map(len, self._encode_text(list(map(format_target, uniform)))))
        if max_new_tokens is None:
            max_new_tokens = worst_target if self.fast else worst_target + 8
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}.")
        self.max_new_tokens = int(max_new_tokens)

    # -- setup -------------------------------------------------------------------------------
    def _setup_fast(self) -> bool:
        vocab = self.tokenizer.get_vocab()
        needed = [*STRUCTURE_TOKENS, *(str(s) for s in range(self.num_states))]
        if not _is_word_level(self.tokenizer) or any(w not in vocab for w in needed):
            return False
        self._ids = {w: int(vocab[w]) for w in STRUCTURE_TOKENS}
        self._state_ids = np.array([vocab[str(s)] for s in range(self.num_states)], np.int32)
        # id -> state value (or -1) for every id of the vocabulary, including numbers >= v.
        table = np.full(self.vocab_size, -1, np.int64)
        for word, i in vocab.items():
            if word.isdigit() and word == str(int(word)) and 0 <= i < self.vocab_size:
                table[i] = int(word)
        self._id_to_state = table
        probe = (np.arange(self.length) * 7 + 3) % self.num_states
        # the text path writes the list format, so the probe compares list-format ids
        fast_ids = self._fast_prompt_ids(probe[None], separators=True)[0]
        text_ids = np.asarray(self._encode_text([format_prompt(probe)])[0])
        return bool(np.array_equal(fast_ids, text_ids))

    def _encode_text(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def _check_x(self, x: Any, what: str) -> np.ndarray:
        arr = np.asarray(x)
        if arr.ndim != 2 or arr.shape[1] != self.length:
            raise ValueError(f"{what} must be [B, {self.length}]; got shape {arr.shape}.")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{what} must hold integer states; got dtype {arr.dtype}.")
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_states):
            raise ValueError(
                f"{what} values must lie in [0, {self.num_states}); got [{arr.min()}, {arr.max()}]."
            )
        return arr.astype(np.int64)

    # -- fast path ---------------------------------------------------------------------------
    def _list_width(self) -> int:
        """Tokens of ``[ x0 , ... ]``: ``2L + 1``, or ``L + 2`` in the compact format."""
        return 2 * self.length + 1 if self.separators else self.length + 2

    def _fast_list_ids(self, x: np.ndarray, separators: bool | None = None) -> np.ndarray:
        """``[ x0 , x1 , ... ]`` as ids ``[B, 2L + 1]`` (compact: ``[ x0 x1 ... ]``, ``[B, L + 2]``;
        ``separators`` overrides the codec's format)."""
        b, n = x.shape
        if not (self.separators if separators is None else separators):
            out = np.empty((b, n + 2), np.int32)
            out[:, 0], out[:, -1] = self._ids["["], self._ids["]"]
            out[:, 1:-1] = self._state_ids[x]
            return out
        out = np.full((b, 2 * n + 1), self._ids[","], np.int32)
        out[:, 0] = self._ids["["]
        out[:, -1] = self._ids["]"]
        out[:, 1 : 2 * n : 2] = self._state_ids[x]
        return out

    def _fast_prompt_ids(self, x: np.ndarray, separators: bool | None = None) -> np.ndarray:
        b = x.shape[0]
        tag = np.full((b, 1), self._ids[PROMPT_TAG], np.int32)
        nl = np.full((b, 1), self._ids["\n"], np.int32)
        return np.concatenate([tag, self._fast_list_ids(x, separators), nl], axis=1)

    def _fast_decode(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b, n = tokens.shape
        m = self._list_width()
        if n < m:  # too short to hold a list of L numbers: pad (never valid)
            tokens = np.concatenate([tokens, np.full((b, m - n), -1, tokens.dtype)], axis=1)
            n = m
        keep = self.keep_mask(tokens)
        # JSON ignores whitespace: drop "\n" tokens, then match [ d , d , ... , d ] exactly.
        real = keep & (tokens != self._ids["\n"])
        count = real.sum(axis=1)
        order = np.argsort(~real, axis=1, kind="stable")[:, :m]
        c = np.take_along_axis(tokens, order, axis=1)
        in_vocab = (c >= 0) & (c < self.vocab_size)
        states = np.where(in_vocab, self._id_to_state[np.clip(c, 0, self.vocab_size - 1)], -1)
        nums = states[:, 1:m:2] if self.separators else states[:, 1 : m - 1]
        commas = c[:, 2 : m - 1 : 2] if self.separators else np.full((b, 0), self._ids[","])
        valid = (
            (count == m)
            & (c[:, 0] == self._ids["["])
            & (c[:, m - 1] == self._ids["]"])
            & np.all(commas == self._ids[","], axis=1)
            & np.all((nums >= 0) & (nums < self.num_states), axis=1)
        )
        seqs = np.where(valid[:, None], nums, 0).astype(np.int32)
        return seqs, valid

    # -- public API --------------------------------------------------------------------------
    def encode_prompts(self, x: Any) -> tuple[np.ndarray, np.ndarray]:
        """Prompts ``"<inc> [x]\\n"`` as left-padded ids and mask.

        Args:
          x: int ``[B, L]``.

        Returns:
          ``(ids int32 [B, P], mask int32 [B, P])`` with ``mask = 1`` on real tokens; padding
          (``pad_token_id``) on the left; ``P = prompt_length`` (more only if a prompt is longer).
          Ehrlich tokenizer: ``P = 2L + 3`` (compact: ``L + 4``), no padding.
        """
        x = self._check_x(x, "x")
        if self.fast:
            ids = self._fast_prompt_ids(x)
            return ids, np.ones_like(ids)
        rows = self._encode_text([format_prompt(r) for r in x])
        width = max([self.prompt_length, *map(len, rows)])
        ids = np.full((len(rows), width), self.pad_token_id, np.int32)
        mask = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            if r:
                ids[i, width - len(r) :] = r
                mask[i, width - len(r) :] = 1
        return ids, mask

    def encode_pairs(
        self, x: Any, y: Any, *, append_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Training sequences ``prompt(x) + target(y)``, right-padded.

        The target mask covers the target tokens (and the EOS with ``append_eos``; the reference
        appends none for SFT/MargE, TRL's DPO appends one). Text path: ``prompt + target`` is
        tokenized jointly and the boundary is ``len(tok(prompt))``, moved one token left if the
        last prompt token merged across it (the authors' MargE ``tokenize_row``).

        Args:
          x: int ``[B, L]`` inputs (the worse sequence).
          y: int ``[B, L]`` targets (the better sequence).
          append_eos: append ``eos_token_id`` to each target.

        Returns:
          ``(ids int32 [B, T], target_mask int32 [B, T], attention_mask int32 [B, T])``.
          Ehrlich tokenizer: ``T = 4L + 4 (+1)`` (compact: ``2L + 6``), no padding.
        """
        x = self._check_x(x, "x")
        y = self._check_x(y, "y")
        if x.shape != y.shape:
            raise ValueError(f"x and y must have the same shape; got {x.shape}, {y.shape}.")
        if append_eos and self.eos_token_id is None:
            raise ValueError("append_eos=True but the tokenizer has no EOS token.")
        eos = [] if not append_eos else [int(self.eos_token_id)]
        if self.fast:
            prompt = self._fast_prompt_ids(x)
            target = self._fast_list_ids(y)
            if eos:
                target = np.concatenate([target, np.full((len(y), 1), eos[0], np.int32)], 1)
            ids = np.concatenate([prompt, target], axis=1)
            tmask = np.zeros_like(ids)
            tmask[:, prompt.shape[1] :] = 1
            return ids, tmask, np.ones_like(ids)
        prompts = [format_prompt(r) for r in x]
        joint = self._encode_text([p + format_target(t) for p, t in zip(prompts, y)])
        alone = self._encode_text(prompts)
        width = max((len(j) + len(eos) for j in joint), default=0)
        ids = np.full((len(joint), width), self.pad_token_id, np.int32)
        tmask = np.zeros((len(joint), width), np.int32)
        amask = np.zeros((len(joint), width), np.int32)
        for i, (j, p) in enumerate(zip(joint, alone)):
            row = j + eos
            start = len(p) if j[: len(p)] == p else len(p) - 1
            ids[i, : len(row)] = row
            amask[i, : len(row)] = 1
            tmask[i, start : len(row)] = 1
        return ids, tmask, amask

    def keep_mask(self, tokens: Any) -> np.ndarray:
        """Which generated tokens form the output: up to and including the first ``]`` token.

        Rows without a ``]`` token keep everything up to and including their first stop token
        (EOS), or all tokens (the reference decodes all 512 then). The mean log-likelihood of an
        output is taken over these tokens.

        Args:
          tokens: int ``[B, N]`` generated ids (after the prompt).

        Returns:
          bool ``[B, N]``.
        """
        t = np.asarray(tokens)
        n = t.shape[1]
        pos = np.arange(n)
        rb = t == self.rbracket_id
        stop = np.isin(t, self.stop_token_ids)
        end = np.where(
            rb.any(axis=1),
            rb.argmax(axis=1),
            np.where(stop.any(axis=1), stop.argmax(axis=1), n - 1),
        )
        return pos[None, :] <= end[:, None]

    def decode(self, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        """Generated ids -> sequences and validity (the authors' cut-and-validate rule).

        The output is cut after the first ``]`` token (:meth:`keep_mask`), decoded without
        skipping special tokens and validated by :func:`parse_sequence`. The Ehrlich tokenizer's
        vectorised path implements the same rule on ids: after dropping ``"\\n"`` tokens (JSON
        whitespace) the kept tokens must be exactly ``[ d , d , ... , d ]`` with ``L`` numbers
        ``< v``.

        Args:
          tokens: int ``[B, N]``.

        Returns:
          ``(sequences int32 [B, L], valid bool [B])``; invalid rows hold zeros.
        """
        t = np.asarray(tokens)
        if t.ndim != 2:
            raise ValueError(f"tokens must be [B, N]; got shape {t.shape}.")
        t = t.astype(np.int64)
        if self.fast:
            return self._fast_decode(t)
        seqs = np.zeros((t.shape[0], self.length), np.int32)
        valid = np.zeros(t.shape[0], bool)
        for i, err in enumerate(self.decode_errors(t, _out=seqs)):
            valid[i] = err is None
        return seqs, valid

    def parse_text(self, text: str) -> ParsedSequence:
        """:func:`parse_sequence` of decoded text in this codec's format (the compact format's
        state tokens are read as a JSON list: commas are inserted between adjacent numbers)."""
        if not self.separators:
            if "," in text:
                return ParsedSequence(
                    None, f"{INVALID_JSON}: ',' is not part of the compact format"
                )
            text = _COMPACT_GAP.sub(", ", text)
        return parse_sequence(text, self.length, self.num_states)

    def decode_errors(self, tokens: Any, *, _out: np.ndarray | None = None) -> list[str | None]:
        """The text path's reason for each row being invalid (``None`` = valid), for diagnostics.

        Args:
          tokens: int ``[B, N]``.

        Returns:
          ``B`` strings starting with an ``INVALID_*`` constant, or ``None``.
        """
        t = np.asarray(tokens).astype(np.int64)
        keep = self.keep_mask(t)
        errors: list[str | None] = []
        rows, texts = [], []
        for i in range(t.shape[0]):
            row = t[i][keep[i]]
            if row.size and (row.min() < 0 or row.max() >= self.vocab_size):
                errors.append(f"{INVALID_TOKEN}: {row[(row < 0) | (row >= self.vocab_size)][0]}")
                continue
            errors.append(None)
            rows.append(i)
            texts.append(row.tolist())
        decoded = self.tokenizer.batch_decode(
            texts, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        for i, text in zip(rows, decoded):
            parsed = self.parse_text(text)
            errors[i] = parsed.error
            if parsed.error is None and _out is not None:
                _out[i] = parsed.sequence
        return errors


#: Whitespace between two numbers of the compact format (where the list format has ", ").
_COMPACT_GAP = re.compile(r"(?<=\d)\s+(?=\d)")
