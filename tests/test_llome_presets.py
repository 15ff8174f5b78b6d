"""The ``paper`` preset is the paper's tables: every value against the appendix, read through the
loop's own functions (optimizer, loss parameters, batch sizes), not only the preset dict."""

from __future__ import annotations

import functools
import json
import math
import pathlib
from typing import Any

import jax
import numpy as np
import pytest

from llome_jax.llome import finetune, loop
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.presets import preset
from llome_jax.llome.runtime import Runtime, model_with
from llome_jax.llome.state import init_state

#: one runtime per configuration for the whole module (what the driver builds once per run)
_runtime = functools.cache(Runtime.build)


def _init_state(cfg: Any) -> Any:
    return init_state(jax.random.key(cfg.seed), _runtime(cfg), cfg)


# Transcribed from the paper (ICML 2025). Each row: (what, value read from the configuration,
# the paper's value, where the paper states it). Bold = the value the appendix's search chose.
APPENDIX_SFT = "App. 'LLM Training Details', paragraph SFT"
APPENDIX_DPO = "App. 'LLM Training Details', paragraph DPO"
APPENDIX_MARGE = "App. 'LLM Training Details', paragraph MargE"
PAPER_TABLE: list[tuple[str, Any, Any, str]] = [
    # SFT: "AdamW optimizer, with beta1=0.9, beta2=0.999, lambda=0.01, eps=1e-8"
    ("SFT optimizer", lambda c: finetune.optimizer_config(c, "sft", 10, 1).name, "adamw", APPENDIX_SFT),
    ("SFT beta1", lambda c: finetune.optimizer_config(c, "sft", 10, 1).b1, 0.9, APPENDIX_SFT),
    ("SFT beta2", lambda c: finetune.optimizer_config(c, "sft", 10, 1).b2, 0.999, APPENDIX_SFT),
    ("SFT weight decay", lambda c: finetune.optimizer_config(c, "sft", 10, 1).weight_decay, 0.01,
     APPENDIX_SFT),
    ("SFT eps", lambda c: finetune.optimizer_config(c, "sft", 10, 1).eps, 1e-8, APPENDIX_SFT),
    ("SFT learning rate (bold 1e-6)",
     lambda c: finetune.optimizer_config(c, "sft", 10, 1).learning_rate, 1e-6, APPENDIX_SFT),
    ("SFT batch size (bold 128)", lambda c: c.finetune.batch_size_for("sft"), 128, APPENDIX_SFT),
    # DPO: "RMSprop optimizer, with alpha=0.99, lambda=mu=0, eps=1e-8 ... we train with bf16"
    ("DPO optimizer", lambda c: finetune.optimizer_config(c, "dpo", 10).name, "rmsprop",
     APPENDIX_DPO),
    ("DPO alpha", lambda c: finetune.optimizer_config(c, "dpo", 10).rms_decay, 0.99, APPENDIX_DPO),
    ("DPO weight decay (lambda 0)",
     lambda c: finetune.optimizer_config(c, "dpo", 10).weight_decay, 0.0, APPENDIX_DPO),
    ("DPO eps", lambda c: finetune.optimizer_config(c, "dpo", 10).rms_eps, 1e-8, APPENDIX_DPO),
    ("DPO learning rate (bold 1e-7)",
     lambda c: finetune.optimizer_config(c, "dpo", 10).learning_rate, 1e-7, APPENDIX_DPO),
    ("DPO batch size (bold 64)", lambda c: c.finetune.batch_size_for("dpo"), 64, APPENDIX_DPO),
    ("DPO precision (bf16)", lambda c: c.finetune.dpo_compute_dtype, "bfloat16", APPENDIX_DPO),
    # MargE: "AdamW optimizer, with beta1=0.9, beta2=0.999, lambda=0.01, eps=1e-8"
    ("MargE optimizer", lambda c: finetune.optimizer_config(c, "marge", 10).name, "adamw",
     APPENDIX_MARGE),
    ("MargE weight decay", lambda c: finetune.optimizer_config(c, "marge", 10).weight_decay, 0.01,
     APPENDIX_MARGE),
    ("MargE learning rate (bold 1e-6)",
     lambda c: finetune.optimizer_config(c, "marge", 10).learning_rate, 1e-6, APPENDIX_MARGE),
    ("MargE batch size (bold 64)", lambda c: c.finetune.batch_size_for("marge"), 64, APPENDIX_MARGE),
    ("MargE lambda (bold 10)", lambda c: float(finetune.loss_params(c, "marge").kl_weight), 10.0,
     APPENDIX_MARGE),
    # "Self-Normalization": w~ = w / sum_{B} w (normalised to sum 1 over the batch)
    ("MargE self-normalised weights sum to 1",
     lambda c: float(finetune.loss_params(c, "marge").weights_sum_to_one), 1.0,
     "App. 'LLM Training Details', paragraph Self-Normalization"),
    # "If the hyperparameter set-up with the lowest validation loss does not output sequences
    # with the correct format >90% of the time, then we select the set-up with the next best
    # validation loss that meets these constraints" -- applied to each MargE/DPO round's checkpoints
    ("checkpoint selection with a >90 % format gate",
     lambda c: (c.finetune.select_checkpoint, c.finetune.selection_threshold,
                set(c.finetune.selection_losses)),
     (True, 0.9, {"marge", "dpo"}), "App. 'LLM Training Details', first paragraph"),
    # "We trained REINFORCE with the same best hyperparameters as MargE."
    ("REINFORCE learning rate",
     lambda c: finetune.optimizer_config(c, "reinforce", 10).learning_rate, 1e-6,
     "App. 'LLM Training Details', paragraph REINFORCE"),
    ("REINFORCE lambda", lambda c: float(finetune.loss_params(c, "reinforce").kl_weight), 10.0,
     "App. 'LLM Training Details', paragraph REINFORCE"),
    # Sec. 5 "LLOME Details": one epoch, Pythia 2.8B, SFT before MargE/DPO
    ("epochs per round", lambda c: c.finetune.epochs, 1, "Sec. 5 'Llome Details': 'for one epoch'"),
    ("base model", lambda c: c.model, "2.8b", "Sec. 5 'Llome Details': Pythia 2.8B"),
    ("first round is SFT, then MargE", lambda c: (c.loss(1), c.loss(2), c.loss(10)),
     ("sft", "marge", "marge"), "Sec. 5 'Llome Details': one round of SFT before MargE"),
    # Alg. 1 caption: n0 = 10, j = 2000, T = 10
    ("GA generations n0", lambda c: c.round0_generations, 10, "Alg. 1 caption"),
    ("labels per round j", lambda c: c.labels_per_round, 2000, "Alg. 1 caption"),
    ("rounds T", lambda c: c.rounds, 10, "Alg. 1 caption"),
    # Alg. IterativeRefinement caption: n_s = 200, n_i = 10, n_o = 10, T = [0.6, ..., 1.6]
    ("seeds n_s", lambda c: c.num_seeds, 200, "Alg. IterativeRefinement caption"),
    ("iterations n_i", lambda c: c.refine.num_iterations, 10, "Alg. IterativeRefinement caption"),
    ("samples n_o", lambda c: c.refine.num_samples, 10, "Alg. IterativeRefinement caption"),
    ("temperatures", lambda c: tuple(c.temperatures), (0.6, 0.8, 1.0, 1.2, 1.4, 1.6),
     "Alg. IterativeRefinement caption"),
    ("greedy decoding too", lambda c: c.refine.greedy, True, "App. 'Iterative Refinement'"),
    # Alg. DatasetFormatting caption: k_n = 30, Delta x = 0.25
    ("PropEn neighbours k_n", lambda c: c.propen.num_neighbours, 30, "Alg. DatasetFormatting caption"),
    ("PropEn Delta x", lambda c: c.propen.max_distance, 0.25, "Alg. DatasetFormatting caption"),
    # App. 'Genetic Algorithm': p_m = 0.005, n = 1000
    ("GA mutation probability", lambda c: c.round0_ga.mutation_prob, 0.005, "App. 'Genetic Algorithm'"),
    ("GA particles", lambda c: c.round0_ga.num_particles, 1000, "App. 'Genetic Algorithm'"),
]  # fmt: skip


