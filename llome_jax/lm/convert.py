"""Hugging Face GPT-NeoX / Pythia checkpoints -> :class:`llome_jax.lm.pythia.Pythia`, and back-up
of converted models as orbax checkpoints.

Reading (no torch needed for safetensors)::

    model = from_pretrained("path/to/pythia-2.8b")  # config.json + model.safetensors (or sharded)
    save_converted(model, "runs/pythia-2.8b")       # llome_pythia.json + params/ (orbax)
    model = from_pretrained("runs/pythia-2.8b")     # faster: no transposes, no fp16 -> fp32 pass

Accepted HF inputs (transformers' GPT-NeoX formats; docs/design/pythia.md):

* ``config.json`` in either spelling: released Pythia (``rotary_pct``, ``rotary_emb_base``) or
  transformers 5 (``rope_parameters = {"rope_theta", "partial_rotary_factor", "rope_type"}``).
  Values the port does not implement are refused with a ``ValueError`` naming the field
  (another activation, ``rope_type`` other than ``"default"``/``rope_scaling``, tied embeddings,
  no attention bias, non-zero dropout, another ``model_type``).
* weights: ``model.safetensors``, sharded ``model.safetensors.index.json`` (read with
  safetensors' numpy reader), or ``pytorch_model.bin`` (+ index) only when torch is importable.
  The head may be called ``embed_out.weight`` (hub, transformers 5 on disk) or
  ``lm_head.weight`` (in-memory transformers 5 state dicts). Legacy buffers
  (``attention.bias``, ``attention.masked_bias``, ``rotary_emb.inv_freq``) are dropped.
* every tensor is checked for presence and shape; torch ``[out, in]`` weights become ``[in, out]``
  kernels; values are cast to ``param_dtype`` (float32 by default; hub weights are float16).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from llome_jax.lm.pythia import _DTYPES, Pythia, PythiaConfig

__all__ = [
    "CONVERTED_CONFIG",
    "CheckpointFormatError",
    "config_from_hf",
    "from_pretrained",
    "hf_config_dict",
    "hf_tensors",
    "is_converted",
    "load_converted",
    "load_hf",
    "read_hf_tensors",
    "save_converted",
]

#: File that marks a ``convert-pythia`` output directory (beside ``params/``).
CONVERTED_CONFIG = "llome_pythia.json"
_FORMAT = "llome_jax.pythia/orbax-v1"
_SAFETENSORS = "model.safetensors"
_SAFETENSORS_INDEX = "model.safetensors.index.json"
_BIN = "pytorch_model.bin"
_BIN_INDEX = "pytorch_model.bin.index.json"
_IGNORED = re.compile(r"(attention\.(bias|masked_bias)|rotary_emb\.inv_freq)$")
#: Tokenizer and generation files copied next to a converted checkpoint when present.
_SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)


class CheckpointFormatError(ValueError):
    """A checkpoint file exists but cannot be read (corrupt, truncated, or needs torch)."""


# --------------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------------


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointFormatError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise CheckpointFormatError(f"{path} must hold a JSON object")
    return data


def config_from_hf(hf: dict[str, Any], **overrides: Any) -> PythiaConfig:
    """Translate a GPT-NeoX ``config.json`` dict into a :class:`PythiaConfig`.

    Raises:
      ValueError: naming the field, for a missing required field or any value the port does not
        implement.
    """

    def refuse(field: str, value: Any, supported: str) -> ValueError:
        return ValueError(
            f"config.json field {field}={value!r} is not supported by the Pythia port "
            f"(supported: {supported})"
        )

    model_type = hf.get("model_type", "gpt_neox")
    if model_type != "gpt_neox":
        raise refuse("model_type", model_type, "'gpt_neox'")
    hidden_act = hf.get("hidden_act", "gelu")
    if hidden_act != "gelu":
        raise refuse("hidden_act", hidden_act, "'gelu' (exact erf GELU)")
    if hf.get("tie_word_embeddings", False):
        raise refuse("tie_word_embeddings", hf["tie_word_embeddings"], "false (untied head)")
    if not hf.get("attention_bias", True):
        raise refuse("attention_bias", hf["attention_bias"], "true")
    for field in ("attention_dropout", "hidden_dropout"):
        if hf.get(field) not in (None, 0, 0.0):
            raise refuse(field, hf[field], "0 (no dropout is implemented)")
    if hf.get("rope_scaling") is not None:
        raise refuse("rope_scaling", hf["rope_scaling"], "null")
    rope = hf.get("rope_parameters")
    theta = hf.get("rotary_emb_base", 10000.0)
    pct = hf.get("rotary_pct", 0.25)
    if rope is not None:
        if not isinstance(rope, dict):
            raise refuse("rope_parameters", rope, "a dict")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise refuse("rope_parameters.rope_type", rope_type, "'default'")
        extra = set(rope) - {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
        if extra:
            name = sorted(extra)[0]
            raise refuse(f"rope_parameters.{name}", rope[name], "rope_theta, partial_rotary_factor")
        theta = rope.get("rope_theta", theta)
        pct = rope.get("partial_rotary_factor", pct)
    required = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
    )
    missing = [name for name in required if name not in hf]
    if missing:
        raise ValueError(f"config.json lacks the required field(s) {missing}")
    fields: dict[str, Any] = {name: hf[name] for name in required}
    fields.update(
        rotary_pct=float(pct),
        rotary_emb_base=float(theta),
        max_position_embeddings=hf.get("max_position_embeddings", 2048),
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-5)),
        use_parallel_residual=bool(hf.get("use_parallel_residual", True)),
        hidden_act=hidden_act,
    )
    fields.update(overrides)
    try:
        return PythiaConfig(**fields)
    except ValueError as error:
        raise ValueError(f"config.json: {error}") from error


# --------------------------------------------------------------------------------------------
# Weight files
# --------------------------------------------------------------------------------------------


def _read_safetensors(path: pathlib.Path) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(name, array)`` with safetensors' numpy reader (bf16 via a raw-buffer view)."""
    from safetensors import safe_open

    try:
        handle = safe_open(str(path), framework="np")
    except Exception as error:
        raise CheckpointFormatError(
            f"{path} is not a readable safetensors file ({type(error).__name__}: {error})"
        ) from error
    with handle as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            try:
                yield name, f.get_tensor(name)
            except Exception as error:
                if "BF16" not in str(error) and "bf16" not in str(error).lower():
                    raise CheckpointFormatError(
                        f"{path}: cannot read tensor {name!r} ({error})"
                    ) from error
                yield name, _read_raw_tensor(path, name)


