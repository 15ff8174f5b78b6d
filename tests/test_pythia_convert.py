"""HF checkpoint conversion: live parity with transformers (torch), orbax round trip, CLI, errors."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from llome_jax import cli
from llome_jax.lm import convert
from llome_jax.lm.convert import CheckpointFormatError
from llome_jax.lm.pythia import Pythia, PythiaConfig

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@nnx.jit
def _forward(model, ids, mask):
    return model(ids, mask)


def _tiny(**kw) -> PythiaConfig:
    base = dict(
        vocab_size=53,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
    )
    return PythiaConfig(**{**base, **kw})


def _random_model(config: PythiaConfig, seed: int = 0) -> Pythia:
    @nnx.jit
    def build():
        model = Pythia(config, rngs=nnx.Rngs(seed))
        graphdef, state = nnx.split(model)
        leaves, tree = jax.tree.flatten(state)
        keys = jax.random.split(jax.random.key(seed + 7), len(leaves))
        leaves = [
            x + (0.3 if x.ndim == 1 else 0.08) * jax.random.normal(k, x.shape)
            for x, k in zip(leaves, keys)
        ]
        return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))

    return build()


def _write_hf(
    directory: pathlib.Path,
    model: Pythia,
    *,
    spelling: str = "hub",
    head_name: str = "embed_out.weight",
    extra: dict | None = None,
) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    cfg = convert.hf_config_dict(model.config, spelling=spelling)
    (directory / "config.json").write_text(json.dumps(cfg))
    tensors = convert.hf_tensors(model, head_name=head_name)
    tensors.update(extra or {})
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def _batch(vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (3, 11)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, :4] = 0
    mask[2, :7] = 0
    ids[mask == 0] = 0
    return ids, mask


# ----------------------------------------------------------------------------- live torch parity


def _torch_model(hf_config: dict, seed: int):
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPTNeoXConfig(**hf_config)
    model = transformers.GPTNeoXForCausalLM(config).eval()
    with torch.no_grad():
        for _, param in model.named_parameters():  # perturb EVERY weight, LayerNorms included
            param.add_(torch.randn_like(param) * (0.3 if param.ndim == 1 else 0.08))
    return model


def _torch_logits(model, ids, mask) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()


@pytest.mark.parametrize(
    ("layout", "hf_kwargs"),
    [
        ("save_pretrained", {"rotary_pct": 0.25, "use_parallel_residual": True}),
        (
            "hub_spelling_sharded",
            {
                "rotary_pct": 0.5,
                "use_parallel_residual": False,
                "rotary_emb_base": 500.0,
                "layer_norm_eps": 1e-3,
            },
        ),
        ("pytorch_bin_lm_head", {"rotary_pct": 1.0, "use_parallel_residual": True}),
    ],
)
@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the 'hf' extra)")
def test_live_parity_with_transformers(tmp_path, layout, hf_kwargs):
    """Perturbed tiny checkpoints in three on-disk layouts: max |logit diff| <= 1e-4 (fp32)."""
    import torch

    hf_config = dict(
        vocab_size=61,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        **hf_kwargs,
    )
    theta = hf_config.pop("rotary_emb_base", 10000.0)
    torch_model = _torch_model({**hf_config, "rotary_emb_base": theta}, seed=len(layout))
    d = tmp_path / "hf"
    if layout == "save_pretrained":
        torch_model.save_pretrained(d)
        assert "rope_parameters" in json.loads((d / "config.json").read_text())
    elif layout == "hub_spelling_sharded":
        torch_model.save_pretrained(d, max_shard_size="40KB")
        assert (d / "model.safetensors.index.json").is_file()
        cfg = json.loads((d / "config.json").read_text())
        cfg.pop("rope_parameters")
        cfg.update(rotary_pct=hf_config["rotary_pct"], rotary_emb_base=theta)
        (d / "config.json").write_text(json.dumps(cfg))
    else:
        torch_model.save_pretrained(d)
        (d / "model.safetensors").unlink()
        state = torch_model.state_dict()
        assert "lm_head.weight" in state
        torch.save(state, d / "pytorch_model.bin")
    model = convert.from_pretrained(d)
    assert model.config.use_parallel_residual == hf_config["use_parallel_residual"]
    assert model.config.rotary_emb_base == theta
    ids, mask = _batch(61, seed=len(layout))
    expected = _torch_logits(torch_model, ids, mask)
    got = np.asarray(_forward(model, jnp.asarray(ids), jnp.asarray(mask)))
    real = mask > 0
    assert np.abs(expected).max() > 1.0
    assert np.abs(got[real] - expected[real]).max() <= 1e-4


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the 'hf' extra)")
def test_exported_checkpoint_loads_in_transformers(tmp_path):
    """The inverse mapping (hf_tensors / hf_config_dict) gives a checkpoint transformers reads."""
    import transformers

    model = _random_model(_tiny(rotary_pct=0.5))
    d = _write_hf(tmp_path / "export", model, spelling="transformers5")
    torch_model = transformers.GPTNeoXForCausalLM.from_pretrained(d).eval()
    ids, mask = _batch(53)
    expected = _torch_logits(torch_model, ids, mask)
    got = np.asarray(_forward(model, jnp.asarray(ids), jnp.asarray(mask)))
    assert np.abs(got[mask > 0] - expected[mask > 0]).max() <= 1e-4


# ----------------------------------------------------------------------------- round trips


def test_hf_dir_round_trip_and_orbax_conversion(tmp_path):
    model = _random_model(_tiny())
    hf = _write_hf(
        tmp_path / "hf",
        model,
        extra={
            # legacy buffers of old hub .bin files are dropped
            "gpt_neox.layers.0.attention.bias": np.ones((4, 4), bool),
            "gpt_neox.layers.0.attention.masked_bias": np.array(-1e9, np.float32),
            "gpt_neox.layers.1.attention.rotary_emb.inv_freq": np.ones(2, np.float32),
        },
    )
    ids, mask = _batch(53)
    ref = np.asarray(_forward(model, jnp.asarray(ids), jnp.asarray(mask)))
    loaded = convert.from_pretrained(hf)
    # Bitwise: a lossless round trip gives the same float32 weights, run through the same program
    # on the same inputs (no reduction is reordered), so any difference is a conversion error.
    np.testing.assert_array_equal(np.asarray(_forward(loaded, ids, mask)), ref)

    out = tmp_path / "converted"
    (hf / "tokenizer.json").write_text("{}")
    assert cli.main(["convert-pythia", str(hf), str(out)]) == 0
    assert (out / "llome_pythia.json").is_file() and (out / "tokenizer.json").is_file()
    restored = convert.from_pretrained(out)
    assert restored.config == model.config
    np.testing.assert_array_equal(np.asarray(_forward(restored, ids, mask)), ref)
    # Overrides on load (bf16 compute) keep fp32 parameters.
    bf16 = convert.from_pretrained(out, compute_dtype="bfloat16")
    assert bf16.config.compute_dtype == "bfloat16"
    assert np.abs(np.asarray(_forward(bf16, ids, mask)) - ref).max() < 0.1 * np.abs(ref).max()
    # A second conversion into the same directory is refused without --force.
    assert cli.main(["convert-pythia", str(hf), str(out)]) == 2
    assert cli.main(["convert-pythia", str(hf), str(out), "--force", "--no-verify"]) == 0


def test_lm_head_spelling_and_bf16_safetensors(tmp_path):
    import ml_dtypes

    model = _random_model(_tiny())
    d = _write_hf(tmp_path / "lm_head", model, head_name="lm_head.weight")
    ids, mask = _batch(53)
    ref = np.asarray(_forward(model, ids, mask))
    np.testing.assert_array_equal(np.asarray(_forward(convert.from_pretrained(d), ids, mask)), ref)

    # bfloat16 tensors (numpy has no bf16, so write the safetensors layout by hand).
    tensors = convert.hf_tensors(model)
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        blob = np.asarray(array, ml_dtypes.bfloat16).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    bf = tmp_path / "bf16"
    bf.mkdir()
    (bf / "config.json").write_text((d / "config.json").read_text())
    (bf / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))
    got = np.asarray(_forward(convert.from_pretrained(bf), ids, mask))
    assert 0 < np.abs(got - ref).max() < 0.05 * np.abs(ref).max()


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model_type": "llama"}, "model_type"),
        ({"hidden_act": "gelu_new"}, "hidden_act"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings"),
        ({"attention_bias": False}, "attention_bias"),
        ({"attention_dropout": 0.1}, "attention_dropout"),
        ({"hidden_dropout": 0.1}, "hidden_dropout"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "rope_parameters.rope_type"),
        ({"rope_parameters": {"rope_theta": 1e4, "factor": 2.0}}, "rope_parameters.factor"),
        ({"rotary_pct": 0.375}, "rotary_ndims"),
        ({"hidden_size": None}, "hidden_size"),
        ({"num_attention_heads": 5}, "num_attention_heads"),
    ],
)
def test_refuses_unsupported_config_values(change, field):
    cfg = convert.hf_config_dict(_tiny())
    for key, value in change.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        convert.config_from_hf(cfg)


def test_both_config_spellings_give_the_same_config():
    c = _tiny(rotary_pct=0.5, rotary_emb_base=123.0)
    hub = convert.config_from_hf(convert.hf_config_dict(c, spelling="hub"))
    t5 = convert.config_from_hf(convert.hf_config_dict(c, spelling="transformers5"))
    assert hub == t5 == c
    # rope_parameters wins over the legacy keys when both are present (as in transformers).
    both = {**convert.hf_config_dict(c, spelling="transformers5"), "rotary_pct": 0.25}
    assert convert.config_from_hf(both).rotary_pct == 0.5


# ----------------------------------------------------------------------------- file errors


@pytest.fixture(scope="module")
def hf_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One tiny checkpoint for the module (building the model compiles; copying does not)."""
    return _write_hf(tmp_path_factory.mktemp("hf") / "hf", _random_model(_tiny(), seed=3))


