"""Nested frozen configurations: overrides by dotted key, dict round trips, one preset format.

Every optimizer's configuration is a frozen dataclass whose fields are plain values or further
frozen dataclasses (``LoopConfig.finetune``, ``Lambo2Config.train``). This module gives all of them
the same operations, so that presets, ``--set key=value``, ``--config FILE`` and ``config.json``
work alike for GA, LLOME and LaMBO-2:

* :func:`override`: a new configuration with some settings replaced, given as dotted keys
  (``{"finetune.epochs": 4}``), nested dicts (``{"finetune": {"epochs": 4}}``) or both. Unknown
  keys and values of the wrong type are a ``ValueError`` naming the key, before anything runs.
  Every nested dataclass is rebuilt once, so its ``__post_init__`` checks see the final values.
* :func:`to_dict` / :func:`from_dict`: JSON-friendly nested dicts and back.
* :func:`leaf_keys`: every settable dotted key (for error messages and ``--help``).
* :func:`parse_assignment`: ``"finetune.epochs=4"`` -> ``("finetune.epochs", 4)`` (the value is
  read as JSON when it parses, else kept as a string).
* :func:`flatten` / :func:`merge`: layers of overrides (a preset, a saved run, ``--config``, the
  command's flags, ``--set``) merged setting by setting, later layers winning.
* :func:`upgrade_keys`: the old names of renamed settings (a configuration class's
  ``RENAMED_SETTINGS``, old dotted key -> today's) spelled as today's, with a one-line note on
  stderr; :func:`override` and :func:`flatten` apply it, so presets, ``--config`` files and
  ``--set`` accept an old name as its new one. ``DERIVED_SETTINGS`` names nested settings that
  are copies of another setting (LLOME's ``filter.num_selected`` of ``labels_per_round``): not
  written by :func:`to_dict`, not listed by :func:`leaf_keys`, and a renamed key on input.

A *preset* is a nested dict of overrides applied to the defaults (``PRESETS`` in
``llome_jax.llome.presets`` and ``llome_jax.lambo2.optimizer``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "NOT_SETTINGS",
    "flatten",
    "from_dict",
    "layered",
    "leaf_keys",
    "load_config_file",
    "merge",
    "override",
    "parse_assignment",
    "settings_of_record",
    "to_dict",
    "upgrade_keys",
]

C = TypeVar("C")


# --------------------------------------------------------------------------------------------
# Type checks of user values
# --------------------------------------------------------------------------------------------
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _as_tuple(value: Any) -> Any:
    """Lists (JSON) become tuples, recursively; mappings become tuples of ``(key, value)``."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuple(v) for v in value)
    if isinstance(value, Mapping):
        return tuple((k, _as_tuple(v)) for k, v in value.items())
    return value


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is an instance of the annotation ``hint`` (the subset configs use)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation this checker does not know: the dataclass checks it


