"""The reference pages cannot go stale: docs/reference/cli.md is what
scripts/make_cli_reference.py writes from the parsers, and docs/reference/config.md documents
every key of every optimizer's configuration with each preset's value."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import re
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_PAGE = ROOT / "docs" / "reference" / "config.md"


def _cli_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_cli_reference", ROOT / "scripts" / "make_cli_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_is_what_the_parsers_say() -> None:
    script = _cli_script()
    assert script.PAGE.read_text() == script.render(), (
        "docs/reference/cli.md is stale: run python scripts/make_cli_reference.py"
    )


def test_the_cli_page_names_every_flag_of_every_command() -> None:
    """Independent of the script's rendering: each flag of each subcommand is in its section."""
    from llome_jax import cli

    script = _cli_script()
    page = script.PAGE.read_text()
    for name, parser, _ in script._commands(cli.build_parser(), "llome-jax"):
        section = page.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if action.help == "==SUPPRESS==" or not action.option_strings:
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section, f"{name}: {option} is not documented"


def _leaves(config: Any, prefix: str = "") -> dict[str, Any]:
    """Every setting of a configuration as ``dotted key -> value`` (not the nested copies of a
    shared setting, ``DERIVED_SETTINGS``: LLOME's ``filter.num_selected``)."""
    out = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            out.update(_leaves(value, f"{prefix}{field.name}."))
        else:
            out[prefix + field.name] = value
    for derived in getattr(config, "DERIVED_SETTINGS", ()):
        out.pop(prefix + derived)
    return out


def _shown(value: Any) -> str:
    """A value as the page writes it: JSON, tuples as lists."""
    if isinstance(value, tuple):
        value = [list(v) if isinstance(v, tuple) else v for v in value]
    return f"`{json.dumps(value)}`"


def _configurations() -> dict[str, dict[str, Any]]:
    """Section heading prefix -> preset column -> configuration."""
    from llome_jax.ga.optimizer import GARunConfig
    from llome_jax.lambo2.optimizer import preset as lambo2_preset
    from llome_jax.llome.presets import preset as llome_preset
    from llome_jax.llome.pretrain_config import preset as pretrain_preset

    return {
        "GA": {"default": GARunConfig()},
        "LLOME": {"`cpu`": llome_preset("cpu"), "`paper`": llome_preset("paper")},
        "LaMBO-2": {"`cpu`": lambo2_preset("cpu"), "`paper`": lambo2_preset("paper")},
        "Pretraining": {
            "`cpu` (default)": pretrain_preset("cpu"),
            "`smoke`": pretrain_preset("smoke"),
        },
    }


def _tables(text: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Section heading -> (header cells, rows) of its settings table (first column ``key``)."""
    tables = {}
    for section in re.split(r"\n## ", text)[1:]:
        heading, body = section.split("\n", 1)
        rows = [
            [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in body.splitlines()
            if line.startswith("| ")
        ]
        if rows and rows[0][0] == "key":
            tables[heading] = (rows[0], [r for r in rows[1:] if not set(r[0]) <= set("-")])
    return tables


@pytest.fixture(scope="module")
def documented() -> dict[str, tuple[list[str], list[list[str]]]]:
    return _tables(CONFIG_PAGE.read_text())


@pytest.mark.parametrize("optimizer", ["GA", "LLOME", "LaMBO-2", "Pretraining"])
def test_every_setting_is_documented_with_its_preset_values(optimizer: str, documented) -> None:
    columns = _configurations()[optimizer]
    [heading] = [h for h in documented if h.startswith(optimizer + " ")]
    header, rows = documented[heading]
    assert header[1:-1] == list(columns), f"{heading}: preset columns {header[1:-1]}"
    keys = [row[0].strip("`") for row in rows]
    for name, config in columns.items():
        settings = _leaves(config)
        assert sorted(keys) == sorted(settings), (
            f"{heading}: undocumented {sorted(set(settings) - set(keys))}, "
            f"not settings {sorted(set(keys) - set(settings))}"
        )
        column = header.index(name)
        wrong = {
            row[0]: (row[column], _shown(settings[row[0].strip("`")]))
            for row in rows
            if row[column] != _shown(settings[row[0].strip("`")])
        }
        assert wrong == {}, f"{heading}, column {name}: (page, preset)"
        assert all(row[-1] for row in rows), f"{heading}: a key without its meaning"


def test_the_table_check_can_fail() -> None:
    """A made-up page: a missing key and a wrong value are both found."""
    page = (
        "# x\n\n## GA (`llome-jax ga --rounds`)\n\n| key | default | meaning |\n|---|---|---|\n"
        "| `seed` | `1` | run seed |\n"
    )
    _, rows = _tables(page)["GA (`llome-jax ga --rounds`)"]
    settings = _leaves(_configurations()["GA"]["default"])
    assert [row[0].strip("`") for row in rows] != sorted(settings)
    assert rows[0][1] != _shown(settings["seed"])