def _read_raw_tensor(path: pathlib.Path, name: str) -> np.ndarray:
    """Read one tensor from the safetensors layout directly (used for bfloat16)."""
    import ml_dtypes

    dtypes = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32}
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        info = header[name]
        start, end = info["data_offsets"]
        f.seek(8 + size + start)
        data = f.read(end - start)
    if info["dtype"] not in dtypes:
        raise CheckpointFormatError(
            f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}"
        )
    return np.frombuffer(data, dtype=dtypes[info["dtype"]]).reshape(info["shape"])


def _read_torch_bin(path: pathlib.Path) -> Iterator[tuple[str, np.ndarray]]:
    try:
        import torch
    except ImportError as error:
        raise CheckpointFormatError(
            f"{path} is a PyTorch pickle and torch is not installed: install the 'hf' extra "
            "(pip install 'llome-jax[hf]') or convert the checkpoint to safetensors"
        ) from error
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointFormatError(
            f"{path} is not a readable PyTorch checkpoint: {error}"
        ) from error
    for name, tensor in state.items():
        yield name, tensor.detach().to(torch.float32).numpy()


def _shards(directory: pathlib.Path, index_name: str) -> list[pathlib.Path]:
    index = _read_json(directory / index_name)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointFormatError(f"{directory / index_name} has no 'weight_map'")
    files = [directory / name for name in dict.fromkeys(weight_map.values())]
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"shard {file} listed in {index_name} is missing")
    return files


