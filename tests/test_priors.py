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
    with pytest.raises(ValueError, match="shipped priors: \\['ehr32-32-4-4-4'\\]"):
        priors.resolve("prior:nope")
    assert priors.is_prior("prior:ehr32-32-4-4-4") and not priors.is_prior("/some/dir")


def test_the_prior_was_pretrained_on_other_instances_of_f2s_configuration() -> None:
    from llome_jax.llome.pretrain import MIN_INSTANCE_SEED

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


def test_the_prior_predicts_improving_edits_on_an_unseen_instance() -> None:
    """Mean log-likelihood per target token of the better sequence of PropEn pairs of
    ``Ehr(32,32)-4-4-4`` instance 5 (never pretrained on): the prior vs the ``cpu`` preset's
    untrained model. Copying the input alone is worth about ``log(1/32)`` per changed state;
    a random model is near ``log(1/vocab)`` on every token."""
    from llome_jax import ehrlich, ga
    from llome_jax.llome.data import propen_pairs
    from llome_jax.llome.presets import preset
    from llome_jax.llome.runtime import Runtime
    from llome_jax.train import compute_logprobs

    fn = ehrlich.resolve_function("Ehr(32,32)-4-4-4", 5)
    x0 = ehrlich.resolve_initial_solution("Ehr(32,32)-4-4-4", 5)
    archive = ga.run_archive(jax.random.key(0), fn, x0, 3, ga.GAConfig(num_particles=300))
    sequences, values, _ = archive.to_numpy()
    pairs = propen_pairs(jax.random.key(1), sequences, values)
    x, y = pairs.gather(sequences)
    x, y = x[:128], y[:128]
    scores = {}
    for name in ("cpu-pretrained", "cpu"):
        rt = Runtime.build(preset(name, function="Ehr(32,32)-4-4-4", instance_seed=5))
        ids, tmask, amask = rt.codec.encode_pairs(x, y)
        logp = compute_logprobs(rt.model, None, ids, tmask, amask, batch_size=128)
        scores[name] = float(np.sum(logp.sum_logp) / np.sum(logp.num_tokens))
    assert len(x) == 128
    # measured: untrained -3.73, the prior -0.96 (its training loss: 0.27 a token)
    assert scores["cpu"] < -3.0, scores  # untrained: about log(1/vocab) per token
    assert scores["cpu-pretrained"] > -1.5, scores
