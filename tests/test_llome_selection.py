"""Checkpoint selection with a validity gate (``selection``, ``LoopConfig.select_checkpoint``).

Unit tests of the bookkeeping and the gate on constructed values, then ``finetune.train`` on the
smoke preset: the returned parameters are those of ``selected_step``; an unreachable gate keeps
the last; with the option off nothing changes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np
import pytest

from llome_jax import ehrlich
from llome_jax.llome import finetune, selection
from llome_jax.llome.presets import preset
from llome_jax.llome.runtime import Runtime
from llome_jax.llome.selection import Candidate, GateResult, Selection
from llome_jax.llome.state import init_state
from llome_jax.lm import sample
from llome_jax.lm.codec import SequenceCodec
from llome_jax.lm.tokenizer import make_ehrlich_tokenizer

#: one runtime per configuration for the whole module (what the driver builds once per run)
_runtime = functools.cache(Runtime.build)


def _init_state(cfg: Any) -> Any:
    return init_state(jax.random.key(cfg.seed), _runtime(cfg), cfg)


OK = GateResult(16, 1.0, 0.9375)  # 16/16 valid, 15/16 feasible
BAD = GateResult(16, 0.875, 0.875)  # 14/16: below 0.9


# --------------------------------------------------------------------------------------------
# Bookkeeping (pure)
# --------------------------------------------------------------------------------------------
def test_save_steps_every_fifth_and_the_last() -> None:
    assert selection.save_steps(10) == (2, 4, 6, 8, 10)
    assert selection.save_steps(7) == (2, 4, 6, 7)  # ceil(7 / 5) = 2
    assert selection.save_steps(15) == (3, 6, 9, 12, 15)  # no float rounding up to 4
    assert selection.save_steps(64) == (13, 26, 39, 52, 64)
    assert selection.save_steps(3) == (1, 2, 3)
    assert selection.save_steps(1) == (1,)
    with pytest.raises(ValueError, match="positive integer"):
        selection.save_steps(0)


def test_gate_result_fractions_and_threshold() -> None:
    valid = [True, True, True, True, True, True, True, True, True, False]
    feasible = [True, True, True, True, True, True, True, True, False, True]  # last: invalid
    g = selection.gate_result(valid, feasible)
    assert (g.num_outputs, g.frac_valid, g.frac_feasible) == (10, 0.9, 0.8)
    assert g.passes(0.8) and not g.passes(0.85)  # feasible 0.8 < 0.85
    assert GateResult(10, 0.9, 0.9).passes(0.9)  # ">=": exactly the threshold passes
    assert not GateResult(10, 0.9, 1.0).passes(0.91)
    empty = selection.gate_result([], [])
    assert empty.num_outputs == 0 and math.isnan(empty.frac_valid)
    assert not empty.passes(0.0)
    with pytest.raises(ValueError, match="one shape"):
        selection.gate_result([True], [True, False])


def test_lower_loss_that_fails_the_gate_is_not_chosen() -> None:
    sel = Selection(0.9)
    sel, best1 = sel.consider(Candidate(2, 1.0, OK))
    sel, best2 = sel.consider(Candidate(4, 0.2, BAD))  # lowest loss, gate fails
    sel, best3 = sel.consider(Candidate(6, 0.8, OK))  # passes and beats 1.0
    sel, best4 = sel.consider(Candidate(8, 0.9, OK))  # passes but 0.9 > 0.8
    assert (best1, best2, best3, best4) == (True, False, True, False)
    assert sel.passed and sel.chosen == Candidate(6, 0.8, OK)
    record = sel.record()
    assert record["selected_step"] == 6 and record["selection_passed"] is True
    assert record["val_loss"] == 0.8
    assert (record["gate_valid"], record["gate_feasible"]) == (1.0, 0.9375)
    assert record["selection_history"] == [
        [2, 1.0, 1.0, 0.9375],
        [4, 0.2, 0.875, 0.875],
        [6, 0.8, 1.0, 0.9375],
        [8, 0.9, 1.0, 0.9375],
    ]


def test_none_passing_keeps_the_last() -> None:
    sel = Selection(0.9)
    for step, loss in ((3, 0.5), (6, 0.1), (9, 0.7)):
        sel, is_best = sel.consider(Candidate(step, loss, BAD))
        assert not is_best
    assert not sel.passed and sel.best is None
    assert sel.chosen.step == 9
    record = sel.record()
    assert record["selected_step"] == 9 and record["selection_passed"] is False
    assert record["val_loss"] == 0.7 and record["gate_valid"] == 0.875
    with pytest.raises(ValueError, match="no candidate"):
        Selection().chosen  # noqa: B018


def test_ties_keep_the_earlier_checkpoint_and_nan_is_never_best() -> None:
    sel = Selection(0.9)
    sel, _ = sel.consider(Candidate(1, float("nan"), OK))  # passes the gate, but diverged
    assert sel.best is None
    sel, first = sel.consider(Candidate(2, 0.5, OK))
    sel, tie = sel.consider(Candidate(3, 0.5, OK))
    assert first and not tie and sel.chosen.step == 2
    record = sel.record()
    assert record["selection_history"][0] == [1, None, 1.0, 0.9375]  # strict JSON: no NaN


def test_threshold_zero_and_one() -> None:
    perfect = GateResult(4, 1.0, 1.0)
    sel, is_best = Selection(1.0).consider(Candidate(1, 0.3, OK))
    assert not is_best  # 15/16 feasible < 1.0
    sel, is_best = sel.consider(Candidate(2, 0.4, perfect))
    assert is_best and sel.chosen.step == 2
    sel, is_best = Selection(0.0).consider(Candidate(1, 9.0, GateResult(4, 0.0, 0.0)))
    assert is_best


def test_skipped_record_and_split_units() -> None:
    record = selection.skipped_record(12, "why")
    assert record["selected_step"] == 12 and record["selection_passed"] is False
    assert math.isnan(record["val_loss"]) and record["selection_note"] == "why"
    assert selection.split_units(jax.random.key(0), 1) is None
    train, val = selection.split_units(jax.random.key(0), 2)
    assert train.tolist() in ([0], [1]) and sorted([*train, *val]) == [0, 1]
    # 95 % / at most 100 validation units (the rest dropped), as data.train_val_split.
    train, val = selection.split_units(jax.random.key(0), 2400)
    assert (train.size, val.size) == (2280, 100)
    assert np.all(np.diff(train) > 0) and not set(train.tolist()) & set(val.tolist())
    train, val = selection.split_units(jax.random.key(0), 40)
    assert (train.size, val.size) == (38, 2)


@pytest.mark.parametrize("fast", [True, False])
def test_prompt_sequences_reads_the_inputs_back(fast: bool) -> None:
    codec = SequenceCodec(make_ehrlich_tokenizer(8), 8, 6, fast=fast)
    x = np.array([[0, 1, 2, 3, 4, 5], [7, 7, 7, 7, 7, 7], [3, 0, 6, 1, 2, 0]], np.int32)
    y = x[::-1]
    for append_eos in (False, True):  # SFT/MargE pairs; DPO-style targets with EOS
        ids, _, amask = codec.encode_pairs(x, y, append_eos=append_eos)
        np.testing.assert_array_equal(selection.prompt_sequences(codec, ids, amask), x)
    ids, _, amask = codec.encode_pairs(x, y)
    ids[1, 3] = codec.rbracket_id  # a broken prompt is an error, not a silent zero row
    with pytest.raises(ValueError, match="row 1"):
        selection.prompt_sequences(codec, ids, amask)


def test_greedy_gate_counts_valid_and_feasible_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs fed through a stand-in for ``generate``: 2 feasible, 1 infeasible, 1 invalid."""
    cfg = preset("smoke")
    res = _runtime(cfg)
    fn, codec = res.fn, res.codec
    feasible_x = np.asarray(ehrlich.optimal_solution(fn), np.int32)
    rng = np.random.default_rng(0)
    pool = rng.integers(0, fn.config.num_states, (256, fn.config.dim)).astype(np.int32)
    infeasible_x = pool[~np.asarray(ehrlich.is_feasible(fn, pool))][0]
    outputs = np.stack([feasible_x, infeasible_x, feasible_x, feasible_x])
    _, tmask, _ = codec.encode_pairs(outputs, outputs)
    ids, _, _ = codec.encode_pairs(outputs, outputs)
    tokens = ids[:, tmask[0] == 1].copy()
    tokens[3, 1] = codec.rbracket_id  # output 3 ends after "[": wrong length
    calls: list[tuple[int, float]] = []

    def fake_generate(key, model, prompt_ids, prompt_mask, config, temperature, mesh=None):
        assert config.max_new_tokens == codec.max_new_tokens
        calls.append((prompt_ids.shape[0], float(np.max(np.abs(temperature)))))
        rows = np.zeros((prompt_ids.shape[0], tokens.shape[1]), np.int32)
        rows[: len(tokens)] = tokens
        return sample.Generation(rows, rows * 0.0, rows * 0.0, None, None)

    monkeypatch.setattr(sample, "generate", fake_generate)
    prompts = np.stack([infeasible_x] * 4)
    gate = selection.greedy_gate(res.model, codec, fn, prompts, batch_size=64)
    assert calls == [(8, 0.0)]  # one chunk padded to 8 rows, greedy (temperature 0)
    assert gate == GateResult(4, 0.75, 0.5)