@pytest.fixture
def hf_dir(tmp_path: pathlib.Path, hf_template: pathlib.Path) -> pathlib.Path:
    """A fresh copy of ``hf_template`` that a test may damage."""
    return pathlib.Path(shutil.copytree(hf_template, tmp_path / "hf"))


def test_missing_directory_and_config(tmp_path, hf_dir):
    with pytest.raises(FileNotFoundError, match="not found"):
        convert.from_pretrained(tmp_path / "nope")
    (hf_dir / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        convert.from_pretrained(hf_dir)


def test_invalid_config_json(hf_dir):
    (hf_dir / "config.json").write_text("{not json")
    with pytest.raises(CheckpointFormatError, match="not valid JSON"):
        convert.from_pretrained(hf_dir)


def test_missing_weights(hf_dir):
    (hf_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no weights"):
        convert.from_pretrained(hf_dir)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_safetensors(hf_dir, damage):
    path = hf_dir / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage" * 10)
    with pytest.raises(CheckpointFormatError, match=r"model\.safetensors"):
        convert.from_pretrained(hf_dir)


def test_sharded_index_errors(hf_dir):
    (hf_dir / "model.safetensors").rename(hf_dir / "model-00001-of-00002.safetensors")
    index = {
        "weight_map": {
            "gpt_neox.embed_in.weight": "model-00001-of-00002.safetensors",
            "embed_out.weight": "model-00002-of-00002.safetensors",
        }
    }
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        convert.from_pretrained(hf_dir)
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CheckpointFormatError, match="weight_map"):
        convert.from_pretrained(hf_dir)


def test_missing_wrong_and_unexpected_tensors(tmp_path):
    model = _random_model(_tiny(), seed=4)
    tensors = convert.hf_tensors(model)
    cases = {
        "missing": (
            {k: v for k, v in tensors.items() if "layers.1.mlp.dense_4h_to_h.bias" not in k},
            "lacks 1 tensor.*layers.1.mlp.dense_4h_to_h.bias",
        ),
        "shape": (
            {**tensors, "gpt_neox.embed_in.weight": np.zeros((52, 32), np.float32)},
            "embed_in.weight.*shape",
        ),
        "unexpected": (
            {**tensors, "gpt_neox.layers.0.attention.extra": np.zeros(3, np.float32)},
            "unexpected tensor",
        ),
        "extra_layer": (
            {**tensors, "gpt_neox.layers.2.input_layernorm.weight": np.zeros(32, np.float32)},
            "does not fit",
        ),
    }
    for name, (weights, match) in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(convert.hf_config_dict(model.config)))
        save_file(weights, str(d / "model.safetensors"))
        with pytest.raises(ValueError, match=match):
            convert.from_pretrained(d)