@pytest.fixture(scope="module")
def paper_config() -> LoopConfig:
    return preset("paper", weights="/path/to/pythia-2.8b")  # the directory is not read here


@pytest.mark.parametrize(
    ("what", "read", "expected", "where"), PAPER_TABLE, ids=[row[0] for row in PAPER_TABLE]
)
def test_paper_preset_matches_the_appendix(paper_config, what, read, expected, where):
    want = pytest.approx(expected, rel=1e-12) if isinstance(expected, float) else expected
    assert read(paper_config) == want, f"{what} ({where})"


def test_table_rows_are_distinct_and_would_catch_the_defaults(paper_config):
    """The table is not vacuous: the ``cpu`` preset differs from it in the rows a laptop changes."""
    assert len({row[0] for row in PAPER_TABLE}) == len(PAPER_TABLE)
    cpu = preset("cpu")
    differing = [what for what, read, expected, _ in PAPER_TABLE if read(cpu) != expected]
    assert {"SFT batch size (bold 128)", "base model", "DPO precision (bf16)"} <= set(differing)


def test_sft_batch_size_sets_the_steps_of_an_sft_round():
    """``sft_batch_size`` is what an SFT round steps with (and MargE keeps ``batch_size``)."""
    cfg = preset("smoke", max_train_examples=64, sft_batch_size=16, epochs=1)
    state = _init_state(cfg)
    x, v = state.latest()
    data = finetune.training_data(jax.random.key(1), _runtime(cfg), cfg, "sft", x, v)
    assert data["units"] == 64
    *_, info = finetune.train(
        jax.random.key(2), _runtime(cfg), cfg, "sft", data, state.params, False, 1, 2
    )
    assert info["train_steps"] == math.ceil(64 / 16)
    marge = cfg.replace(batch_size=32)
    assert (
        marge.finetune.batch_size_for("marge") == 32 and marge.finetune.batch_size_for("sft") == 16
    )