# --------------------------------------------------------------------------------------------
# In the loop (smoke preset)
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Seen:
    """What the gate saw at each candidate: host copies of the parameters and its verdict."""

    params: list[Any] = dataclasses.field(default_factory=list)
    gates: list[GateResult] = dataclasses.field(default_factory=list)


def _recording_gate(seen: Seen, verdicts: list[GateResult] | None = None) -> Any:
    """Wrap ``selection.greedy_gate``: record the candidate's params; return the real verdict or
    ``verdicts[k]`` for the k-th candidate."""
    real = selection.greedy_gate

    def gate(model: Any, *args: Any, **kwargs: Any) -> GateResult:
        from llome_jax.training.step import split_params

        _, params, _ = split_params(model)
        seen.params.append(jax.tree.map(lambda a: np.array(a, copy=True), params))
        result = real(model, *args, **kwargs) if verdicts is None else verdicts[len(seen.gates)]
        seen.gates.append(result)
        return result

    return gate


def _assert_same(a: Any, b: Any) -> None:
    leaves = list(zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
    assert leaves
    for x, y in leaves:
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _differs(a: Any, b: Any) -> bool:
    return any(
        not np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _setup(loss: str, **overrides: Any) -> tuple[Any, Any, dict[str, Any]]:
    cfg = preset("smoke", select_checkpoint=True, **overrides)
    state = _init_state(cfg)
    x, v = state.latest()
    return cfg, state, finetune.training_data(jax.random.key(1), _runtime(cfg), cfg, loss, x, v)


@pytest.mark.slow
def test_real_gate_returns_the_params_of_selected_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round-1 SFT (the format is learnt within the round) with selection on for SFT: the
    returned params are those the gate saw at ``selected_step``, which is the lowest validation
    loss among passing candidates (earliest on ties), else the last step."""
    cfg, state, data = _setup("sft", selection_losses=("sft",), selection_num_prompts=16)
    seen = Seen()
    monkeypatch.setattr(selection, "greedy_gate", _recording_gate(seen))
    params, _, loss, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "sft", data, state.params, False, round_index=1
    )

    # 297 pairs: floor(0.95 * 297) = 282 train (ceil(282 / 32) = 9 steps x 4 epochs), 15 validate.
    assert (data["units"], info["num_val_units"]) == (297, 15) and info["train_steps"] == 36
    steps = [row[0] for row in info["selection_history"]]
    assert steps == [8, 16, 24, 32, 36] and len(seen.params) == 5
    assert [[r[2], r[3]] for r in info["selection_history"]] == [
        [g.frac_valid, g.frac_feasible] for g in seen.gates
    ]
    passing = [r for r in info["selection_history"] if r[2] >= 0.9 and r[3] >= 0.9]
    expected = min(passing, key=lambda r: r[1])[0] if passing else 36  # min: first of ties
    assert info["selected_step"] == expected
    assert info["selection_passed"] is bool(passing)
    k = steps.index(expected)
    _assert_same(params, seen.params[k])
    assert info["val_loss"] == info["selection_history"][k][1]
    assert (info["gate_valid"], info["gate_feasible"]) == (
        seen.gates[k].frac_valid,
        seen.gates[k].frac_feasible,
    )
    assert np.isfinite(loss) and info["time_selection"] > 0


@pytest.mark.slow
def test_an_earlier_passing_checkpoint_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """DPO (prompts of triples, chosen/rejected rows): only the 2nd candidate passes the gate,
    so its params come back although training went on."""
    cfg, state, data = _setup("dpo", max_train_examples=128)
    seen = Seen()
    verdicts = [BAD, OK, BAD, BAD, BAD]
    monkeypatch.setattr(selection, "greedy_gate", _recording_gate(seen, verdicts))
    params, _, _, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "dpo", data, state.params, False
    )

    # 128 triples: 121 train -> 4 steps per epoch x 4 epochs; 7 validate.
    assert info["train_steps"] == 16 and info["num_val_units"] == 7
    assert [row[0] for row in info["selection_history"]] == [4, 8, 12, 16]
    assert len(seen.params) == 4
    assert info["selected_step"] == 8 and info["selection_passed"] is True
    assert (info["gate_valid"], info["gate_feasible"]) == (1.0, 0.9375)
    assert info["val_loss"] == info["selection_history"][1][1]
    _assert_same(params, seen.params[1])
    assert _differs(params, seen.params[-1])  # the last step's params were not kept


def _validation_losses(cfg: Any, params_list: list[Any], data: dict[str, Any], units: Any) -> Any:
    """SFT validation loss of each candidate's params, by hand: the model called directly, a
    float64 log-softmax, and the mean over ``units`` of the per-token NLL of the target (every
    target has the same length here, so pooled tokens and per-unit means coincide)."""
    from llome_jax.llome.runtime import model_with

    ids, tmask, amask = (np.asarray(data[k][0])[units] for k in ("ids", "tmask", "amask"))
    counts = tmask[:, 1:].sum(1)
    assert np.all(counts == counts[0]) and np.all(amask == 1)  # fixed width, no padding
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    losses = []
    for params in params_list:
        model = model_with(_runtime(cfg).model, params)
        logits = np.asarray(model(ids, attention_mask=amask, position_ids=positions), np.float64)
        top = logits.max(-1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        picked = np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
        losses.append(float(np.mean(-(picked * tmask[:, 1:]).sum(1) / counts)))
    return np.asarray(losses)


@pytest.mark.slow
def test_lowest_validation_loss_among_passing_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three of four candidates pass the gate: the kept one has the lowest validation loss among
    them (not the first passing, not the lowest of all), each loss being the SFT loss of that
    candidate's params on the held-out units, recomputed by hand. The held-out units are never
    trained on, and they are the gate's prompts."""
    cfg, state, data = _setup("sft", selection_losses=("sft",), max_train_examples=128)
    splits: list[tuple[np.ndarray, np.ndarray]] = []
    real_split = selection.split_units

    def recording_split(key: Any, n: int) -> Any:
        split = real_split(key, n)
        splits.append(split)
        return split

    trained_rows: list[np.ndarray] = []
    real_step = finetune.train_step

    def recording_train_step(*args: Any) -> Any:
        step = real_step(*args)

        def recorded(train_state: Any, batch: Any, hparams: Any) -> Any:
            real = np.asarray(batch.loss.weight) > 0  # padding rows repeat a unit, weight 0
            trained_rows.append(np.asarray(batch.input_ids)[real])
            return step(train_state, batch, hparams)

        return recorded

    prompts_seen: list[np.ndarray] = []
    gate = _recording_gate(seen := Seen(), [OK, OK, OK, BAD])

    def recording_gate(model: Any, codec: Any, fn: Any, prompts: Any, **kwargs: Any) -> Any:
        prompts_seen.append(np.asarray(prompts))
        return gate(model, codec, fn, prompts, **kwargs)

    monkeypatch.setattr(selection, "split_units", recording_split)
    monkeypatch.setattr(finetune, "train_step", recording_train_step)
    monkeypatch.setattr(selection, "greedy_gate", recording_gate)
    params, _, _, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "sft", data, state.params, False
    )

    # 128 pairs: 121 train (4 steps x 4 epochs), 7 validate; candidates at steps 4, 8, 12, 16.
    ((train_units, val_units),) = splits
    assert (len(train_units), len(val_units), info["num_val_units"]) == (121, 7, 7)
    steps = [row[0] for row in info["selection_history"]]
    assert steps == [4, 8, 12, 16] and len(seen.params) == 4
    # The held-out units are never trained on; every training unit is.
    ids = np.asarray(data["ids"][0])
    trained = {row.tobytes() for rows in trained_rows for row in rows}
    assert trained == {ids[u].tobytes() for u in train_units}
    assert not trained & {ids[u].tobytes() for u in val_units}
    # The gate's prompts are the held-out inputs x, read off their tokens by hand
    # ("<inc> [ x0 , x1 , ... ] \n": state s is token 8 + s at positions 2, 4, ..., 2L).
    length = _runtime(cfg).codec.length
    held_out_x = ids[val_units][:, 2 : 2 * length + 1 : 2] - 8
    assert len(prompts_seen) == 4
    for prompts in prompts_seen:
        np.testing.assert_array_equal(prompts, held_out_x)

    # The recorded validation losses are the held-out SFT losses of each candidate's params.
    expected = _validation_losses(cfg, seen.params, data, val_units)
    recorded = np.asarray([row[1] for row in info["selection_history"]])
    np.testing.assert_allclose(recorded, expected, rtol=1e-5)
    # The kept checkpoint: the lowest of the three passing ones, which is neither the first
    # passing candidate nor the lowest of all (the 4th, failing the gate, is lower still).
    passing = expected[:3]
    k = int(np.argmin(passing))
    assert k != 0 and expected[3] < passing[k]
    assert np.sort(passing)[1] - passing[k] > 1e-3 * passing[k]  # no near-tie at 1e-5
    assert info["selected_step"] == steps[k] and info["selection_passed"] is True
    assert info["val_loss"] == recorded[k]
    _assert_same(params, seen.params[k])


@pytest.mark.slow
def test_unreachable_gate_keeps_the_last_params(monkeypatch: pytest.MonkeyPatch) -> None:
    """MargE with threshold 1.0 and generations that are 15/16 feasible at best: nothing passes,
    the last params are returned."""
    cfg, state, data = _setup("marge", max_train_examples=128, selection_threshold=1.0)
    seen = Seen()
    monkeypatch.setattr(selection, "greedy_gate", _recording_gate(seen, [OK] * 5))
    params, _, _, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "marge", data, state.params, False
    )

    assert info["selection_passed"] is False and info["selected_step"] == info["train_steps"]
    assert [row[0] for row in info["selection_history"]][-1] == info["train_steps"]
    _assert_same(params, seen.params[-1])
    assert _differs(params, seen.params[0])
    assert info["val_loss"] == info["selection_history"][-1][1]