def test_pytorch_bin_without_torch(hf_dir, monkeypatch):
    (hf_dir / "model.safetensors").unlink()
    (hf_dir / "pytorch_model.bin").write_bytes(b"not really a pickle")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(CheckpointFormatError, match="torch is not installed"):
        convert.from_pretrained(hf_dir)


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (the 'hf' extra)")
def test_corrupt_pytorch_bin(hf_dir):
    (hf_dir / "model.safetensors").unlink()
    (hf_dir / "pytorch_model.bin").write_bytes(b"not really a pickle")
    with pytest.raises(CheckpointFormatError, match="not a readable PyTorch checkpoint"):
        convert.from_pretrained(hf_dir)


# orbax's async restore machinery reports an ignored "Event loop is closed" after the failure.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_converted_directory_errors(tmp_path, hf_dir):
    out = tmp_path / "out"
    convert.save_converted(convert.from_pretrained(hf_dir), out)
    meta = json.loads((out / "llome_pythia.json").read_text())
    (out / "llome_pythia.json").write_text(json.dumps({**meta, "format": "something-else"}))
    with pytest.raises(CheckpointFormatError, match="format"):
        convert.from_pretrained(out)
    (out / "llome_pythia.json").write_text(json.dumps(meta))
    for child in (out / "params").iterdir():  # corrupt the orbax data
        if child.is_dir():
            for f in child.rglob("*"):
                if f.is_file():
                    f.write_bytes(b"\x00")
    with pytest.raises(CheckpointFormatError, match="cannot restore"):
        convert.from_pretrained(out)
    import shutil

    shutil.rmtree(out / "params")
    with pytest.raises(FileNotFoundError, match="params"):
        convert.from_pretrained(out)
    with pytest.raises(ValueError, match="not empty"):
        convert.save_converted(convert.from_pretrained(hf_dir), out)