def test_dpo_in_bfloat16_trains_close_to_float32():
    """``dpo_compute_dtype="bfloat16"``: the DPO step and its reference log-probs run with bf16
    matmuls (parameters stay float32); one epoch lands near the float32 run but not on it."""
    fp32 = preset("smoke", max_train_examples=64)
    bf16 = fp32.replace(dpo_compute_dtype="bfloat16")
    assert finetune.training_model(_runtime(bf16), bf16, "dpo").config.compute_dtype == "bfloat16"
    assert finetune.training_model(_runtime(bf16), bf16, "sft") is _runtime(bf16).model
    state = _init_state(fp32)
    x, v = state.latest()
    results = []
    for cfg in (fp32, bf16):
        data = finetune.training_data(jax.random.key(1), _runtime(cfg), cfg, "dpo", x, v)
        params, _, loss, _ = finetune.train(
            jax.random.key(2), _runtime(cfg), cfg, "dpo", data, state.params, False, 1
        )
        results.append((params, loss))
    (_, l32), (p16, l16) = results
    assert np.isfinite(l16) and l16 == pytest.approx(l32, rel=5e-2) and l16 != l32
    leaves = jax.tree.leaves(p16)
    assert all(np.asarray(leaf).dtype == np.float32 for leaf in leaves)
    with pytest.raises(ValueError, match="dpo_compute_dtype"):
        fp32.replace(dpo_compute_dtype="float16")
    with pytest.raises(ValueError, match="sft_batch_size"):
        fp32.replace(sft_batch_size=0)


def test_reward_beta_override_reaches_marge_and_reinforce_only() -> None:
    """``finetune.reward_beta`` sets the reward's factor ``beta`` of MargE and REINFORCE (default:
    the losses' own 1.0, the authors' value); DPO's ``beta`` is another quantity and stays."""
    base = preset("smoke")
    assert float(finetune.loss_params(base, "marge").beta) == 1.0
    cfg = base.replace(**{"finetune.reward_beta": 3.0})
    assert float(finetune.loss_params(cfg, "marge").beta) == 3.0
    assert float(finetune.loss_params(cfg, "reinforce").beta) == 3.0
    assert finetune.loss_params(cfg, "dpo") == finetune.loss_params(base, "dpo")
    assert finetune.loss_params(cfg, "sft") == finetune.loss_params(base, "sft")
    for bad in (0.0, -1.0, float("inf"), True, "2"):
        with pytest.raises(ValueError, match="reward_beta"):
            base.replace(**{"finetune.reward_beta": bad})


