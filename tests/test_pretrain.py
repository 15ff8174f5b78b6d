"""``llome-jax pretrain`` (issue 37): the instance-seed contract, vmapped data generation, exact
resume, weights that ``llome --weights`` loads, and the command's one-line errors.

Everything runs the ``smoke`` pretraining preset (Ehr(8,8)-2-2-2, 3 instances, the ``tiny``
Pythia, 12 steps); one uninterrupted run is shared by the module (``full``).
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax import cli, ehrlich
from llome_jax.ga import loop as ga_loop
from llome_jax.llome import pretrain, pretrain_config, pretrain_data
from llome_jax.llome.pretrain_config import MIN_INSTANCE_SEED, PretrainConfig
from llome_jax.llome.runtime import named_key


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _leaves_equal(a: object, b: object) -> bool:
    left, right = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(left) == len(right) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(left, right)
    )


@pytest.fixture(scope="module")
def smoke() -> PretrainConfig:
    return pretrain_config.preset("smoke")


@pytest.fixture(scope="module")
def full(
    smoke: PretrainConfig, tmp_path_factory: pytest.TempPathFactory
) -> pretrain.PretrainResult:
    """One uninterrupted smoke run."""
    out = tmp_path_factory.mktemp("pretrain") / "full"
    return pretrain.run(smoke, out, progress=False, log=lambda _: None)


# ---------------------------------------------------------------------------------------------
# Configuration: the evaluation seeds are refused
# ---------------------------------------------------------------------------------------------
def test_seeds_below_one_million_are_refused() -> None:
    for seed in (0, 1, 102, MIN_INSTANCE_SEED - 1):
        with pytest.raises(ValueError, match="kept for evaluation"):
            PretrainConfig(first_instance_seed=seed)
    with pytest.raises(ValueError, match="kept for evaluation"):
        pretrain_config.preset("smoke", first_instance_seed=999_999)
    ok = PretrainConfig(first_instance_seed=MIN_INSTANCE_SEED, num_instances=3)
    assert ok.instance_seeds == [1_000_000, 1_000_001, 1_000_002]
    with pytest.raises(ValueError, match="32-bit"):
        PretrainConfig(first_instance_seed=2**31 - 2, num_instances=3)
    with pytest.raises(ValueError, match="one instance"):
        PretrainConfig(function="instance.json")
    with pytest.raises(ValueError, match="triples"):
        PretrainConfig(loss="dpo")
    with pytest.raises(ValueError, match="checkpoint gate"):
        PretrainConfig().replace(**{"finetune.select_checkpoint": True})
    assert PretrainConfig(function="f2").function == "Ehr(32,32)-4-4-4"


def test_defaults_are_the_cpu_presets_model_and_round_one_training() -> None:
    from llome_jax.llome.presets import PRESETS

    cpu, cfg = PRESETS["cpu"], PretrainConfig()
    assert (cfg.model, cfg.text_format) == (cpu["model"], cpu["text_format"])
    assert cfg.finetune.learning_rate == cpu["finetune"]["first_round_learning_rate"]
    assert cfg.finetune.batch_size == cpu["finetune"]["batch_size"]
    assert cfg.finetune.head_on_targets == cpu["finetune"]["head_on_targets"]
    assert cfg.loss == "sft" and cfg.function == "Ehr(32,32)-4-4-4"
    assert cfg.first_instance_seed == MIN_INSTANCE_SEED


def test_balanced_subset_gives_each_value_level_its_share() -> None:
    key = jax.random.key(3)
    values = np.array([0.25] * 90 + [0.5] * 10, np.float32)
    rows = pretrain_data.balanced_subset(key, values, 20)
    assert rows.size == 20 and np.all(np.diff(rows) > 0)
    assert np.sum(values[rows] == 0.5) == 10 and np.sum(values[rows] == 0.25) == 10
    # a small group is taken whole, the rest shared by the others
    values = np.array([0.0] * 50 + [0.25] * 40 + [1.0] * 2, np.float32)
    rows = pretrain_data.balanced_subset(key, values, 30)
    counts = {v: int(np.sum(values[rows] == v)) for v in (0.0, 0.25, 1.0)}
    assert counts == {0.0: 14, 0.25: 14, 1.0: 2}
    assert np.array_equal(pretrain_data.balanced_subset(key, values, None), np.arange(values.size))
    assert not np.array_equal(rows, pretrain_data.balanced_subset(jax.random.key(4), values, 30))


# ---------------------------------------------------------------------------------------------
# Data generation: one vmapped GA call per chunk, equal to a Python loop over ga_loop.run_archive
# ---------------------------------------------------------------------------------------------
def test_data_generation_is_vmapped_and_equals_a_loop(
    smoke: PretrainConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = smoke.replace(instances_per_call=2)  # 3 instances: a full chunk and a padded one
    fns, x0s = pretrain_data.make_instances(cfg)
    for seed, fn, x0 in zip(cfg.instance_seeds, fns, x0s):
        expected = ehrlich.resolve_function(cfg.function, seed)
        assert _leaves_equal(fn, expected)
        assert np.array_equal(x0, ehrlich.resolve_initial_solution(cfg.function, seed))
    key = jax.random.key(11)
    keys = pretrain_data.instance_keys(named_key(key, "ga"), cfg.instance_seeds)  # generate_data's
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *fns)
    archives = pretrain_data.ga_archives(
        keys, stacked, jnp.asarray(x0s), cfg.ga_generations, cfg.ga
    )
    for i in range(cfg.num_instances):
        loop = ga_loop.run_archive(keys[i], fns[i], x0s[i], cfg.ga_generations, cfg.ga)
        one = jax.tree.map(lambda leaf, i=i: leaf[i], archives)
        assert int(one.count) == int(loop.count)
        n = int(loop.count)
        np.testing.assert_array_equal(np.asarray(one.sequences), np.asarray(loop.sequences))
        np.testing.assert_array_equal(np.asarray(one.values)[:n], np.asarray(loop.values)[:n])
        np.testing.assert_array_equal(np.asarray(one.generations), np.asarray(loop.generations))
    assert len({int(c) for c in archives.count}) > 1 or not np.array_equal(
        np.asarray(archives.sequences[0]), np.asarray(archives.sequences[1])
    )

    calls: list[int] = []
    vmapped = pretrain_data.ga_archives

    def counting(keys, fns, x0s, num_generations, config):
        calls.append(int(keys.shape[0]))
        return vmapped(keys, fns, x0s, num_generations, config)

    monkeypatch.setattr(pretrain_data, "ga_archives", counting)
    data = pretrain_data.generate_data(key, cfg)
    assert calls == [2, 2]  # two jitted calls over instances, the second padded
    assert len(data) == int(data.num_pairs.sum()) > 0
    assert np.all(data.num_pairs <= cfg.max_pairs_per_instance)
    for i, fn in enumerate(fns):
        rows = data.instance == i
        assert rows.sum() == data.num_pairs[i]
        f_in = np.asarray(ehrlich.evaluate(fn, data.inputs[rows]))
        f_out = np.asarray(ehrlich.evaluate(fn, data.targets[rows]))
        np.testing.assert_array_equal(f_out, data.target_value[rows])
        np.testing.assert_array_equal(f_in, data.input_value[rows])
        assert np.all(f_out > f_in)
        # every pair comes from this instance's own GA archive
        archive = {tuple(r) for r in np.asarray(archives.sequences[i, : int(archives.count[i])])}
        assert all(tuple(r) in archive for r in data.targets[rows])


# ---------------------------------------------------------------------------------------------
# Run directory, resume, weights
# ---------------------------------------------------------------------------------------------
def test_run_directory_files(smoke: PretrainConfig, full: pretrain.PretrainResult) -> None:
    path = full.path
    config = json.loads((path / "config.json").read_text())
    assert config["optimizer"] == "pretrain"
    assert config["instance_seeds"] == {"first": 1_000_000, "last": 1_000_002, "count": 3}
    assert config["seconds"] > config["seconds_data"] > 0
    rows = (path / "losses.csv").read_text().splitlines()
    assert rows[0] == "step,loss" and [int(r.split(",")[0]) for r in rows[1:]] == list(
        range(1, smoke.max_steps + 1)
    )
    losses = [float(r.split(",")[1]) for r in rows[1:]]
    assert np.all(np.isfinite(losses)) and np.mean(losses[-3:]) < losses[0]
    assert (path / "loss.png").stat().st_size > 0
    assert full.steps == smoke.max_steps
    info = json.loads((full.weights / "pretrain.json").read_text())
    assert info["text_format"] == "list" and info["instance_seeds"]["first"] == 1_000_000
    # pretrain.json is the code's alone (issue 53): the weights' sha256, the pool's pair count,
    # the last epoch's mean loss, the instances' label digests, the invocation's provenance
    import hashlib

    from llome_jax.ehrlich.instances import label_digest

    weights_bytes = (full.weights / "model.safetensors").read_bytes()
    assert info["sha256"] == {"model.safetensors": hashlib.sha256(weights_bytes).hexdigest()}
    summary = json.loads((path / "summary.json").read_text())
    pool = pretrain_data.PretrainData.load(path / pretrain.DATA_FILE)
    assert info["num_pairs"] == len(pool) == summary["num_pairs"] > 0
    assert (info["steps"], info["seed"]) == (smoke.max_steps, smoke.seed)
    tail = losses[-summary["steps_per_epoch"] :]
    assert info["final_loss_mean"] == pytest.approx(float(np.mean(tail)), rel=1e-12)
    assert info["label_digests"] == [
        label_digest(ehrlich.resolve_function("Ehr(8,8)-2-2-2", s))[7:23]
        for s in (1_000_000, 1_000_001, 1_000_002)
    ]
    assert info["provenance"] == config["provenance"] and len(info["provenance"]) == 1
    assert info["commit"] == config["provenance"][0]["commit"]
    assert (
        info["versions"]["jax"] == jax.__version__ and info["versions"]["numpy"] == np.__version__
    )
    assert info["command"] and info["seconds_data"] == config["seconds_data"]
    # every weights file is readable by others, as an ordinary new file (safetensors: 0o600)
    modes = {f.name: f.stat().st_mode & 0o777 for f in full.weights.iterdir() if f.is_file()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o666 & ~_umask(), modes


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_interrupted_run_resumes_to_the_same_weights(
    smoke: PretrainConfig, full: pretrain.PretrainResult, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "interrupted"

    class CrashError(Exception):
        pass

    def crash_at_7(step: int) -> None:
        if step == 7:
            raise CrashError

    with pytest.raises(CrashError):
        pretrain.run(smoke, out, progress=False, on_step=crash_at_7, log=lambda _: None)
    assert not (out / "weights").exists()
    from llome_jax.run.checkpoint import CheckpointManager

    with CheckpointManager(out / "checkpoints") as ckpt:
        assert ckpt.latest_step() == 5  # checkpoint_every 5
    # a crash after the losses of steps 6-7 were written, before their checkpoint
    with open(out / "losses.csv", "a") as stream:
        stream.write("6,123.0\n7,456.0\n")
    steps: list[int] = []
    resumed = pretrain.run(
        smoke, out, resume=True, progress=False, on_step=steps.append, log=lambda _: None
    )
    assert steps == list(range(6, smoke.max_steps + 1))  # from the checkpoint, not from 0
    assert resumed.steps == smoke.max_steps
    assert _leaves_equal(resumed.params, full.params)
    assert (out / "losses.csv").read_bytes() == (full.path / "losses.csv").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert len(config["provenance"]) == 2
    # the same weights, byte for byte: the same recorded sha256; both invocations recorded
    resumed_info = json.loads((out / "weights" / "pretrain.json").read_text())
    full_info = json.loads((full.weights / "pretrain.json").read_text())
    assert resumed_info["sha256"] == full_info["sha256"]
    assert resumed_info["provenance"] == config["provenance"]
    # a finished run resumes without training more
    steps.clear()
    again = pretrain.run(
        smoke, out, resume=True, progress=False, on_step=steps.append, log=lambda _: None
    )
    assert steps == []
    assert _leaves_equal(again.params, full.params)
    assert (out / "losses.csv").read_bytes() == (full.path / "losses.csv").read_bytes()


def test_weights_load_through_the_llome_weights_path(
    smoke: PretrainConfig, full: pretrain.PretrainResult
) -> None:
    """``Runtime.build`` with ``weights`` (what ``llome --weights DIR`` runs) gives the trained
    model's logits, and its tokenizer encodes like the pretraining codec."""
    from llome_jax.llome.presets import preset
    from llome_jax.llome.runtime import Runtime, initial_params, model_with
    from llome_jax.lm import convert

    rt = Runtime.build(preset("smoke", weights=str(full.weights)))
    trained_rt = Runtime.build(pretrain_config.loop_config(smoke))
    data = pretrain_data.PretrainData.load(full.path / pretrain.DATA_FILE)
    ids, _, amask = trained_rt.codec.encode_pairs(data.inputs[:8], data.targets[:8])
    loaded_ids, _, _ = rt.codec.encode_pairs(data.inputs[:8], data.targets[:8])
    np.testing.assert_array_equal(loaded_ids, ids)
    logits = np.asarray(rt.model(jnp.asarray(ids), attention_mask=jnp.asarray(amask)))
    trained = model_with(trained_rt.model, full.params)
    expected = np.asarray(trained(jnp.asarray(ids), attention_mask=jnp.asarray(amask)))
    np.testing.assert_array_equal(logits, expected)
    initial = np.asarray(trained_rt.model(jnp.asarray(ids), attention_mask=jnp.asarray(amask)))
    assert np.abs(initial - expected).max() > 1e-3  # the trained weights, not the initial ones
    # the safetensors copy holds the same weights (for transformers)
    hf = convert.load_hf(full.weights)
    assert _leaves_equal(initial_params(hf), initial_params(rt.model))
    # the weights carry the Ehrlich tokenizer, so a run may read them in the compact format
    compact = Runtime.build(preset("smoke", weights=str(full.weights), text_format="compact"))
    assert compact.codec.separators is False and rt.codec.separators is True


