"""Ehrlich tokenizer, text format, parsing/validation and the sequence codec (fast and text paths)."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from llome_jax.lm import text_format
from llome_jax.lm.codec import SequenceCodec
from llome_jax.lm.text_format import format_prompt, format_target, parse_sequence
from llome_jax.lm.tokenizer import load_tokenizer, make_ehrlich_tokenizer

V, L = 8, 5


@pytest.fixture(scope="module")
def tok():
    return make_ehrlich_tokenizer(V)


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A byte-level BPE trained offline, saved like a Pythia checkpoint's tokenizer files.

    GPT-NeoX layout: ``<|endoftext|>`` = 0 is BOS = EOS = UNK, no pad token, and the
    tokenizer_config.json names ``GPTNeoXTokenizer`` as EleutherAI's does.
    """
    rng = np.random.default_rng(0)
    corpus = [format_prompt(r) + format_target(r[::-1]) for r in rng.integers(0, 32, (300, 6))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("pythia")
    bpe.save(str(path / "tokenizer.json"))
    special = {t: "<|endoftext|>" for t in ("bos_token", "eos_token", "unk_token")}
    config = {"add_prefix_space": False, "tokenizer_class": "GPTNeoXTokenizer", **special}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    (path / "special_tokens_map.json").write_text(json.dumps(special))
    return path


# ------------------------------------------------------------------------------ text format
def test_format_strings_match_reference():
    assert format_prompt([3, 1, 30]) == "<inc> [3, 1, 30]\n"
    assert format_target(np.array([3, 1, 29])) == "[3, 1, 29]"
    # the reference builds them with json.dumps
    assert format_prompt([0, 7]) == "<inc> " + json.dumps([0, 7]) + "\n"
    with pytest.raises(ValueError, match="integers"):
        format_target(np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="1-D"):
        format_prompt(np.zeros((2, 2), int))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, V - 1), min_size=1, max_size=12))
def test_parse_format_round_trip(xs):
    parsed = parse_sequence(format_target(xs), len(xs), V)
    assert parsed.error is None
    assert parsed.sequence.dtype == np.int32
    assert parsed.sequence.tolist() == xs


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", text_format.INVALID_JSON),
        ("[1, 2, 3", text_format.INVALID_JSON),
        ("[1, 2 3]", text_format.INVALID_JSON),
        ("[1, 2, 3] <eos>", text_format.INVALID_JSON),
        ("<inc> [1, 2, 3]", text_format.INVALID_JSON),
        ('{"a": 1}', text_format.INVALID_NOT_LIST),
        ("3", text_format.INVALID_NOT_LIST),
        ('["1", 2, 3]', text_format.INVALID_NOT_INTEGER),
        ("[1.5, 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[true, 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[NaN, 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[1e400, 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[[1], 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[null, 2, 3]", text_format.INVALID_NOT_INTEGER),
        ("[1, 2]", text_format.INVALID_LENGTH),
        ("[1, 2, 3, 4]", text_format.INVALID_LENGTH),
        ("[]", text_format.INVALID_LENGTH),
        ("[1, 2, 8]", text_format.INVALID_RANGE),
        ("[-1, 2, 3]", text_format.INVALID_RANGE),
        ("[1, 2, 99999999999999999999999]", text_format.INVALID_RANGE),
    ],
)
def test_parse_invalid_classes(text, error):
    parsed = parse_sequence(text, 3, V)
    assert parsed.sequence is None
    assert parsed.error.startswith(error), parsed.error


def test_parse_accepts_reference_equivalents():
    # int(x) == x accepts 3.0; JSON whitespace is free.
    assert parse_sequence("[3.0, 1, 0]", 3, V).sequence.tolist() == [3, 1, 0]
    assert parse_sequence("\n [ 3 ,\n1 , 0 ] ", 3, V).sequence.tolist() == [3, 1, 0]


