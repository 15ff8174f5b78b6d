"""Exact parity with pytorch-holo 0.0.5 on every golden fixture (bit-identical float32)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import llome_jax.ehrlich as eh
from tests.conftest import FIXTURES


def _instance_files() -> list[pathlib.Path]:
    files = []
    for folder in ("holo_ehrlich", "paper_instances"):
        index = json.loads((FIXTURES / folder / "index.json").read_text())
        files += [FIXTURES / folder / entry["file"] for entry in index["files"]]
    return files


def _decode(values: list) -> np.ndarray:
    return np.array([-np.inf if v == "-inf" else np.float32(v) for v in values], dtype=np.float32)


def _from_record(record: dict) -> eh.Ehrlich:
    cfg = record["config"]
    return eh.from_holo(
        record["transition_matrix"],
        record["motifs"],
        record["spacings_holo"],
        quantization=cfg["quantization"],
        epistasis_factor=cfg["epistasis_factor"],
        dim=cfg["dim"],
    )


@pytest.fixture(scope="module", params=_instance_files(), ids=lambda p: p.stem)
def record(request) -> dict:
    return json.loads(request.param.read_text())


def test_values_bit_identical(record):
    fn = _from_record(record)
    x = np.asarray(record["tests"]["sequences"])
    expected = _decode(record["tests"]["values"])
    got = np.asarray(eh.evaluate(fn, x))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_motif_presence_and_feasibility(record):
    fn = _from_record(record)
    x = np.asarray(record["tests"]["sequences"])
    presence = np.asarray(eh.motif_presence(fn, x))
    np.testing.assert_array_equal(
        presence, np.asarray(record["tests"]["motif_presence"], np.float32)
    )
    np.testing.assert_array_equal(
        np.asarray(eh.is_feasible(fn, x)), np.asarray(record["tests"]["feasible"])
    )


def test_optimal_and_initial_solutions(record):
    fn = _from_record(record)
    np.testing.assert_array_equal(np.asarray(eh.optimal_solution(fn)), record["optimal_solution"])
    value = float(eh.evaluate(fn, np.asarray(record["initial_solution"])))
    assert value == np.float32(record["initial_solution_value"])


def test_quant_factors_match_reference(record):
    fn = _from_record(record)
    assert fn.config.quant_divisor == record["quant_factors_holo"]["qf1"]
    assert fn.config.quant_scale == record["quant_factors_holo"]["qf2"]


@pytest.mark.parametrize("name", ["f1", "f2", "f3", "f4", "Ehr(32,32)-4-4-2", "Ehr(32,128)-4-4-2"])
def test_paper_functions_shipped_as_data(name):
    """The packaged instances reproduce the fixture values (no ../shared needed at run time)."""
    fn = eh.paper_function(name)
    stem = fn.config.name
    index = json.loads((FIXTURES / "paper_instances" / "index.json").read_text())
    matches = [
        e for e in index["files"] if _config_name(FIXTURES / "paper_instances" / e["file"]) == stem
    ]
    assert len(matches) == 1
    record = json.loads((FIXTURES / "paper_instances" / matches[0]["file"]).read_text())
    got = np.asarray(eh.evaluate(fn, np.asarray(record["tests"]["sequences"])))
    np.testing.assert_array_equal(got, _decode(record["tests"]["values"]))
    np.testing.assert_array_equal(
        np.asarray(eh.paper_initial_solution(name)), record["initial_solution"]
    )
    np.testing.assert_array_equal(np.asarray(fn.spacings), record["spacings_holo"])


def _config_name(path: pathlib.Path) -> str:
    cfg = json.loads(path.read_text())["config"]
    return eh.EhrlichConfig(
        cfg["num_states"], cfg["dim"], cfg["num_motifs"], cfg["motif_length"], cfg["quantization"]
    ).name


def test_paper_f2_motifs_match_paper_prompt_appendix():
    fn = eh.paper_function("f2")
    assert fn.name == "Ehr(32,32)-4-4-4"
    assert np.asarray(fn.motifs).tolist() == [
        [3, 16, 15, 11],
        [24, 3, 16, 15],
        [11, 14, 8, 10],
        [22, 27, 7, 20],
    ]