def test_marge_pretraining_scores_the_initial_model_as_reference(
    smoke: PretrainConfig, full: pretrain.PretrainResult, tmp_path: pathlib.Path
) -> None:
    """MargE (a loss with a reference): two steps run, and the batch's reference log-probs are
    the initial model's on exactly those rows."""
    from llome_jax.llome.runtime import Runtime, initial_params
    from llome_jax.training.dataset_logprobs import compute_logprobs

    cfg = smoke.replace(loss="marge", max_steps=2, checkpoint_every=1)
    result = pretrain.run(cfg, tmp_path / "marge", progress=False, log=lambda _: None)
    rows = (tmp_path / "marge" / "losses.csv").read_text().splitlines()[1:]
    assert len(rows) == 2 and all(np.isfinite(float(r.split(",")[1])) for r in rows)
    rt = Runtime.build(pretrain_config.loop_config(cfg))
    assert not _leaves_equal(result.params, initial_params(rt.model))
    data = pretrain_data.PretrainData.load(full.path / pretrain.DATA_FILE)
    batches = pretrain._Batches(jax.random.key(0), rt, cfg, data)
    batch = batches(0, initial_params(rt.model))
    units = batches.units(0)
    ids, tmask, amask = rt.codec.encode_pairs(data.inputs[units], data.targets[units])
    expected = compute_logprobs(rt.model, None, ids, tmask, amask, target_window=None)
    np.testing.assert_allclose(np.asarray(batch.reference.sum_logp), expected.sum_logp, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(batch.loss.reward), data.reward[units])


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------
def _error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