# ------------------------------------------------------------------------------ tokenizer
def test_ehrlich_tokenizer_layout(tok):
    vocab = tok.get_vocab()
    assert len(tok) == 8 + V
    assert [vocab[w] for w in ["<pad>", "<eos>", "<unk>", "<inc>", "[", "]", ",", "\n"]] == list(
        range(8)
    )
    assert [vocab[str(s)] for s in range(V)] == list(range(8, 8 + V))
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)
    # "<inc> [3, 1, 7]\n" -> <inc> [ 3 , 1 , 7 ] \n
    assert tok(format_prompt([3, 1, 7]))["input_ids"] == [3, 4, 11, 6, 9, 6, 15, 5, 7]
    assert tok("[9]")["input_ids"] == [4, 2, 5]  # out-of-vocabulary number -> <unk>
    # decode is whitespace-different but JSON-identical
    text = tok.decode(tok(format_target([3, 1, 7]))["input_ids"])
    assert json.loads(text) == [3, 1, 7]
    with pytest.raises(ValueError, match="positive integer"):
        make_ehrlich_tokenizer(0)


def test_tokenizer_save_load_round_trip(tok, tmp_path, no_network):
    tok.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, transformers.PreTrainedTokenizerFast)
    assert loaded.get_vocab() == tok.get_vocab()
    assert (loaded.pad_token_id, loaded.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    texts = [format_prompt([3, 1, 7]) + format_target([0, 2, 6]), "[1,\n2]", "<inc> [99]"]
    assert loaded(texts)["input_ids"] == tok(texts)["input_ids"]
    codec = SequenceCodec(loaded, V, L)
    assert codec.fast
    # a bare tokenizer.json file loads too
    assert load_tokenizer(tmp_path / "tokenizer.json").get_vocab() == tok.get_vocab()


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        load_tokenizer(tmp_path)  # a directory without tokenizer.json
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="could not read"):
        load_tokenizer(tmp_path)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_load_bpe_tokenizer_offline(bpe_dir, no_network):
    tok = load_tokenizer(bpe_dir)
    assert tok.eos_token == "<|endoftext|>"
    assert tok.pad_token_id == tok.eos_token_id == 0  # pad = eos, as the reference
    ids = tok(format_prompt([3, 1, 30]))["input_ids"]
    assert tok.decode(ids) == format_prompt([3, 1, 30])


# ------------------------------------------------------------------------------ codec
def _ids(tok, *words):
    vocab = tok.get_vocab()
    return [vocab[w] for w in words]


def test_codec_fast_encodings(tok):
    codec = SequenceCodec(tok, V, 3)
    assert codec.fast and codec.max_new_tokens == 7
    assert codec.stop_token_ids == (5, 1) and codec.pad_token_id == 0 and codec.vocab_size == 16
    x = np.array([[3, 1, 7], [0, 0, 2]])
    ids, mask = codec.encode_prompts(x)
    assert ids.dtype == np.int32 and mask.dtype == np.int32
    assert ids[0].tolist() == [3, 4, 11, 6, 9, 6, 15, 5, 7]
    assert mask.tolist() == [[1] * 9] * 2
    y = np.array([[3, 2, 7], [1, 0, 2]])
    pid, tmask, amask = codec.encode_pairs(x, y)
    assert pid[1].tolist() == [3, 4, 8, 6, 8, 6, 10, 5, 7, 4, 9, 6, 8, 6, 10, 5]
    assert tmask[1].tolist() == [0] * 9 + [1] * 7 and amask.min() == 1
    pid, tmask, _ = codec.encode_pairs(x, y, append_eos=True)
    assert pid[0, -1] == 1 and tmask[0, -2:].tolist() == [1, 1]


@pytest.mark.parametrize("fast", [True, False])
def test_codec_round_trip(tok, fast):
    codec = SequenceCodec(tok, V, L, fast=fast)
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 16, L))
    ids, tmask, _ = codec.encode_pairs(x, y)
    prompt_ids, _ = codec.encode_prompts(x)
    p = prompt_ids.shape[1]
    assert np.array_equal(ids[:, :p], prompt_ids)
    assert tmask[:, :p].sum() == 0 and tmask[:, p:].min() == 1
    # a "generation" = the target ids followed by padding
    gen = np.concatenate([ids[:, p:], np.zeros((16, 3), np.int32)], axis=1)
    seqs, valid = codec.decode(gen)
    assert valid.all() and np.array_equal(seqs, y)