def _coerce(value: Any, hint: Any) -> Any:
    """JSON spellings of tuple fields (lists, dicts) as the tuples the dataclass holds."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        hints = [h for h in typing.get_args(hint) if h is not type(None)]
        return _coerce(value, hints[0]) if len(hints) == 1 else value
    if typing.get_origin(hint) is tuple and isinstance(value, list | tuple | Mapping):
        return _as_tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# --------------------------------------------------------------------------------------------
# Overrides
# --------------------------------------------------------------------------------------------
def leaf_keys(config: Any, prefix: str = "") -> list[str]:
    """Every settable dotted key of ``config`` (a dataclass instance or class), in field order."""
    if isinstance(config, type):
        config = config()
    keys: list[str] = []
    derived = set(derived_settings(config))
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            keys.extend(
                f"{prefix}{field.name}.{key}"
                for key in leaf_keys(value)
                if f"{field.name}.{key}" not in derived
            )
        else:
            keys.append(prefix + field.name)
    return keys


# --------------------------------------------------------------------------------------------
# Renamed and derived settings
# --------------------------------------------------------------------------------------------
def renamed_settings(config: Any) -> Mapping[str, str]:
    """``config``'s (a configuration or its class) old setting names -> today's dotted keys
    (its class's ``RENAMED_SETTINGS``; empty when it has none)."""
    return getattr(config, "RENAMED_SETTINGS", None) or {}


def derived_settings(config: Any) -> tuple[str, ...]:
    """``config``'s nested settings that copy another one (its class's ``DERIVED_SETTINGS``):
    never written, never listed, set through the setting they copy."""
    return tuple(getattr(config, "DERIVED_SETTINGS", None) or ())


#: (old, new) names already noted in this process (the note is printed once each)
_NOTED: set[tuple[str, str]] = set()


def _note_renamed(old: str, new: str) -> None:
    if (old, new) not in _NOTED:
        _NOTED.add((old, new))
        print(
            f"note: setting {old!r} is now {new!r} (the old name still works; use the new one)",
            file=sys.stderr,
        )


def _rename(key: str, renames: Mapping[str, str]) -> str | None:
    """``key`` with its longest old prefix in ``renames`` replaced, or ``None``."""
    for old in sorted(renames, key=len, reverse=True):
        if key == old or key.startswith(old + "."):
            return renames[old] + key[len(old) :]
    return None


def upgrade_keys(config: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` (dotted keys and/or nested dicts) with every old name of
    :func:`renamed_settings` spelled as today's (a one-line note on stderr, once per name); a
    nested dict that holds an old name is spelled as dotted keys. Other keys are kept as they
    are, in order.

    Example:
      >>> from llome_jax.ga.optimizer import GARunConfig
      >>> upgrade_keys(GARunConfig, {"ga": {"num_particles": 64}, "initial_generations": 3})
      {'round0_ga': {'num_particles': 64}, 'round0_generations': 3}
    """
    renames = renamed_settings(config)
    if not renames:
        return dict(overrides)
    out: dict[str, Any] = {}

    def visit(key: str, value: Any) -> None:
        holds_old = any(old == key or old.startswith(key + ".") for old in renames)
        if isinstance(value, Mapping) and holds_old and key not in renames:
            for sub, v in value.items():
                visit(f"{key}.{sub}", v)
            return
        new = _rename(key, renames)
        if new is None:
            out[key] = value
            return
        _note_renamed(key, new)
        out[new] = value

    for key, value in overrides.items():
        visit(str(key), value)
    return out


def _changes_tree(config: Any, overrides: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``overrides`` (dotted keys and/or nested dicts) as a tree of field -> value / subtree."""
    fields = {f.name: f for f in dataclasses.fields(config) if f.init}
    tree: dict[str, Any] = {}
    for key, value in overrides.items():
        name, dot, rest = str(key).partition(".")
        if name not in fields:
            raise ValueError(
                f"unknown setting {prefix + str(key)!r} of {type(config).__name__}; valid keys: "
                f"{', '.join(leaf_keys(config, prefix))}"
            )
        current = getattr(config, name)
        nested = dataclasses.is_dataclass(current)
        if dot:
            if not nested:
                raise ValueError(
                    f"unknown setting {prefix + str(key)!r}: {prefix + name!r} has no sub-settings"
                )
            sub = _changes_tree(current, {rest: value}, f"{prefix}{name}.")
        elif nested and isinstance(value, Mapping):
            sub = _changes_tree(current, value, f"{prefix}{name}.")
        elif nested and not dataclasses.is_dataclass(value):
            raise ValueError(
                f"{prefix + name!r} is a group of settings ({type(current).__name__}); give a "
                f"dict or dotted keys such as {prefix + name}.{leaf_keys(current)[0]}, "
                f"got {value!r}"
            )
        else:
            tree[name] = value
            continue
        previous = tree.get(name)
        if isinstance(previous, dict):
            previous.update(sub)
        else:
            tree[name] = sub
    return tree


def _apply(config: C, tree: Mapping[str, Any], prefix: str) -> C:
    hints = _type_hints(type(config))
    changes: dict[str, Any] = {}
    for name, change in tree.items():
        current = getattr(config, name)
        if dataclasses.is_dataclass(current) and isinstance(change, dict):
            changes[name] = _apply(current, change, f"{prefix}{name}.")
            continue
        hint = hints.get(name, Any)
        value = _coerce(change, hint)
        if not _matches(value, hint):
            raise ValueError(
                f"setting {prefix + name!r} must be {_hint_text(hint)}; got {change!r}"
            )
        changes[name] = value
    if not changes:
        return config
    try:
        return dataclasses.replace(config, **changes)
    except (TypeError, ValueError) as err:
        where = f" in {prefix[:-1]!r}" if prefix else ""
        raise ValueError(f"bad settings{where}: {err}") from None


def _hint_text(hint: Any) -> str:
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    return text or str(hint).replace("typing.", "")


def override(config: C, overrides: Mapping[str, Any] | None = None, **more: Any) -> C:
    """``config`` with settings replaced (dotted keys or nested dicts; ``more`` as keywords).

    Example:
      >>> import dataclasses
      >>> @dataclasses.dataclass(frozen=True)
      ... class Inner:
      ...     rate: float = 0.1
      ...     sizes: tuple[int, ...] = (1, 2)
      >>> @dataclasses.dataclass(frozen=True)
      ... class Outer:
      ...     name: str = "a"
      ...     inner: Inner = Inner()
      >>> override(Outer(), {"inner.rate": 0.5, "inner": {"sizes": [3]}}, name="b")
      Outer(name='b', inner=Inner(rate=0.5, sizes=(3,)))

    Raises:
      ValueError: an unknown key (the message lists the valid ones), a value of the wrong type,
        or a combination the dataclass rejects.
    """
    merged = upgrade_keys(config, {**dict(overrides or {}), **more})
    return _apply(config, _changes_tree(config, merged, ""), "")


# --------------------------------------------------------------------------------------------
# Dicts and files
# --------------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _group(config: Any, dotted: str) -> Any:
    """The nested configuration at ``dotted`` (e.g. ``"finetune"``), or ``None`` when ``dotted``
    is not a group of settings of ``config``."""
    current = config
    for name in dotted.split("."):
        if not dataclasses.is_dataclass(current) or name not in {
            f.name for f in dataclasses.fields(current)
        }:
            return None
        current = getattr(current, name)
    return current if dataclasses.is_dataclass(current) else None


def flatten(config: Any, overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``overrides`` with the nested dicts of ``config``'s groups of settings spelled as dotted
    keys (``{"finetune": {"epochs": 4}}`` -> ``{"finetune.epochs": 4}``); other keys (leaves,
    unknown keys, which :func:`override` reports) are kept as they are.

    Example:
      >>> import dataclasses
      >>> @dataclasses.dataclass(frozen=True)
      ... class Inner:
      ...     rate: float = 0.1
      >>> @dataclasses.dataclass(frozen=True)
      ... class Outer:
      ...     inner: Inner = Inner()
      >>> flatten(Outer(), {"inner": {"rate": 0.5}})
      {'inner.rate': 0.5}
    """
    flat: dict[str, Any] = {}
    if not prefix:
        overrides = upgrade_keys(config, overrides)
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and _group(config, path) is not None:
            flat.update(flatten(config, value, f"{path}."))
        else:
            flat[path] = value
    return flat


def merge(config: Any, *layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """One dict of overrides from ``layers`` (each dotted keys and/or nested dicts), a setting
    of a later layer replacing the same setting of an earlier one (and only that setting: the
    other keys of a nested dict are kept). ``None`` layers are skipped."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(flatten(config, layer or {}))
    return merged


def to_dict(config: Any) -> dict[str, Any]:
    """Nested JSON-friendly dict of ``config`` (tuples as lists; without its
    :func:`derived_settings`)."""
    out = _plain(config)
    for dotted in derived_settings(config):
        *groups, name = dotted.split(".")
        section = out
        for group in groups:
            section = section.get(group, {})
        if isinstance(section, dict):
            section.pop(name, None)
    return out


def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
    """``cls`` built from a (nested) dict such as :func:`to_dict` writes: its defaults with
    ``data`` applied by :func:`override` (same checks)."""
    return override(cls(), data)


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"key=value"`` (``--set``) -> ``(key, value)``; the value is JSON if it parses
    (``4``, ``1e-3``, ``true``, ``null``, ``[0.6, 0.8]``), else the string itself.

    Example:
      >>> parse_assignment("finetune.epochs=4"), parse_assignment("refine.next_input=paper")
      (('finetune.epochs', 4), ('refine.next_input', 'paper'))
    """
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"--set expects KEY=VALUE (e.g. finetune.epochs=4); got {text!r}")
    raw = raw.strip()
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def load_config_file(path: str) -> dict[str, Any]:
    """Settings from a JSON or YAML file (``--config``): a (nested) dict of overrides.

    Raises:
      FileNotFoundError: no such file. ValueError: unreadable, not valid JSON / YAML (one line
        naming the file and the place), not a mapping, or YAML without PyYAML.
    """
    import pathlib

    file = pathlib.Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--config {file}: no such file")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--config {file}: cannot read it ({err})") from None
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(
                f"--config {file}: reading YAML needs PyYAML (pip install pyyaml)"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"--config {file}: not valid YAML ({_yaml_problem(err)})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--config {file}: not valid JSON ({err})") from None
    if not isinstance(data, Mapping):
        raise ValueError(
            f"--config {file}: expected a mapping of settings, got {type(data).__name__}"
        )
    return dict(data)


def _yaml_problem(error: Exception) -> str:
    """A PyYAML error on one line: its problem and where (PyYAML's own text spans lines)."""
    problem = getattr(error, "problem", None) or str(error)
    mark = getattr(error, "problem_mark", None)
    where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(f"{problem}{where}".split())


# --------------------------------------------------------------------------------------------
# The layering of a run's settings
# --------------------------------------------------------------------------------------------
#: keys of a run's ``config.json`` that are not settings (records written beside them)
NOT_SETTINGS = (
    "optimizer",
    "provenance",
    "loss",
    "objective",
    "objective_info",
    "function_digest",
    "objective_digest",
    "config_version",
)


def settings_of_record(
    record: Mapping[str, Any], config: Any, skipped: typing.Iterable[str] = NOT_SETTINGS
) -> dict[str, Any]:
    """The settings in a run's ``config.json``: its keys that are fields of ``config`` (the
    other keys are records another caller wrote beside the settings: the paper driver's
    ``method``, an experiment's ``loss``)."""
    fields = {field.name for field in dataclasses.fields(config)} - set(skipped)
    return {k: v for k, v in record.items() if k in fields}


def layered(
    config: C,
    *,
    saved: Mapping[str, Any] | None = None,
    file: str | None = None,
    flags: Mapping[str, Any] | None = None,
    assignments: typing.Iterable[str] = (),
    optimizer: str | None = None,
    upgrade: typing.Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    not_settings: typing.Iterable[str] = (),
) -> tuple[C, dict[str, Any]]:
    """A run's configuration from its layers, the CLI's, the bench's and a Python user's alike:
    ``config`` (a preset, or the defaults) < ``saved`` (a run's ``config.json`` to resume,
    read through ``upgrade``, the optimizer's migrations) < ``file`` (``--config``: a JSON or
    YAML file, nested or dotted; a run's ``config.json`` works) < ``flags`` (dotted keys) <
    ``assignments`` (``"KEY=VALUE"``, ``--set``). A later layer wins setting by setting
    (:func:`merge`) and the result is built once (``config.replace``), so only the final
    combination is validated.

    Returns ``(configuration, the saved settings)`` (the latter ``{}`` without ``saved``: what
    a resume compares against).

    Raises:
      ValueError / FileNotFoundError: an unreadable file, a file made for another
        ``optimizer``, an unknown key (the message lists the valid ones) or a value of the
        wrong type.

    Example:
      >>> from llome_jax.ga.optimizer import GARunConfig
      >>> cfg, _ = layered(
      ...     GARunConfig(), flags={"rounds": 3}, assignments=["round0_ga.num_particles=64"]
      ... )
      >>> cfg.rounds, cfg.round0_ga.num_particles
      (3, 64)
    """
    skipped = (*NOT_SETTINGS, *not_settings)
    saved = dict(saved or {})
    if saved and upgrade is not None:
        saved = upgrade(saved)
    saved_settings = settings_of_record(saved, config, skipped) if saved else {}
    from_file: dict[str, Any] = {}
    if file:
        loaded = load_config_file(file)
        made_for = loaded.get("optimizer", optimizer)
        if optimizer is not None and made_for != optimizer:
            raise ValueError(
                f"--config {file} holds a {made_for!r} configuration, not {optimizer!r}"
            )
        if "provenance" in loaded:  # a run's config.json, read through its migrations
            if upgrade is not None:
                loaded = upgrade(loaded)
            from_file = settings_of_record(loaded, config, skipped)
        else:  # a hand-written file: an unknown key is an error (a typo)
            from_file = {k: v for k, v in loaded.items() if k not in skipped}
    assigned = dict(parse_assignment(item) for item in assignments)
    settings = merge(config, saved_settings, from_file, flags, assigned)
    result = config.replace(**settings) if settings else config
    return result, saved_settings