def test_cli_errors_are_one_line_and_write_nothing(
    capsys: pytest.CaptureFixture, tmp_path: pathlib.Path, full: pretrain.PretrainResult
) -> None:
    out = tmp_path / "run"
    base = ["pretrain", "--preset", "smoke", "--no-progress"]
    cases = {
        "kept for evaluation": [*base, "--first-instance-seed", "999999", "--out", str(out)],
        "num_instances must be an integer >= 1": [*base, "--instances", "0", "--out", str(out)],
        "one instance": [*base, "--function", "inst.json", "--out", str(out)],
        "cannot parse Ehrlich name": [*base, "--function", "Ehr(8)", "--out", str(out)],
        "trains on preference triples": [*base, "--loss", "dpo", "--out", str(out)],
        "unknown loss": [*base, "--loss", "nope", "--out", str(out)],
        "--out DIR is required": base,
        "unknown setting 'nosuch'": [*base, "--set", "nosuch=1", "--out", str(out)],
        "cannot resume": [*base, "--resume", "--out", str(out)],
    }
    for expected, argv in cases.items():
        assert expected in _error(capsys, argv), argv
        assert not out.exists(), argv
    afile = tmp_path / "file"
    afile.write_text("x")
    assert "is a file" in _error(capsys, [*base, "--out", str(afile)])

    before = _files(full.path)
    assert "already holds a run" in _error(capsys, [*base, "--out", str(full.path)])
    changed = [*base, "--resume", "--out", str(full.path), "--set", "seed=1"]
    assert "configuration differs" in _error(capsys, changed)
    assert "made with --preset smoke" in _error(
        capsys, ["pretrain", "--preset", "cpu", "--resume", "--out", str(full.path)]
    )
    assert _files(full.path) == before

    capsys.readouterr()
    assert cli.main([*base, "--instances", "5", "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["instance_seeds"] == {"first": 1_000_000, "last": 1_000_004, "count": 5}
    assert shown["num_instances"] == 5 and shown["optimizer"] == "pretrain"
