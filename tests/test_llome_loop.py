"""The LLOME loop end to end (smoke preset): files, invariants, exact resume, schedules, bad input."""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from llome_jax import cli, ehrlich, ga
from llome_jax.ga import loop as ga_loop
from llome_jax.llome import finetune, loop
from llome_jax.llome import round as llome_round_module
from llome_jax.llome import state as llome_state
from llome_jax.llome.config import loss_for_round, parse_schedule, schedule_for_loss
from llome_jax.llome.presets import preset
from llome_jax.llome.round import llome_round
from llome_jax.llome.runtime import Runtime, initial_params, named_key
from llome_jax.llome.state import STOP_REASONS, abstract_state, init_state, restore_checkpoint
from llome_jax.llome.temperature import temperature_offset
from llome_jax.run.checkpoint import CheckpointManager
from llome_jax.training import dataset_logprobs
from llome_jax.training import optimizer as train_optimizer

#: one runtime per configuration for the whole module (what the driver builds once per run)
_runtime = functools.cache(Runtime.build)


def _init_state(cfg: Any) -> Any:
    return init_state(jax.random.key(cfg.seed), _runtime(cfg), cfg)


SMOKE = ["llome", "--preset", "smoke", "--no-progress"]


def _read_csv(path: pathlib.Path) -> list[list[str]]:
    with open(path, newline="") as stream:
        return list(csv.reader(stream))