@pytest.mark.slow
def test_off_or_other_losses_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off (the default) or a loss outside ``selection_losses``: all units train, no new record
    keys, the gate is never called, the same params; too few units: trained on all, a note."""
    base = preset("smoke", max_train_examples=64)
    state = _init_state(base)
    x, v = state.latest()
    data = finetune.training_data(jax.random.key(1), _runtime(base), base, "sft", x, v)

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the gate ran")

    monkeypatch.setattr(selection, "greedy_gate", never)
    results = []
    for cfg in (base, base.replace(select_checkpoint=True)):  # SFT not selected
        results.append(
            finetune.train(jax.random.key(2), _runtime(cfg), cfg, "sft", data, state.params, False)
        )
    (p_off, _, l_off, info_off), (p_on, _, l_on, info_on) = results
    assert info_off == info_on == {"train_steps": 8, "learning_rate": base.finetune.learning_rate}
    assert l_off == l_on
    _assert_same(p_off, p_on)

    one = {**data, "units": 1, "reward": data["reward"][:1]}
    one.update({k: tuple(a[:1] for a in data[k]) for k in ("ids", "tmask", "amask")})
    cfg = preset("smoke", max_train_examples=64, select_checkpoint=True, selection_losses=("sft",))
    _, _, _, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "sft", one, state.params, False
    )
    assert info["train_steps"] == 4 and info["selected_step"] == 4
    assert info["selection_passed"] is False and info["num_val_units"] == 0
    assert "too few" in info["selection_note"] and math.isnan(info["val_loss"])


def test_config_fields_validation_and_config_json() -> None:
    cfg = preset("smoke")
    assert not cfg.finetune.select_checkpoint and cfg.finetune.selection_threshold == 0.9
    assert cfg.finetune.selection_losses == ("marge", "dpo")
    assert cfg.finetune.selection_num_prompts == 64
    on = preset("smoke", select_checkpoint=True, selection_threshold=0.75).to_dict()["finetune"]
    assert on["select_checkpoint"] is True and on["selection_losses"] == ["marge", "dpo"]
    assert on["selection_threshold"] == 0.75 and on["selection_num_prompts"] == 64
    # (a config.json from before the option, without these keys, reads as "off":
    # test_rundir.py::test_flat_llome_config_json_reads_as_the_nested_configuration)
    for bad, match in (
        ({"select_checkpoint": 1}, "select_checkpoint"),
        ({"selection_threshold": 1.01}, "selection_threshold"),
        ({"selection_threshold": -0.1}, "selection_threshold"),
        ({"selection_threshold": float("nan")}, "selection_threshold"),
        ({"selection_losses": ()}, "selection_losses"),
        ({"selection_losses": ("marge", "ppo")}, "selection_losses"),
        ({"selection_losses": "dpo"}, "selection_losses"),
        ({"selection_losses": ("dpo", "dpo")}, "selection_losses"),
        ({"selection_num_prompts": 0}, "selection_num_prompts"),
        ({"selection_num_prompts": True}, "selection_num_prompts"),
    ):
        with pytest.raises(ValueError, match=match):
            preset("smoke", **bad)


def test_docstring_examples() -> None:
    import doctest

    result = doctest.testmod(selection)
    assert result.attempted >= 5 and result.failed == 0