def _invalid_rows(tok):
    """(name, ids) of generated outputs of every invalid class, plus two valid oddities."""
    n = lambda *s: _ids(tok, *[str(v) for v in s])  # noqa: E731
    lb, rb, c, nl = _ids(tok, "[", "]", ",", "\n")
    pad, eos, unk, inc = _ids(tok, "<pad>", "<eos>", "<unk>", "<inc>")
    ok = [lb, *n(1), c, *n(2), c, *n(3), rb]
    return {
        "no_closing_bracket": ([lb, *n(1), c, *n(2), c, *n(3), eos], False),
        "too_short": ([lb, *n(1), c, *n(2), rb], False),
        "too_long": ([lb, *n(1), c, *n(2), c, *n(3), c, *n(4), rb], False),
        "adjacent_numbers": ([lb, *n(1), *n(2), c, *n(3), rb], False),
        "double_comma": ([lb, *n(1), c, c, *n(2), c, *n(3), rb], False),
        "trailing_comma": ([lb, *n(1), c, *n(2), c, *n(3), c, rb], False),
        "no_open_bracket": ([*n(1), c, *n(2), c, *n(3), rb], False),
        "nested": ([lb, lb, *n(1), rb, c, *n(2), c, *n(3), rb], False),
        "pad_inside": ([lb, *n(1), c, pad, *n(2), c, *n(3), rb], False),
        "unk_inside": ([lb, *n(1), c, unk, c, *n(3), rb], False),
        "tag_prefix": ([inc, *ok], False),
        "empty": ([lb, rb], False),
        "out_of_range_state": ([lb, *n(1), c, *n(V), c, *n(3), rb], False),  # tokenizer has V+2
        "id_outside_vocab": ([lb, *n(1), c, 10_000, c, *n(3), rb], False),
        "valid": (ok, True),
        "valid_text_after_bracket": ([*ok, c, *n(5), inc], True),
        "valid_newlines": ([nl, lb, *n(1), nl, c, *n(2), c, nl, *n(3), rb], True),
    }


@pytest.mark.parametrize("fast", [True, False])
def test_codec_counts_every_invalid_class(fast):
    tok = make_ehrlich_tokenizer(V + 2)  # so that a state >= V is a token
    codec = SequenceCodec(tok, V, 3, fast=fast)
    cases = _invalid_rows(tok)
    width = 16
    rows = np.array([r + [0] * (width - len(r)) for r, _ in cases.values()])
    seqs, valid = codec.decode(rows)
    expected = np.array([v for _, v in cases.values()])
    assert dict(zip(cases, valid.tolist())) == dict(zip(cases, expected.tolist()))
    assert np.all(seqs[valid] == [1, 2, 3]) and np.all(seqs[~valid] == 0)
    errors = codec.decode_errors(rows)
    assert [e is None for e in errors] == expected.tolist()
    assert errors[list(cases).index("id_outside_vocab")].startswith(text_format.INVALID_TOKEN)
    assert errors[list(cases).index("out_of_range_state")].startswith(text_format.INVALID_RANGE)


def _mutate_rows(rng: np.random.Generator, gen: np.ndarray, vocab_size: int) -> None:
    """1-2 random substitutions, insertions or deletions in every row but row 0 (in place)."""
    for i in range(1, gen.shape[0]):  # row 0 stays valid
        for _ in range(rng.integers(1, 3)):
            j = rng.integers(0, gen.shape[1])
            op = rng.integers(0, 3)
            if op == 0:
                gen[i, j] = rng.integers(0, vocab_size)
            elif op == 1:
                gen[i] = np.insert(gen[i], j, rng.integers(0, vocab_size))[: gen.shape[1]]
            else:
                gen[i] = np.append(np.delete(gen[i], j), 0)