def read_hf_tensors(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of an HF checkpoint directory as numpy arrays (names as stored).

    Raises:
      FileNotFoundError: no weight file (or a listed shard) exists.
      CheckpointFormatError: a file is corrupt, or a ``.bin`` file needs torch.
    """
    d = pathlib.Path(directory)
    if (d / _SAFETENSORS_INDEX).is_file():
        files, reader = _shards(d, _SAFETENSORS_INDEX), _read_safetensors
    elif (d / _SAFETENSORS).is_file():
        files, reader = [d / _SAFETENSORS], _read_safetensors
    elif (d / _BIN_INDEX).is_file():
        files, reader = _shards(d, _BIN_INDEX), _read_torch_bin
    elif (d / _BIN).is_file():
        files, reader = [d / _BIN], _read_torch_bin
    else:
        raise FileNotFoundError(
            f"no weights in {d}: expected {_SAFETENSORS}, {_SAFETENSORS_INDEX} (sharded), or "
            f"{_BIN} (needs torch)"
        )
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        tensors.update(reader(file))
    return tensors


def _target_path(name: str) -> tuple[tuple[Any, ...], bool] | None:
    """``(pure-dict path, transpose?)`` of an HF tensor name, or ``None`` for ignored buffers."""
    if name.startswith("gpt_neox."):
        name = name[len("gpt_neox.") :]
    if _IGNORED.search(name):
        return None
    if name in ("embed_out.weight", "lm_head.weight"):
        return ("embed_out", "kernel"), True
    if name == "embed_in.weight":
        return ("embed_in", "embedding"), False
    match = re.fullmatch(r"final_layer_norm\.(weight|bias)", name)
    if match:
        return ("final_layer_norm", "scale" if match[1] == "weight" else "bias"), False
    match = re.fullmatch(
        r"layers\.(\d+)\.(input_layernorm|post_attention_layernorm|attention\.query_key_value|"
        r"attention\.dense|mlp\.dense_h_to_4h|mlp\.dense_4h_to_h)\.(weight|bias)",
        name,
    )
    if match:
        layer, module, kind = int(match[1]), match[2], match[3]
        is_norm = module.endswith("layernorm")
        leaf = ("scale" if is_norm else "kernel") if kind == "weight" else "bias"
        return ("layers", layer, *module.split("."), leaf), kind == "weight" and not is_norm
    raise ValueError(f"unexpected tensor {name!r} in the checkpoint (not a GPT-NeoX weight)")


def _flat_params(abstract: Pythia) -> dict[tuple[Any, ...], jax.ShapeDtypeStruct]:
    state = nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    return dict(_flatten(state))


def _flatten(tree: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, (*prefix, k))
    else:
        yield prefix, tree


def _unflatten(flat: dict[tuple[Any, ...], Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for path, value in flat.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return out


def model_from_tensors(config: PythiaConfig, tensors: dict[str, np.ndarray]) -> Pythia:
    """Build a :class:`Pythia` from HF-named numpy tensors (checked names and shapes)."""
    abstract = nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0)))
    expected = _flat_params(abstract)
    values: dict[tuple[Any, ...], np.ndarray] = {}
    names: dict[tuple[Any, ...], str] = {}
    for name, array in tensors.items():
        target = _target_path(name)
        if target is None:
            continue
        path, transpose = target
        if path in values:
            if names[path] != name and {names[path], name} <= {
                "embed_out.weight",
                "lm_head.weight",
            }:
                continue  # both head spellings present: keep the first
            raise ValueError(f"tensor {name!r} appears twice in the checkpoint")
        if path not in expected:
            raise ValueError(
                f"tensor {name!r} does not fit the config (num_hidden_layers="
                f"{config.num_hidden_layers})"
            )
        array = np.asarray(array)
        if transpose:
            array = array.T
        if tuple(array.shape) != tuple(expected[path].shape):
            raise ValueError(
                f"tensor {name!r} has shape {tuple(np.asarray(tensors[name]).shape)}, expected "
                f"{tuple(expected[path].shape[::-1]) if transpose else tuple(expected[path].shape)}"
                " for this config.json"
            )
        values[path] = array
        names[path] = name
    missing = [path for path in expected if path not in values]
    if missing:
        raise ValueError(
            f"checkpoint lacks {len(missing)} tensor(s), e.g. {_hf_name(missing[0])!r}"
        )
    dtype = _DTYPES[config.param_dtype]
    pure = _unflatten({p: jnp.asarray(v, dtype=dtype) for p, v in values.items()})
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, pure)
    return nnx.merge(graphdef, state)


def _hf_name(path: tuple[Any, ...]) -> str:
    leaf = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}[path[-1]]
    return "gpt_neox." * (path[0] != "embed_out") + ".".join(map(str, path[:-1])) + "." + leaf


def hf_config_dict(config: PythiaConfig, *, spelling: str = "hub") -> dict[str, Any]:
    """A GPT-NeoX ``config.json`` dict for ``config``.

    ``spelling="hub"``: released-Pythia keys ``rotary_pct`` / ``rotary_emb_base``;
    ``"transformers5"``: ``rope_parameters`` (what ``save_pretrained`` writes in transformers 5).
    """
    out: dict[str, Any] = {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "max_position_embeddings": config.max_position_embeddings,
        "layer_norm_eps": config.layer_norm_eps,
        "use_parallel_residual": config.use_parallel_residual,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
    if spelling == "hub":
        out.update(rotary_pct=config.rotary_pct, rotary_emb_base=config.rotary_emb_base)
    elif spelling == "transformers5":
        out["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": config.rotary_emb_base,
            "partial_rotary_factor": config.rotary_pct,
        }
    else:
        raise ValueError(f"spelling must be 'hub' or 'transformers5', got {spelling!r}")
    return out


def hf_tensors(model: Pythia, *, head_name: str = "embed_out.weight") -> dict[str, np.ndarray]:
    """The model's weights as an HF GPT-NeoX state dict of numpy arrays (inverse of loading)."""
    if head_name not in ("embed_out.weight", "lm_head.weight"):
        raise ValueError(
            f"head_name must be 'embed_out.weight' or 'lm_head.weight', got {head_name!r}"
        )
    flat = dict(_flatten(nnx.to_pure_dict(nnx.state(model, nnx.Param))))
    out: dict[str, np.ndarray] = {}
    for path, value in flat.items():
        array = np.asarray(value)
        name = _hf_name(path)
        if path[-1] == "kernel":
            array = array.T
        if path[0] == "embed_out":
            name = head_name
        out[name] = np.ascontiguousarray(array)
    return out


def load_hf(directory: str | os.PathLike, **overrides: Any) -> Pythia:
    """Load an HF GPT-NeoX checkpoint directory (see module docstring)."""
    d = pathlib.Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory {d} not found")
    config = config_from_hf(_read_json(d / "config.json"), **overrides)
    return model_from_tensors(config, read_hf_tensors(d))


# --------------------------------------------------------------------------------------------
# Converted (orbax) checkpoints
# --------------------------------------------------------------------------------------------


def _stringify(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {str(k): _stringify(v) for k, v in tree.items()}
    return tree


def is_converted(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` is a ``convert-pythia`` output (has ``llome_pythia.json``)."""
    return (pathlib.Path(directory) / CONVERTED_CONFIG).is_file()


def save_converted(
    model: Pythia,
    directory: str | os.PathLike,
    *,
    source: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Write ``llome_pythia.json`` (config) and ``params/`` (orbax ``StandardCheckpointer``).

    Tokenizer/generation files of ``source`` (an HF directory) are copied alongside, so the
    output is self-contained. Refuses a non-empty ``directory`` unless ``overwrite``.
    """
    import orbax.checkpoint as ocp

    out = pathlib.Path(directory).absolute()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ValueError(f"{out} exists and is not empty (pass overwrite=True / --force)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    params = _stringify(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(out / "params", params)
    checkpointer.wait_until_finished()
    if source is not None:
        for name in _SIDE_FILES:
            if (pathlib.Path(source) / name).is_file():
                shutil.copy2(pathlib.Path(source) / name, out / name)
    meta = {"format": _FORMAT, "config": model.config.to_dict()}
    (out / CONVERTED_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def load_converted(directory: str | os.PathLike, **overrides: Any) -> Pythia:
    """Load a ``convert-pythia`` output directory (``param_dtype`` overrides cast on load)."""
    import orbax.checkpoint as ocp

    d = pathlib.Path(directory).absolute()
    meta = _read_json(d / CONVERTED_CONFIG)
    if meta.get("format") != _FORMAT or not isinstance(meta.get("config"), dict):
        raise CheckpointFormatError(
            f"{d / CONVERTED_CONFIG} is not a {_FORMAT} file (format={meta.get('format')!r})"
        )
    try:
        stored = PythiaConfig(**meta["config"])
    except TypeError as error:
        raise CheckpointFormatError(f"{d / CONVERTED_CONFIG}: bad config ({error})") from error
    config = PythiaConfig(**{**stored.to_dict(), **overrides})
    if not (d / "params").is_dir():
        raise FileNotFoundError(f"{d / 'params'} (the orbax parameters) not found")
    abstract = nnx.eval_shape(lambda: Pythia(stored, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    target = _stringify(nnx.to_pure_dict(state))
    try:
        restored = ocp.StandardCheckpointer().restore(d / "params", target)
    except Exception as error:
        raise CheckpointFormatError(f"cannot restore {d / 'params'}: {error}") from error
    restored = nnx.restore_int_paths(restored)
    if config != stored:
        dtype = _DTYPES[config.param_dtype]
        restored = jax.tree.map(lambda x: jnp.asarray(x, dtype), restored)
        graphdef, state = nnx.split(nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, restored)
    return nnx.merge(graphdef, state)


def from_pretrained(path: str | os.PathLike, **overrides: Any) -> Pythia:
    """Load a model from a Hugging Face checkpoint directory or a ``convert-pythia`` output
    (orbax), whichever ``path`` is (``overrides`` replace config fields, e.g.
    ``compute_dtype="bfloat16"``).
    """
    d = pathlib.Path(path)
    if not d.exists():
        raise FileNotFoundError(f"checkpoint directory {d} not found")
    if is_converted(d):
        return load_converted(d, **overrides)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(
            f"{d} holds neither {CONVERTED_CONFIG} (converted checkpoint) nor config.json "
            "(Hugging Face checkpoint)"
        )
    return load_hf(d, **overrides)