# ------------------------------------------------------------------------ paper preset end to end
#: Small, but not solved by the GA data and one round (``Ehr(8,8)-2-2-2`` is).
PAPER_TEST_FUNCTION = "Ehr(16,16)-2-4-4"


def _pretrained_weights(directory: pathlib.Path) -> LoopConfig:
    """A 1-layer Pythia-shaped model that already writes the output format of the test function
    (one smoke round of SFT at lr 1e-2: the paper fine-tunes a *pretrained* model, whose outputs
    parse), saved as a Hugging Face GPT-NeoX directory with the Ehrlich tokenizer."""
    from safetensors.numpy import save_file

    from llome_jax.lm.convert import hf_config_dict, hf_tensors

    smoke = preset(
        "smoke",
        function=PAPER_TEST_FUNCTION,
        rounds=1,
        schedule=(("sft", 1),),
        model_overrides=(("num_hidden_layers", 1),),
        epochs=8,
    )
    result = loop.run(smoke, directory / "pretrain", progress=False)
    res = _runtime(smoke)
    model = model_with(res.model, result.state.params)
    weights = directory / "weights"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps(hf_config_dict(model.config)))
    save_file(hf_tensors(model), str(weights / "model.safetensors"))
    res.codec.tokenizer.save_pretrained(weights)
    return smoke


@pytest.mark.slow
def test_paper_preset_runs_sft_then_marge_on_eight_devices(tmp_path: pathlib.Path):
    """The ``paper`` preset's code path end to end, data parallel over the 8 fake devices, with
    its batch sizes (SFT 128, MargE 64), learning rates, optimizers, lambda, weight scale and
    checkpoint selection. Reductions, all stated: a 1-layer H-64 model instead of Pythia-2.8B,
    ``Ehr(16,16)-2-4-4`` (instance seed 1) instead of f2 and the smoke preset's GA seed data (2
    generations of 200, mutation 0.1), at most 512 training pairs per round
    (paper: all), 32 seeds x 2 iterations x (greedy + 6 temperatures x 4 samples) (paper: 200 x
    10 x (1 + 6 x 10)), j = 256 (paper: 2000), 16 gate prompts, 2 rounds."""
    assert jax.device_count() == 8
    smoke = _pretrained_weights(tmp_path)
    cfg = preset(
        "paper",
        weights=str(tmp_path / "weights"),
        function=smoke.function,
        instance_seed=smoke.instance_seed,
        round0_generations=smoke.round0_generations,
        round0_ga=smoke.round0_ga,
        rounds=2,
        max_train_examples=512,
        num_seeds=32,
        num_iterations=2,
        num_samples=4,
        labels_per_round=256,
        min_unique_candidates=1,
        selection_num_prompts=16,
    )
    result = loop.run(cfg, tmp_path / "paper", progress=False, extra_config={"loss": "marge"})
    records = [
        json.loads(line) for line in (tmp_path / "paper" / "rounds.jsonl").read_text().splitlines()
    ]
    assert [r["round"] for r in records] == [0, 1, 2], result.stop_reason
    sft, marge = records[1], records[2]
    assert _runtime(cfg).mesh is not None  # data parallel over all devices
    # SFT steps with batch 128, MargE with 64 (one epoch each; the pairs are capped at 512)
    assert sft["train_steps"] == math.ceil(min(sft["num_pairs"], 512) / 128)
    assert "selected_step" not in sft  # SFT keeps its last model
    # MargE trains on the 95 % split when it selects (validation: the rest, at most 100)
    assert marge["num_val_units"] >= 1
    n_train = min(marge["num_pairs"], 512) - marge["num_val_units"]
    assert marge["train_steps"] == math.ceil(n_train / 64)
    assert 1 <= marge["selected_step"] <= marge["train_steps"]
    assert np.isfinite(marge["train_loss"]) and marge["num_selected"] >= 1
    # the labels are new and the oracle's: evaluated.csv is a set of distinct sequences
    rows = (tmp_path / "paper" / "evaluated.csv").read_text().splitlines()[1:]
    assert len({row.split('"')[1] for row in rows}) == len(rows)