def test_codec_fast_equals_text_path_on_noisy_outputs(tok):
    """Mutated valid outputs (wrong tokens, insertions, deletions): both paths agree row by row."""
    fast, text = SequenceCodec(tok, V, L), SequenceCodec(tok, V, L, fast=False)
    rng = np.random.default_rng(2)
    base, _, _ = fast.encode_pairs(rng.integers(0, V, (400, L)), rng.integers(0, V, (400, L)))
    gen = base[:, 2 * L + 3 :]
    gen = np.concatenate([gen, rng.integers(0, len(tok), (400, 4))], axis=1)
    _mutate_rows(rng, gen, len(tok))
    s1, v1 = fast.decode(gen)
    s2, v2 = text.decode(gen)
    assert np.array_equal(v1, v2) and np.array_equal(s1, s2)
    assert 0.05 < v1.mean() < 0.95  # both classes well represented
    # keep mask = up to and including the first "]"
    keep = fast.keep_mask(np.array([[4, 8, 5, 5, 0], [4, 8, 6, 8, 1]]))
    assert keep.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]


def test_codec_text_path_on_bpe(bpe_dir):
    tok = load_tokenizer(bpe_dir)
    codec = SequenceCodec(tok, 32, 6)
    assert not codec.fast
    assert codec.rbracket_id == tok.convert_tokens_to_ids("]")
    assert codec.stop_token_ids == (codec.rbracket_id, 0) and codec.pad_token_id == 0
    with pytest.raises(ValueError, match="fast=True"):
        SequenceCodec(tok, 32, 6, fast=True)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 32, (12, 6))
    x[0] = 31  # long numbers
    x[1] = 0
    y = rng.integers(0, 32, (12, 6))
    ids, mask = codec.encode_prompts(x)
    lens = mask.sum(1)
    assert lens.min() < lens.max(), "prompt lengths should vary for this test"
    assert ids.shape[1] == codec.prompt_length == lens.max()  # fixed width: the worst case
    assert codec.encode_prompts(x[2:4])[0].shape[1] == codec.prompt_length
    for i in range(12):  # left padding, prompt text intact
        assert mask[i, : ids.shape[1] - lens[i]].sum() == 0 and mask[i, -lens[i] :].min() == 1
        assert tok.decode(ids[i, -lens[i] :]) == format_prompt(x[i])
    pid, tmask, amask = codec.encode_pairs(x, y)
    for i in range(12):
        assert tok.decode(pid[i][tmask[i] == 1]) == format_target(y[i])
        assert tok.decode(pid[i][amask[i] == 1]) == format_prompt(x[i]) + format_target(y[i])
        assert amask[i, : amask[i].sum()].min() == 1  # right padding
    # targets as generations (cut at "]", then garbage), padded to max_new_tokens
    gen = np.full((12, codec.max_new_tokens), 7, np.int32)
    for i in range(12):
        t = pid[i][tmask[i] == 1]
        assert len(t) <= codec.max_new_tokens
        gen[i, : len(t)] = t
    gen[5, :] = 0  # only EOS: invalid
    seqs, valid = codec.decode(gen)
    assert valid.tolist() == [True] * 5 + [False] + [True] * 6
    assert np.array_equal(seqs[valid], y[valid])
    # The EOS path appends EOS to the target mask.
    _, tm2, _ = codec.encode_pairs(x, y, append_eos=True)
    assert np.array_equal(tm2.sum(1), tmask.sum(1) + 1)


def test_codec_input_validation(tok):
    codec = SequenceCodec(tok, V, L)
    with pytest.raises(ValueError, match=r"\[B, 5\]"):
        codec.encode_prompts(np.zeros((2, 4), int))
    with pytest.raises(ValueError, match="integer"):
        codec.encode_prompts(np.zeros((2, L)))
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        codec.encode_pairs(np.full((2, L), 8), np.zeros((2, L), int))
    with pytest.raises(ValueError, match="same shape"):
        codec.encode_pairs(np.zeros((2, L), int), np.zeros((3, L), int))
    with pytest.raises(ValueError, match=r"\[B, N\]"):
        codec.decode(np.zeros(5, int))
    with pytest.raises(ValueError, match="fast=True"):
        SequenceCodec(make_ehrlich_tokenizer(4), V, L, fast=True)  # too few states


