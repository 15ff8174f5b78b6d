"""The compact text format (``text_format="compact"``, the ``cpu`` preset's) end to end: one
LLOME round on the smoke settings, with every token the runtime, the training batches, the
checkpoint gate and iterative refinement exchange read by hand.

The Ehrlich tokenizer's ids are fixed (``lm.tokenizer``): ``0 <pad> 1 <eos> 2 <unk> 3 <inc> 4 [
5 ] 6 , 7 \\n`` and state ``s`` is ``8 + s``. In the compact format a prompt is
``<inc> [ x0 x1 ... ] \\n`` (``L + 4`` tokens), a target ``[ y0 y1 ... ]`` (``L + 2``), with no
``,`` anywhere.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
import pytest

from llome_jax.llome import finetune
from llome_jax.llome.presets import preset
from llome_jax.llome.round import llome_round
from llome_jax.llome.runtime import Runtime
from llome_jax.llome.state import init_state
from llome_jax.lm import sample

PAD, EOS, UNK, INC, LB, RB, COMMA, NL, STATE0 = 0, 1, 2, 3, 4, 5, 6, 7, 8


def _hand_read(tokens: np.ndarray, length: int, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    """Generated ids -> ``(sequences, valid)`` by the compact rule: the output ends at its first
    ``]``; after dropping ``\\n`` it must be exactly ``[``, ``L`` state tokens, ``]``."""
    seqs = np.zeros((len(tokens), length), np.int32)
    valid = np.zeros(len(tokens), bool)
    for i, row in enumerate(np.asarray(tokens).tolist()):
        if RB not in row:
            continue
        kept = [t for t in row[: row.index(RB) + 1] if t != NL]
        states = [t - STATE0 for t in kept[1:-1]]
        if len(kept) == length + 2 and kept[0] == LB and all(0 <= s < num_states for s in states):
            seqs[i], valid[i] = states, True
    return seqs, valid


def _assert_compact_prompts(ids: np.ndarray, length: int, num_states: int) -> np.ndarray:
    """Every row is ``<inc> [ x0 .. x_{L-1} ] \\n`` (no padding); returns the ``x`` rows."""
    assert ids.shape[1] == length + 4
    np.testing.assert_array_equal(
        ids[:, [0, 1, length + 2, length + 3]], [[INC, LB, RB, NL]] * len(ids)
    )
    x = ids[:, 2 : length + 2] - STATE0
    assert x.min() >= 0 and x.max() < num_states
    return x


@dataclasses.dataclass
class Call:
    """One ``generate`` call: the (expanded) prompts, the budget, temperatures and outputs."""

    gate: bool
    prompts: np.ndarray
    max_new_tokens: int
    temperature: np.ndarray
    tokens: np.ndarray


@pytest.mark.slow
def test_compact_format_round_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    assert preset("cpu").text_format == "compact"
    cfg = preset("smoke", text_format="compact", select_checkpoint=True, selection_losses=("sft",))
    rt = Runtime.build(cfg)
    length, num_states = rt.objective.length, rt.objective.num_states
    vocab = rt.codec.tokenizer.get_vocab()
    assert [vocab[w] for w in ("<pad>", "<eos>", "<unk>", "<inc>", "[", "]", ",", "\n")] == list(
        range(8)
    )
    assert [vocab[str(s)] for s in range(num_states)] == list(range(STATE0, STATE0 + num_states))

    # Runtime: the codec writes and reads the compact format.
    assert rt.codec.separators is False
    assert (rt.codec.prompt_length, rt.codec.max_new_tokens) == (length + 4, length + 2)

    batches: list[tuple[np.ndarray, np.ndarray]] = []
    real_step = finetune.train_step

    def train_step_spy(*args: Any) -> Any:
        step = real_step(*args)

        def recorded(train_state: Any, batch: Any, hparams: Any) -> Any:
            batches.append((np.asarray(batch.input_ids), np.asarray(batch.target_mask)))
            return step(train_state, batch, hparams)

        return recorded

    calls: list[Call] = []
    real_generate = sample.generate

    def generate_spy(key, model, ids, mask, config, temperature, mesh=None, **kwargs):
        out = real_generate(key, model, ids, mask, config, temperature, mesh=mesh, **kwargs)
        rows = kwargs.get("prompt_rows")
        expanded = np.asarray(ids) if rows is None else np.asarray(ids)[np.asarray(rows)]
        temps = np.broadcast_to(np.asarray(temperature, np.float32), (len(expanded),))
        calls.append(
            Call(
                "prompt_rows" not in kwargs,  # refinement always passes prompt_rows, the gate not
                expanded,
                config.max_new_tokens,
                temps,
                np.asarray(out.tokens),
            )
        )
        return out

    monkeypatch.setattr(finetune, "train_step", train_step_spy)
    monkeypatch.setattr(sample, "generate", generate_spy)
    state = init_state(jax.random.key(cfg.seed), rt, cfg)
    logs: list[dict[str, Any]] = []
    _, metrics = llome_round(state, rt, cfg, on_candidates=logs.append)
    labelled = {row.tobytes() for row in np.asarray(state.archive_sequences, np.int32)}

    # Training: prompt(x) + target(y), 2L + 6 tokens, loss on the L + 2 target tokens; x and y
    # are labelled sequences.
    assert len(batches) == metrics["train_steps"]
    for ids, tmask in batches:
        assert ids.shape[1] == 2 * length + 6 and not np.any(ids == COMMA)
        x = _assert_compact_prompts(ids[:, : length + 4], length, num_states)
        y, ok = _hand_read(ids[:, length + 4 :], length, num_states)
        assert ok.all()
        np.testing.assert_array_equal(tmask, [[0] * (length + 4) + [1] * (length + 2)] * len(ids))
        assert all(r.astype(np.int32).tobytes() in labelled for r in (*x, *y))

    # The checkpoint gate: greedy outputs of L + 2 new tokens at most for the held-out prompts;
    # its recorded validity is the share of outputs the compact rule reads.
    gate_calls = [c for c in calls if c.gate]
    history = metrics["selection_history"]
    n_gate = min(metrics["num_val_units"], cfg.finetune.selection_num_prompts)
    assert len(gate_calls) == len(history) == 5 and n_gate > 0
    for call, row in zip(gate_calls, history, strict=True):
        _assert_compact_prompts(call.prompts, length, num_states)
        assert call.max_new_tokens == length + 2 and np.all(call.temperature == 0.0)
        _, ok = _hand_read(call.tokens[:n_gate], length, num_states)
        assert row[2] == pytest.approx(ok.mean())
    assert max(row[2] for row in history) >= 0.9  # the format is learnt within the round

    # Iterative refinement: compact prompts, L + 2 new tokens at most; its candidates are exactly
    # the distinct outputs the compact rule reads, and num_valid counts every readable output.
    refine_calls = [c for c in calls if not c.gate]
    assert len(refine_calls) == cfg.refine.num_iterations
    outputs = []
    for call in refine_calls:
        _assert_compact_prompts(call.prompts, length, num_states)
        assert call.max_new_tokens == length + 2
        outputs.append(_hand_read(call.tokens, length, num_states))
    seqs = np.concatenate([s for s, _ in outputs])
    ok = np.concatenate([v for _, v in outputs])
    assert metrics["num_generated"] == len(ok) and metrics["num_valid"] == ok.sum() > 0
    (log,) = logs
    assert {r.tobytes() for r in np.asarray(log["sequences"], np.int32)} == {
        r.tobytes() for r in seqs[ok]
    }
    assert metrics["num_unique"] == len(log["sequences"])
