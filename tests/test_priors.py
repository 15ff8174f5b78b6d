"""The shipped prior (``llome_jax.priors``) and the ``cpu-pretrained`` preset: the files load
through ``weights="prior:NAME"``, the prior was made under the information contract (instance
seeds >= 1,000,000), and it has learnt something that transfers: on PropEn pairs of an instance
it never saw, it predicts the better sequence far better than the untrained model."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from llome_jax import priors


def test_unknown_prior_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"shipped priors: \['ehr32-32-4-4-4', 'ehr32-64-4-4-4'\]"):
        priors.resolve("prior:nope")
    assert priors.is_prior("prior:ehr32-32-4-4-4") and not priors.is_prior("/some/dir")


def test_the_prior_was_pretrained_on_other_instances_of_f2s_configuration() -> None:
    from llome_jax.llome.pretrain_config import MIN_INSTANCE_SEED

    info = json.loads((priors.resolve("prior:" + priors.DEFAULT) / "pretrain.json").read_text())
    assert info["function"] == "Ehr(32,32)-4-4-4"
    assert info["instance_seeds"]["first"] >= MIN_INSTANCE_SEED
    assert info["text_format"] == "compact" and info["model"] == "tiny"


def test_cpu_pretrained_differs_from_cpu_only_in_the_start_and_round_one() -> None:
    from llome_jax import configs
    from llome_jax.llome.presets import preset

    cpu, pre = configs.to_dict(preset("cpu")), configs.to_dict(preset("cpu-pretrained"))
    flat_cpu, flat_pre = configs.flatten(preset("cpu"), cpu), configs.flatten(preset("cpu"), pre)
    differing = {k for k in set(flat_cpu) | set(flat_pre) if flat_cpu.get(k) != flat_pre.get(k)}
    assert differing == {
        "weights",
        "preset",
        "finetune.first_round_learning_rate",
        "finetune.first_round_epochs",
        "finetune.first_round_min_steps",
    }


# measured (instance 5): the Ehr(32,32) prior -0.96 (its training loss 0.27 a token), the
# Ehr(32,64) prior -0.54 (training loss 0.21); untrained -3.73 / -3.74
@pytest.mark.parametrize(
    ("function", "prior", "floor"),
    [("Ehr(32,32)-4-4-4", "ehr32-32-4-4-4", -1.5), ("Ehr(32,64)-4-4-4", "ehr32-64-4-4-4", -1.2)],
)
def test_the_prior_predicts_improving_edits_on_an_unseen_instance(function, prior, floor) -> None:
    """Mean log-likelihood per target token of the better sequence of PropEn pairs of instance 5
    (never pretrained on) of the prior's configuration: the prior vs the ``cpu`` preset's
    untrained model. Copying the input alone is worth about ``log(1/32)`` per changed state;
    a random model is near ``log(1/vocab)`` on every token."""
    from llome_jax import ehrlich, ga
    from llome_jax.ga import loop as ga_loop
    from llome_jax.llome.data import propen_pairs
    from llome_jax.llome.presets import preset
    from llome_jax.llome.runtime import Runtime
    from llome_jax.training.dataset_logprobs import compute_logprobs

    fn = ehrlich.resolve_function(function, 5)
    x0 = ehrlich.resolve_initial_solution(function, 5)
    archive = ga_loop.run_archive(jax.random.key(0), fn, x0, 3, ga.GAConfig(num_particles=300))
    sequences, values, _ = archive.to_numpy()
    pairs = propen_pairs(jax.random.key(1), sequences, values)
    x, y = pairs.gather(sequences)
    x, y = x[:128], y[:128]
    scores = {}
    for name, weights in (("cpu-pretrained", priors.PREFIX + prior), ("cpu", None)):
        cfg = preset(name, function=function, instance_seed=5, weights=weights)
        rt = Runtime.build(cfg)
        ids, tmask, amask = rt.codec.encode_pairs(x, y)
        logp = compute_logprobs(rt.model, None, ids, tmask, amask, batch_size=128)
        scores[name] = float(np.sum(logp.sum_logp) / np.sum(logp.num_tokens))
    assert len(x) == 128
    assert scores["cpu"] < -3.0, scores  # untrained: about log(1/vocab) per token
    assert scores["cpu-pretrained"] > floor, scores


# ---------------------------------------------------------------------------------------------
# A prior that does not fit the run is refused before anything runs (one line, exit 2)
# ---------------------------------------------------------------------------------------------
def _llome_error(capsys: pytest.CaptureFixture, out, *argv: str) -> str:
    from llome_jax import cli

    capsys.readouterr()
    # --print-config: without the check the command returns 0 at once instead of running
    argv = ["llome", "--preset", "cpu-pretrained", *argv, "--out", str(out), "--print-config"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()  # nothing written
    return err


def test_a_prior_of_another_configuration_is_refused(capsys, tmp_path) -> None:
    err = _llome_error(capsys, tmp_path / "run", "--function", "f4")
    assert "pretrained on Ehr(32,32)-4-4-4 instances" in err
    assert "optimizes an instance of Ehr(32,128)-8-8-8" in err
    assert "llome-jax pretrain --function 'Ehr(32,128)-8-8-8'" in err


def test_a_prior_is_refused_on_an_instance_it_was_pretrained_on(capsys, tmp_path) -> None:
    argv = ["--function", "Ehr(32,32)-4-4-4", "--instance-seed", "1000255"]
    err = _llome_error(capsys, tmp_path / "run", *argv)
    assert "instance seeds 1,000,000-1,000,255, which include this run's instance 1,000,255" in err


def test_the_error_names_the_shipped_prior_of_the_configuration(capsys, tmp_path) -> None:
    """A prior given by the user is kept, and refused with the name of the one that fits."""
    from llome_jax.llome.config import validate_config
    from llome_jax.llome.presets import preset

    assert priors.shipped_for("Ehr(32,64)-4-4-4") == ["ehr32-64-4-4-4"]
    argv = ["--function", "Ehr(32,64)-4-4-4", "--instance-seed", "1"]
    for given in (["--weights", "prior:ehr32-32-4-4-4"], ["--set", "weights=prior:ehr32-32-4-4-4"]):
        err = _llome_error(capsys, tmp_path / "run", *argv, *given)
        assert err.strip().endswith("use --weights prior:ehr32-64-4-4-4"), err
    weights = "prior:ehr32-64-4-4-4"
    validate_config(
        preset("cpu-pretrained", function="Ehr(32,64)-4-4-4", instance_seed=1, weights=weights)
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "prior:ehr32-32-4-4-4"),
        (["--function", "f2"], "prior:ehr32-32-4-4-4"),
        (["--function", "Ehr(32,64)-4-4-4", "--instance-seed", "1"], "prior:ehr32-64-4-4-4"),
        (["--function", "Ehr( 32, 64 )-4-4-4", "--instance-seed", "1"], "prior:ehr32-64-4-4-4"),
        (
            ["--set", "function=Ehr(32,64)-4-4-4", "--set", "instance_seed=1"],
            "prior:ehr32-64-4-4-4",
        ),
    ],
)
def test_cpu_pretrained_starts_from_the_prior_of_the_functions_configuration(
    capsys, tmp_path, argv: list[str], expected: str
) -> None:
    from llome_jax import cli

    capsys.readouterr()
    cmd = ["llome", "--preset", "cpu-pretrained", *argv, "--out", str(tmp_path), "--print-config"]
    assert cli.main(cmd) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == expected


def test_prior_for_function_of_the_library() -> None:
    from llome_jax.llome.presets import preset, prior_for_function

    assert prior_for_function("f2") == prior_for_function("Ehr(32,32)-4-4-4") == "ehr32-32-4-4-4"
    assert prior_for_function("Ehr(32,64)-4-4-4") == "ehr32-64-4-4-4"
    # no prior of f4's configuration: the default, which check_prior_fits then refuses
    assert prior_for_function("f4") == prior_for_function("some/instance.json") == priors.DEFAULT
    cfg = preset("cpu-pretrained", function="Ehr(32,64)-4-4-4", instance_seed=3)
    assert cfg.weights == "prior:ehr32-64-4-4-4"


def test_a_prior_is_refused_in_another_text_format(capsys, tmp_path) -> None:
    err = _llome_error(capsys, tmp_path / "run", "--function", "f2", "--set", "text_format=list")
    assert "'compact' text format" in err and "--set text_format=compact" in err


def test_a_prior_fits_f2_and_the_instances_it_never_saw() -> None:
    from llome_jax.llome.config import validate_config
    from llome_jax.llome.presets import preset

    for function, instance in [
        ("f2", None),
        ("Ehr(32,32)-4-4-4", 999_999),
        ("Ehr(32,32)-4-4-4", 1_000_256),
    ]:
        validate_config(preset("cpu-pretrained", function=function, instance_seed=instance))


def test_a_pretrain_checkpoint_of_the_user_is_checked_and_the_hint_names_a_shipped_prior(
    tmp_path,
) -> None:
    """A ``llome-jax pretrain`` weights directory of another configuration: the error points to
    the shipped prior of the run's configuration; a checkpoint without ``pretrain.json`` (a
    Pythia download) is not checked."""
    import shutil

    from llome_jax.llome.config import check_prior_fits

    weights = tmp_path / "weights"
    shutil.copytree(priors.resolve("prior:" + priors.DEFAULT), weights)
    info = json.loads((weights / "pretrain.json").read_text())
    (weights / "pretrain.json").write_text(json.dumps({**info, "function": "Ehr(32,64)-4-4-4"}))
    with pytest.raises(ValueError, match=r"use --weights prior:ehr32-32-4-4-4$"):
        check_prior_fits(str(weights), "Ehr(32,32)-4-4-4", None, "compact")
    (weights / "pretrain.json").unlink()
    check_prior_fits(str(weights), "Ehr(32,128)-8-8-8", 1_000_000, "list")