# ---------------------------------------------------------------------------------------------
# The compact format (no comma tokens)
# ---------------------------------------------------------------------------------------------
def test_compact_codec_encodings(tok):
    codec = SequenceCodec(tok, V, 3, separators=False)
    assert codec.fast and codec.max_new_tokens == 5 and codec.prompt_length == 7
    x = np.array([[3, 1, 7], [0, 0, 2]])
    ids, mask = codec.encode_prompts(x)
    # <inc>=3 [=4 ]=5 \n=7, state s = 8 + s
    assert ids.tolist() == [[3, 4, 11, 9, 15, 5, 7], [3, 4, 8, 8, 10, 5, 7]]
    assert mask.min() == 1
    pid, tmask, _ = codec.encode_pairs(x, np.array([[3, 2, 7], [1, 0, 2]]))
    assert pid[1].tolist() == [3, 4, 8, 8, 10, 5, 7, 4, 9, 8, 10, 5]
    assert tmask[1].tolist() == [0] * 7 + [1] * 5
    seqs, valid = codec.decode(pid[:, 7:])
    assert valid.all() and seqs.tolist() == [[3, 2, 7], [1, 0, 2]]


def _reference_compact_decode(
    row: list[int], lb: int, rb: int, nl: int, state_of: dict
) -> list[int] | None:
    """The compact rule written out: cut after the first ``]``, drop ``\\n``, then exactly
    ``[``, ``L`` state tokens of values ``< V``, ``]``."""
    cut = row[: row.index(rb) + 1] if rb in row else row
    toks = [t for t in cut if t != nl]
    if len(toks) != L + 2 or toks[0] != lb or toks[-1] != rb:
        return None
    values = [state_of.get(t, -1) for t in toks[1:-1]]
    return values if all(0 <= v < V for v in values) else None


def test_compact_decode_equals_the_rule_and_the_text_path_on_noisy_outputs(tok):
    codec = SequenceCodec(tok, V, L, separators=False)
    vocab = tok.get_vocab()
    state_of = {vocab[str(s)]: s for s in range(V)}
    lb, rb, nl = vocab["["], vocab["]"], vocab["\n"]
    rng = np.random.default_rng(3)
    base, _, _ = codec.encode_pairs(rng.integers(0, V, (400, L)), rng.integers(0, V, (400, L)))
    gen = np.concatenate([base[:, L + 4 :], rng.integers(0, len(tok), (400, 4))], axis=1)
    _mutate_rows(rng, gen, len(tok))
    seqs, valid = codec.decode(gen)
    expected = [_reference_compact_decode(r.tolist(), lb, rb, nl, state_of) for r in gen]
    assert valid.tolist() == [e is not None for e in expected]
    assert all(seqs[i].tolist() == e for i, e in enumerate(expected) if e is not None)
    assert 0.05 < valid.mean() < 0.95
    # the text path (decoded text with commas inserted, read as JSON) agrees on validity
    assert [e is None for e in codec.decode_errors(gen)] == valid.tolist()
    # a list-format output is not a compact one, and vice versa
    listed = SequenceCodec(tok, V, L)
    y = rng.integers(0, V, (4, L))
    as_list = listed.encode_pairs(y, y)[0][:, 2 * L + 3 :]
    as_compact = codec.encode_pairs(y, y)[0][:, L + 4 :]
    assert not codec.decode(as_list)[1].any() and not listed.decode(as_compact)[1].any()


def test_compact_format_needs_the_ehrlich_tokenizer(bpe_dir):
    with pytest.raises(ValueError, match="compact text format"):
        SequenceCodec(load_tokenizer(bpe_dir), V, L, separators=False)
    # the configuration allows it (weights from `llome-jax pretrain` carry the Ehrlich
    # tokenizer); the codec refuses any other tokenizer when the runtime is built
    from llome_jax.llome.config import LoopConfig

    assert LoopConfig(weights="/path/to/pythia", text_format="compact").text_format == "compact"


def test_compact_prompts_read_back(tok):
    from llome_jax.llome.selection import prompt_sequences

    codec = SequenceCodec(tok, V, L, separators=False)
    x = np.random.default_rng(4).integers(0, V, (6, L))
    ids, _, mask = codec.encode_pairs(x, x[::-1])
    assert np.array_equal(prompt_sequences(codec, ids, mask), x)