def _rounds(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


def _digest(directory: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@dataclasses.dataclass
class FirstStep:
    """What the train step of a round saw and did at its first update."""

    loss: str
    batch: Any
    metrics: dict[str, float]
    params_before: Any
    params_after: Any
    updates: int = 1  # updates the round made in all, counted by the wrapper


def _capturing_train_step(captured: list[FirstStep]) -> Any:
    """Wrap ``finetune.train_step`` so that the first update of every round is recorded."""
    real = finetune.train_step

    def train_step(rt: Any, cfg: Any, loss: str, opt_config: Any) -> Any:
        step = real(rt, cfg, loss, opt_config)

        def recorded(state: Any, batch: Any, hparams: Any) -> Any:
            if int(state.step) != 0:
                captured[-1].updates += 1
                return step(state, batch, hparams)
            before = jax.tree.map(np.asarray, state.params)  # the step donates its input
            host_batch = jax.tree.map(np.asarray, batch)
            new_state, metrics = step(state, batch, hparams)
            after = jax.tree.map(np.asarray, new_state.params)
            metrics_host = {k: float(v) for k, v in metrics.items()}
            captured.append(FirstStep(loss, host_batch, metrics_host, before, after))
            return new_state, metrics

        return recorded

    return train_step


@pytest.fixture(scope="module")
def smoke_capture(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[pathlib.Path, list[FirstStep]]:
    """An uninterrupted 2-round smoke run through the CLI entry point (SFT, then MargE), with
    the first update of each round recorded."""
    captured: list[FirstStep] = []
    out = tmp_path_factory.mktemp("llome") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finetune, "train_step", _capturing_train_step(captured))
        assert cli.main([*SMOKE, "--rounds", "2", "--loss", "marge", "--out", str(out)]) == 0
    return out, captured


@pytest.fixture(scope="module")
def smoke_run(smoke_capture: tuple[pathlib.Path, list[FirstStep]]) -> pathlib.Path:
    return smoke_capture[0]


@pytest.mark.slow
def test_smoke_run_files_and_invariants(
    smoke_capture: tuple[pathlib.Path, list[FirstStep]],
) -> None:
    out, captured = smoke_capture
    for name in ("rounds.jsonl", "evaluated.csv", "regret.png", "config.json"):
        assert (out / name).is_file(), name
    cfg = preset("smoke", schedule=(("sft", 1), ("marge", 1)), rounds=2)
    config = json.loads((out / "config.json").read_text())
    assert config["schedule"] == "sft:1,marge:1" and config["preset"] == "smoke"

    records = _rounds(out)
    assert [r["round"] for r in records] == [0, 1, 2]
    rows = _read_csv(out / "evaluated.csv")
    assert rows[0] == ["round", "sequence", "value"]
    rounds = np.asarray([int(r[0]) for r in rows[1:]])
    seqs = np.asarray([[int(t) for t in r[1].split(",")] for r in rows[1:]], np.int32)
    values = np.asarray([float(r[2]) for r in rows[1:]])

    # Round 0 = the GA archive (n0 generations from the function's start sequence), deduplicated;
    # the start sequence is public (never paid), so it is not among the paid rows.
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    x0 = ehrlich.resolve_initial_solution(cfg.function, cfg.instance_seed)
    archive = ga_loop.run_archive(
        named_key(jax.random.key(cfg.seed), "ga"),
        fn,
        x0,
        cfg.round0_generations,
        ga.GAConfig(
            num_particles=cfg.round0_ga.num_particles, mutation_prob=cfg.round0_ga.mutation_prob
        ),
    )
    ga_x, ga_v, _ = archive.to_numpy()
    paid = ~(ga_x == np.asarray(x0)).all(axis=1)
    assert not paid.all()  # this archive holds the start sequence: the case is exercised
    np.testing.assert_array_equal(seqs[rounds == 0], ga_x[paid])
    np.testing.assert_array_equal(values[rounds == 0], ga_v[paid].astype(np.float64))
    assert len(np.unique(seqs, axis=0)) == len(seqs)  # no sequence paid twice
    # Every logged value is the oracle's value of the logged sequence.
    np.testing.assert_array_equal(values, np.asarray(ehrlich.evaluate(fn, seqs), np.float64))
    assert set(rounds.tolist()) == {0, 1, 2}

    # num_evaluations = paid labels: round 0's distinct GA sequences, then each round's labels.
    expected = int(paid.sum())
    assert records[0]["num_evaluations"] == expected
    assert records[0]["num_proposals"] == cfg.round0_generations * cfg.round0_ga.num_particles
    # uniqueness over the GA's proposals (as the GA reports it), not over its distinct archive
    assert records[0]["frac_unique"] == len(ga_x) / records[0]["num_proposals"] < 1.0
    # (the temperature offsets below assume the adaptive schedule without phase resets)
    assert not cfg.reset_temperature_at_phase and cfg.adaptive_temperature
    for record in records[1:]:
        r = record["round"]
        labelled = seqs[rounds == r]
        assert 0 < len(labelled) <= cfg.labels_per_round
        assert len(np.unique(labelled, axis=0)) == len(labelled)
        expected += len(labelled)
        assert record["num_evaluations"] == expected
        assert record["num_selected"] == len(labelled)
        assert record["num_generated"] == cfg.num_seeds * cfg.refine.num_iterations * (
            1 + len(cfg.temperatures) * cfg.refine.num_samples
        )
        regret_all = 1.0 - np.where(np.isfinite(values[rounds <= r]), values[rounds <= r], 0.0)
        assert record["min_regret"] == pytest.approx(regret_all.min())
        v = values[rounds == r]
        assert record["frac_feasible"] == pytest.approx(np.isfinite(v).mean())
        assert 0.0 <= record["frac_unique"] <= 1.0
        assert np.isfinite(record["train_loss"]) and np.isfinite(record["seconds"])
        # the offset follows the previous round's mean Hamming distance (none before round 1)
        previous_hd = None if r == 1 else float(np.float32(records[r - 1]["mean_hamming"]))
        assert record["temperature_offset"] == pytest.approx(temperature_offset(previous_hd))
        ft = cfg.finetune
        steps = ft.epochs * -(-min(record["num_pairs"], ft.max_train_examples) // ft.batch_size)
        assert record["train_steps"] == steps == captured[r - 1].updates  # updates really made
    # No sequence is labelled twice: evaluated.csv is a set (GA data, rounds 1 and 2).
    assert len(np.unique(seqs, axis=0)) == len(seqs)

    # The checkpoint of the last round holds exactly the logged archive, plus the public start
    # sequence in round 0's GA data (known to every optimizer, never paid).
    with CheckpointManager(out / "checkpoints") as manager:
        assert manager.latest_step() == 2
        state = restore_checkpoint(manager, _runtime(cfg), cfg)
    assert int(state.round) == 2 and int(state.num_evaluations) == expected
    archive = np.asarray(state.archive_sequences)
    logged = ~(archive == np.asarray(x0)).all(axis=1)
    assert int(np.sum(~logged)) == 1 and int(np.asarray(state.archive_rounds)[~logged][0]) == 0
    np.testing.assert_array_equal(archive[logged], seqs)
    np.testing.assert_array_equal(
        np.asarray(state.archive_values)[logged], values.astype(np.float32)
    )
    np.testing.assert_array_equal(np.asarray(state.archive_rounds)[logged], rounds)
    # MargE's reference model of round 2 is the policy that round 1 ended with.
    with CheckpointManager(out / "checkpoints") as manager:
        device, _ = manager.restore(1, abstract_state(_runtime(cfg), cfg, 1))
    round1 = jax.tree.leaves(device.params)
    reference = jax.tree.leaves(state.reference_params)
    assert len(round1) == len(reference) > 0
    for a, b in zip(round1, reference, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(
        not np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree.leaves(state.params), reference, strict=True)
    )


def _pairs_of(batch: Any, tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """The (prompt x, target y) sequences of a training batch, read back from its token text."""
    xs, ys = [], []
    for ids, attention in zip(batch.input_ids, batch.attention_mask, strict=True):
        text = tokenizer.decode([int(t) for t in ids[attention.astype(bool)]])
        x, y = (list(map(int, m.split(","))) for m in re.findall(r"\[([0-9 ,]+)\]", text))
        xs.append(x)
        ys.append(y)
    return np.asarray(xs), np.asarray(ys)


@pytest.mark.slow
def test_each_round_trains_with_its_loss_rewards_and_learning_rate(
    smoke_capture: tuple[pathlib.Path, list[FirstStep]],
) -> None:
    """Behaviour of the first update of each round (recorded from inside the train step)."""
    _, captured = smoke_capture
    cfg = preset("smoke", schedule=(("sft", 1), ("marge", 1)), rounds=2)
    assert [c.loss for c in captured] == ["sft", "marge"]
    sft, marge = captured
    # Which loss ran: SFT reports a per-token NLL, MargE its importance weights.
    assert "nll_per_token" in sft.metrics and "log_ratio_mean" not in sft.metrics
    assert "log_ratio_mean" in marge.metrics and "nll_per_token" not in marge.metrics
    # The reference is the round-start policy: log pi_theta - log pi_ref = 0 at the first step
    # (both scored from the same weights by two compiled programs: float32 noise only).
    assert abs(marge.metrics["log_ratio_mean"]) < 1e-4
    # ... so every importance weight is 1: the effective sample size is the number of real units
    real = marge.batch.loss.weight > 0
    assert marge.metrics["effective_sample_size"] == pytest.approx(real.sum(), rel=1e-4)
    # MargE receives the margin rewards max(f(y) - f(x), 0) of its pairs (infeasible = 0),
    # recomputed here from the oracle on the pairs decoded from the batch's tokens.
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    tokenizer = _runtime(cfg).codec.tokenizer
    x, y = _pairs_of(marge.batch, tokenizer)
    fx, fy = (np.asarray(ehrlich.evaluate(fn, s), np.float64) for s in (x, y))
    fx, fy = (np.where(np.isfinite(f), f, 0.0) for f in (fx, fy))
    np.testing.assert_allclose(marge.batch.loss.reward[real], np.maximum(fy - fx, 0.0)[real])
    assert marge.batch.loss.reward[real].max() > 0
    # Learning rates, measured: AdamW's first update moves every parameter with a non-zero
    # gradient by lr * sign(g) (plus lr * wd * theta, below 1 % here): round 1 uses the first-round
    # rate of the smoke preset (1e-2), round 2 the later-round rate (5e-3).
    for step, lr in ((sft, 1e-2), (marge, 5e-3)):
        moved = np.concatenate(
            [
                np.abs(a - b).ravel()
                for a, b in zip(
                    jax.tree.leaves(step.params_after),
                    jax.tree.leaves(step.params_before),
                    strict=True,
                )
            ]
        )
        moved = moved[moved > 0.1 * lr]
        assert moved.size > 1000
        assert np.median(moved) == pytest.approx(lr, rel=0.02)


def test_head_on_targets_sets_the_training_window(
    smoke_capture: tuple[pathlib.Path, list[FirstStep]], tmp_path: pathlib.Path
) -> None:
    """``finetune.head_on_targets``: off in the smoke preset (the head scores every position);
    on, the batch carries the window: the longest completion rounded up to a multiple of 16."""
    _, captured = smoke_capture
    assert [c.batch.target_window for c in captured] == [None, None]
    on: list[FirstStep] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finetune, "train_step", _capturing_train_step(on))
        args = [*SMOKE, "--rounds", "1", "--set", "finetune.head_on_targets=true"]
        assert cli.main([*args, "--out", str(tmp_path / "run")]) == 0
    (first,) = on
    tmask = np.asarray(first.batch.target_mask)
    most = int(tmask[:, 1:].sum(axis=1).max())
    # Rows of 36 tokens whose longest completion has 17 target tokens: a window of 32 of the
    # 35 predicting positions.
    assert (most, tmask.shape[1]) == (17, 36)
    assert first.batch.target_window == 32


@pytest.mark.slow
def test_resume_after_round_one_equals_uninterrupted(
    smoke_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    cfg = preset("smoke", schedule=(("sft", 1), ("marge", 1)), rounds=2)
    extra = {"loss": "marge"}
    out = tmp_path / "resumed"
    first = loop.run(cfg, out, progress=False, max_rounds_this_call=1, extra_config=extra)
    assert int(first.state.round) == 1
    # Simulate a crash after round 2 was logged but before its checkpoint: the resume must
    # roll the logs back and recompute round 2 identically.
    (out / "rounds.jsonl").open("a").write('{"round": 2, "num_evaluations": -1}\n')
    (out / "evaluated.csv").open("a").write('2,"0,0,0,0,0,0,0,0",1.0\n')
    loop.run(cfg, out, resume=True, progress=False, extra_config=extra)

    def numbers(path: pathlib.Path) -> list[dict]:
        return [
            {k: v for k, v in r.items() if k != "seconds" and not k.startswith("time_")}
            for r in _rounds(path)
        ]

    assert numbers(out) == numbers(smoke_run)
    assert (out / "evaluated.csv").read_bytes() == (smoke_run / "evaluated.csv").read_bytes()
    # Resuming a finished run does nothing.
    before = (out / "rounds.jsonl").read_bytes()
    loop.run(cfg, out, resume=True, progress=False, extra_config=extra)
    assert (out / "rounds.jsonl").read_bytes() == before
    # More rounds on resume is the same configuration (only `rounds` may change).
    more = cfg.replace(rounds=3)
    loop.run(more, out, resume=True, progress=False, extra_config=extra, max_rounds_this_call=0)
    assert json.loads((out / "config.json").read_text())["rounds"] == 3
    assert (out / "rounds.jsonl").read_bytes() == before


def test_no_training_pairs_stops_with_a_reason(smoke_run: pathlib.Path) -> None:
    cfg = preset("smoke", schedule=(("sft", 1), ("marge", 1)), rounds=2)
    with CheckpointManager(smoke_run / "checkpoints") as manager:
        state = restore_checkpoint(manager, _runtime(cfg), cfg)
    flat = dataclasses.replace(
        state, archive_values=np.full_like(state.archive_values, 0.25), stop_code=jnp.int32(0)
    )
    new_state, metrics = llome_round(flat, _runtime(cfg), cfg)
    assert metrics["round"] is None and metrics["stop_reason"] == STOP_REASONS[3]
    assert int(new_state.stop_code) == 3 and int(new_state.round) == int(state.round)


def test_a_run_that_cannot_train_records_why_in_its_directory(tmp_path: pathlib.Path) -> None:
    """A constant objective: round 0's labels hold no PropEn pair, so round 1 cannot run.
    ``rounds.jsonl`` has round 0 only, and ``stopped.json`` says why the run ended; a resume asks
    again and ends the same way."""
    from llome_jax.objective import Objective
    from llome_jax.run.rundir import RunDirectory

    x0 = np.zeros(8, np.int32)
    constant = Objective(
        "constant", 8, 8, lambda x: np.full(len(x), 0.5, np.float32), initial_solution=x0
    )
    cfg = preset("smoke", rounds=2)
    result = loop.run(cfg, tmp_path / "run", objective=constant, progress=False)
    assert result.stop_reason == STOP_REASONS[3]
    run = RunDirectory(tmp_path / "run")
    assert [r["round"] for r in run.rounds()] == [0]
    assert run.stopped() == {"after_round": 0, "stop_reason": STOP_REASONS[3]}
    again = loop.run(cfg, tmp_path / "run", objective=constant, resume=True, progress=False)
    assert again.stop_reason == STOP_REASONS[3]
    assert [r["round"] for r in run.rounds()] == [0] and run.stopped()["after_round"] == 0


@pytest.mark.parametrize("training_data", ["latest", "cumulative"])
def test_training_data_latest_or_cumulative(
    smoke_run: pathlib.Path, monkeypatch: pytest.MonkeyPatch, training_data: str
) -> None:
    """A round trains on, and seeds from, S_i (latest) or the whole archive (cumulative)."""
    cfg = preset(
        "smoke", schedule=(("sft", 1), ("marge", 1)), rounds=3, training_data=training_data
    )
    with CheckpointManager(smoke_run / "checkpoints") as manager:  # the state after round 1
        state = llome_state._state_from_checkpoint(
            *manager.restore(1, abstract_state(_runtime(cfg), cfg, 1))
        )
    seen: dict[str, np.ndarray] = {}
    from llome_jax.llome import refine

    real_data, real_refine = finetune.training_data, refine.iterative_refinement

    def training_data_spy(key, rt, cfg_, loss, x, v):
        seen["train"] = np.asarray(x)
        return real_data(key, rt, cfg_, loss, x, v)

    def refine_spy(key, policy, codec, fn, seeds, *args, **kwargs):
        seen["seeds"] = np.asarray(seeds)
        return real_refine(key, policy, codec, fn, seeds, *args, **kwargs)

    monkeypatch.setattr(finetune, "training_data", training_data_spy)
    monkeypatch.setattr(llome_round_module, "iterative_refinement", refine_spy)  # as round calls it
    llome_round(state, _runtime(cfg), cfg)
    archive = np.asarray(state.archive_sequences)
    latest = archive[np.asarray(state.archive_rounds) == 1]
    expected = archive if training_data == "cumulative" else latest
    np.testing.assert_array_equal(seen["train"], expected)
    # seeds are the top of that set: every seed is one of its rows
    pool = {tuple(row) for row in expected.tolist()}
    assert all(tuple(row) in pool for row in seen["seeds"].tolist())
    assert len(archive) > len(latest)


@pytest.mark.parametrize(
    ("exclude_labelled", "hd", "reset", "grid"),
    [(True, 0.09, False, (1.2, 1.6)), (False, 0.05, False, (1.4, 1.8)), (True, 0.05, True, None)],
    ids=["hd-0.09", "hd-0.05-labelled-allowed", "phase-reset"],
)
def test_round_temperatures_and_novel_candidates(
    smoke_run: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    exclude_labelled: bool,
    hd: float,
    reset: bool,
    grid: tuple[float, float] | None,
) -> None:
    """Round 2 from the state after round 1 with its ``mean_hamming`` set to ``hd`` (training
    frozen: the round-1 policy refines). The smoke grid (0.8, 1.2) moves by +0.4 for
    0.075 <= hd < 0.1 and +0.6 for hd < 0.075, unless the phase changes (SFT -> MargE) with
    ``reset_temperature_at_phase``. ``num_novel`` counts the round's unique candidates that are
    not in the archive, ``frac_novel`` divides by ``num_unique`` (both Filter settings)."""
    from llome_jax.llome import refine

    cfg = preset(
        "smoke",
        schedule=(("sft", 1), ("marge", 1)),
        rounds=2,
        exclude_labelled=exclude_labelled,
        reset_temperature_at_phase=reset,
    )
    with CheckpointManager(smoke_run / "checkpoints") as manager:  # the state after round 1
        state = llome_state._state_from_checkpoint(
            *manager.restore(1, abstract_state(_runtime(cfg), cfg, 1))
        )
    state = dataclasses.replace(state, mean_hamming=jnp.asarray(hd, jnp.float32))

    def frozen(key, rt, cfg_, loss, data, params, *args, **kwargs):
        return params, state.opt_state, 0.0, {"train_steps": 0, "learning_rate": 0.0}

    grids: list[tuple[float, ...]] = []
    real_refine = refine.iterative_refinement

    def refine_spy(key, policy, codec, fn, seeds, temperatures, *args, **kwargs):
        grids.append(tuple(temperatures))
        return real_refine(key, policy, codec, fn, seeds, temperatures, *args, **kwargs)

    monkeypatch.setattr(finetune, "train", frozen)
    monkeypatch.setattr(llome_round_module, "iterative_refinement", refine_spy)  # as round calls it
    logs: list[dict[str, Any]] = []
    new_state, metrics = llome_round(state, _runtime(cfg), cfg, on_candidates=logs.append)

    offset = {(1.2, 1.6): 0.4, (1.4, 1.8): 0.6, None: 0.0}[grid]
    assert grids == [grid or (0.8, 1.2)]
    assert metrics["temperature_offset"] == offset
    assert float(new_state.temperature_offset) == pytest.approx(offset)
    (log,) = logs  # every sampled candidate carries one of the grid's temperatures (0: greedy)
    assert set(np.unique(log["temperature"]).tolist()) == set(
        np.float32([0.0, *(grid or (0.8, 1.2))]).tolist()
    )

    labelled = {row.tobytes() for row in np.asarray(state.archive_sequences, np.int32)}
    candidates = np.asarray(log["sequences"], np.int32)
    novel = sum(row.tobytes() not in labelled for row in candidates)
    assert 0 < novel < len(candidates)  # some candidates repeat labelled sequences (seeds)
    assert metrics["num_unique"] == len(candidates)
    assert metrics["num_novel"] == novel
    assert metrics["frac_novel"] == novel / len(candidates)


def test_schedule_parsing() -> None:
    assert parse_schedule("sft:1,marge:9") == (("sft", 1), ("marge", 9))
    assert parse_schedule(" SFT:2 , dpo:1 ") == (("sft", 2), ("dpo", 1))
    # Canonical (independent of --rounds, so a resume with more rounds keeps the configuration).
    assert schedule_for_loss("marge", 10) == (("sft", 1), ("marge", 1))
    assert schedule_for_loss("sft") == (("sft", 1),)
    assert schedule_for_loss("DPO") == (("sft", 1), ("dpo", 1))
    schedule = (("sft", 1), ("dpo", 2))
    assert [loss_for_round(schedule, r) for r in range(1, 6)] == [
        "sft",
        "dpo",
        "dpo",
        "dpo",
        "dpo",
    ]
    for bad in ("", "sft", "sft:0", "sft:x", "ppo:3", "marge:-1"):
        with pytest.raises(ValueError):
            parse_schedule(bad)
    with pytest.raises(ValueError, match="unknown loss"):
        schedule_for_loss("ppo", 3)
    with pytest.raises(ValueError):
        loss_for_round(schedule, 0)
    cfg = preset("cpu")
    assert cfg.schedule == (("sft", 1), ("marge", 9)) and cfg.labels_per_round == 2000
    assert cfg.rounds == 10 and cfg.round0_generations == 10 and cfg.function == "f2"
    assert hash(cfg) == hash(preset("cpu"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--function", "f9"], "unknown function"),
        (["--loss", "ppo"], "invalid choice: 'ppo'"),
        (["--schedule", "sft:1,ppo:2"], "unknown loss"),
        (["--preset", "gpu"], "invalid choice: 'gpu'"),
        (["--preset", "paper"], "--weights"),
        (["--rounds", "0"], "--rounds"),
    ],
)
def test_bad_input_is_refused_before_writing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    out = tmp_path / "run"
    assert cli.main([*SMOKE, "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_bad_weights_dir_is_refused(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    weights = tmp_path / "weights"
    argv = [*SMOKE, "--preset", "paper", "--out", str(out), "--weights", str(weights)]
    assert cli.main(argv) == 2
    assert "no such directory" in capsys.readouterr().err
    weights.mkdir()
    assert cli.main(argv) == 2
    assert "no config.json" in capsys.readouterr().err
    (weights / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert cli.main(argv) == 2
    assert "not 'gpt_neox'" in capsys.readouterr().err
    assert not out.exists()


def test_resume_with_another_configuration_changes_nothing(
    smoke_run: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    before = _digest(smoke_run)
    argv = [*SMOKE, "--rounds", "2", "--loss", "marge", "--out", str(smoke_run), "--resume"]
    assert cli.main([*argv[:-1], "--seed", "1", "--resume"]) == 2
    assert "configuration differs" in capsys.readouterr().err
    assert cli.main([*SMOKE, "--rounds", "2", "--loss", "dpo", "--out", str(smoke_run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert _digest(smoke_run) == before


_EPS32 = float(np.finfo(np.float32).eps)


def _flat(tree: Any) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def _recording_second_moments(moments: list[np.ndarray]) -> Any:
    """Wrap ``finetune.train_step`` so that RMSprop's ``nu`` after every step is recorded
    (flat)."""
    real = finetune.train_step

    def train_step(rt: Any, cfg: Any, loss: str, opt_config: Any) -> Any:
        step = real(rt, cfg, loss, opt_config)

        def recorded(state: Any, batch: Any, hparams: Any) -> Any:
            state, metrics = step(state, batch, hparams)
            # a host copy now: the next step donates the state
            moments.append(_flat(optax.tree_utils.tree_get(state.opt_state, "nu")))
            return state, metrics

        return recorded

    return train_step


def test_data_parallel_training_equals_single_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """One epoch of DPO training (triples, reference log-probs, RMSprop) sharded over the 8 fake
    devices == on one device (MargE/SFT run end to end in the smoke run), up to what float32
    reduction order can change."""
    assert jax.device_count() == 8
    single = preset("smoke", max_train_examples=64)
    sharded = single.replace(data_parallel=True)
    state = _init_state(single)
    x, v = state.latest()
    moments: list[np.ndarray] = []  # the single-device run's
    results = []
    for cfg in (single, sharded):
        data = finetune.training_data(jax.random.key(1), _runtime(cfg), cfg, "dpo", x, v)
        assert data["units"] == 64 and data["num_candidates"] > 64
        with monkeypatch.context() as patch:
            if cfg is single:
                patch.setattr(finetune, "train_step", _recording_second_moments(moments))
            params, _, loss, _ = finetune.train(
                jax.random.key(2), _runtime(cfg), cfg, "dpo", data, state.params, False, 1
            )
        results.append((_flat(params), loss, data))
    assert _runtime(sharded).mesh is not None and _runtime(single).mesh is None
    (p1, l1, d1), (p8, l8, d8) = results
    # The training data does not see the mesh and is integer work (Hamming neighbours, value
    # comparisons on the exact Ehrlich grid, key-driven shuffles): identical.
    for name in ("ids", "tmask", "amask"):
        for a, b in zip(d1[name], d8[name], strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(d1["reward"], d8["reward"])

    # Parameters: RMSprop's update lr_t g / (sqrt(nu_t) + eps) is scale-free in g, so an absolute
    # gradient error dg moves it by up to ~2 dg / (sqrt(nu_t) + eps) (one term through g, one
    # through nu). dg: the clipped gradient has global norm <= max_grad_norm = 1, so every element
    # is <= 1 and a reordered float32 reduction (sharded batch, sharded reference log-probs) moves
    # it by a few ulps of 1: 64 ulps (~12x the largest effective difference measured on x86).
    # Elements with a near-zero gradient are ill-conditioned and get a wide tolerance (this is
    # where the old "all to 1e-3" bound was nearly reached: 4e-4); plus one float32 rounding of
    # the parameter per step.
    assert single.finetune.max_grad_norm == 1.0
    opt_config = finetune.optimizer_config(single, "dpo", len(moments))
    schedule = train_optimizer.learning_rate_schedule(opt_config)
    dg = 64 * _EPS32 * single.finetune.max_grad_norm
    tol = sum(
        float(schedule(t)) * 2 * dg / (np.sqrt(nu) + opt_config.rms_eps)
        for t, nu in enumerate(moments)
    ) + len(moments) * np.spacing(np.abs(p1))
    diff = np.abs(p8 - p1)
    np.testing.assert_array_less(diff, tol)
    # informative: RMSprop's first step moves every parameter by ~10 lr = 1e-2, and a semantic
    # error (per-device normalisation, mis-paired chosen/rejected rows) changes most updates by
    # O(a step); the median tolerance is below a tenth of a step (3.6 % measured)
    first_step = 10 * float(schedule(0))
    assert np.median(tol) < 0.1 * first_step
    # The mean DPO loss: -log sigmoid(z), z = beta (pi_w - r_w - pi_l + r_l) with summed
    # log-probs; each of the four moves by <= 16 ulps of the largest |sum_logp| under another
    # reduction order, so z by <= 4 beta that and the loss by <= half of it (sigmoid' <= 1/2).
    # (Step 2 also sees the parameter differences bounded above; they are large only where the
    # gradient, hence the loss's sensitivity, is ~0.) Measured: 1.2e-7 of a 7.2e-5 bound.
    ids, tmask, amask = (np.concatenate(d1[k]) for k in ("ids", "tmask", "amask"))
    ref = dataset_logprobs.compute_logprobs(
        finetune.training_model(_runtime(single), single, "dpo"), state.params, ids, tmask, amask
    )
    logp_tol = 16 * _EPS32 * float(np.abs(np.asarray(ref.sum_logp)).max())
    beta = float(finetune.loss_params(single, "dpo").beta)
    assert abs(l1 - l8) <= 2 * beta * logp_tol


def test_weights_dir_loads_model_and_tokenizer(tmp_path: pathlib.Path) -> None:
    """``--weights DIR`` (an HF GPT-NeoX directory with its tokenizer) feeds the loop's model."""
    from flax import nnx
    from safetensors.numpy import save_file

    from llome_jax.lm.convert import hf_config_dict, hf_tensors
    from llome_jax.lm.pythia import Pythia, PythiaConfig
    from llome_jax.lm.tokenizer import make_ehrlich_tokenizer

    cfg = preset("smoke")
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    tokenizer = make_ehrlich_tokenizer(fn.config.num_states)
    model = Pythia(PythiaConfig.preset("tiny", vocab_size=len(tokenizer)), rngs=nnx.Rngs(7))
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps(hf_config_dict(model.config)))
    save_file(hf_tensors(model), str(weights / "model.safetensors"))
    tokenizer.save_pretrained(weights)

    with_weights = cfg.replace(weights=str(weights))
    loop.validate_config(with_weights)
    state = _init_state(with_weights)
    assert _runtime(with_weights).codec.vocab_size == len(tokenizer)
    expected = initial_params(model)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
