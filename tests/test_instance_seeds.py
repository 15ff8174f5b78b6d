"""Instance seeds and the pretraining guard (issue 53).

Seeds outside ``[0, 2**31)`` are refused: ``jax.random.key`` keeps a seed's low 32 bits, so
``2**32 + 1,000,000`` would be pretraining instance 1,000,000 under another number. The prior's
guard compares label digests (``ehrlich.instances.label_digest``), so a pretraining instance is
refused however it is given, by seed or as a ``.json`` instance file."""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import numpy as np
import pytest

from llome_jax import cli, ehrlich, priors
from llome_jax.ehrlich import Ehrlich
from llome_jax.ehrlich.instances import MAX_INSTANCE_SEED, check_instance_seed, label_digest

ALIAS = 2**32 + 1_000_000  # the issue's --instance-seed 4295967296


def test_jax_keys_keep_a_seeds_low_32_bits() -> None:
    """Why seeds are bounded: the keys of ``s`` and ``s + 2**32`` are one key."""
    same = jax.random.key_data(jax.random.key(ALIAS)), jax.random.key_data(jax.random.key(10**6))
    np.testing.assert_array_equal(*same)
    assert MAX_INSTANCE_SEED == 2_147_483_647


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, r"^instance seed -1 is outside \[0, 2\*\*31\); use a seed from 0 to 2,147,483,647$"),
        (2**31, r"^instance seed 2,147,483,648 is outside \[0, 2\*\*31\); use a seed from 0"),
        (
            ALIAS,
            r"outside \[0, 2\*\*31\) \(JAX keeps its low 32 bits: it would draw instance 1,000,000\)",
        ),
        (True, r"must be an integer; got True"),
        (1.0, r"must be an integer; got 1\.0"),
    ],
)
def test_seeds_outside_the_range_are_refused(seed, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_instance_seed(seed)
    with pytest.raises(ValueError, match=message):
        ehrlich.resolve_function("Ehr(8,8)-2-2-2", seed)


def test_seeds_inside_the_range_are_kept() -> None:
    assert [check_instance_seed(s) for s in (0, np.int64(7), MAX_INSTANCE_SEED)] == [
        0,
        7,
        MAX_INSTANCE_SEED,
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["ga", "--rounds", "1", "--function", "Ehr(8,8)-2-2-2"],
        ["ga", "--generations", "2", "--function", "Ehr(8,8)-2-2-2"],
        ["llome", "--preset", "smoke", "--function", "Ehr(8,8)-2-2-2"],
        ["llome", "--preset", "cpu-pretrained", "--function", "Ehr(32,32)-4-4-4"],
        ["lambo2", "--preset", "smoke", "--function", "Ehr(8,8)-2-2-2"],
    ],
)
def test_the_command_line_refuses_a_wrapped_seed_in_one_line_and_writes_nothing(
    argv: list[str], capsys: pytest.CaptureFixture, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "run"
    capsys.readouterr()
    assert cli.main([*argv, "--instance-seed", str(ALIAS), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "instance seed 4,295,967,296 is outside [0, 2**31)" in err
    assert not out.exists()


def test_ehrlich_describe_refuses_a_wrapped_seed(capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert cli.main(["ehrlich", "describe", "Ehr(8,8)-2-2-2", "--instance-seed", "-5"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "instance seed -5 is outside [0, 2**31)" in err


# ---------------------------------------------------------------------------------------------
# label_digest: what decides the labels, and nothing else
# ---------------------------------------------------------------------------------------------
def _instance_data(seed: int = 3) -> dict:
    return ehrlich.resolve_function("Ehr(8,8)-2-2-2", seed).to_json()


def test_label_digest_ignores_motif_order_probabilities_and_start_but_not_a_motif() -> None:
    data = _instance_data()
    fn = Ehrlich.from_json(data)
    x = np.asarray(jax.random.randint(jax.random.key(0), (4096, 8), 0, 8), np.int32)
    x = np.concatenate([x, ehrlich.initial_solution(jax.random.key(1), fn, 256)])
    values = np.asarray(ehrlich.evaluate(fn, x))
    assert (values > 0).any() and np.isinf(values).any()  # the sample sees both kinds

    swapped = {**data, "motifs": data["motifs"][::-1], "offsets": data["offsets"][::-1]}
    matrix = np.asarray(data["transition_matrix"], np.float64)
    reweighted = np.where(matrix > 0, matrix + 0.01, 0.0)  # same support, other probabilities
    reweighted = {
        **data,
        "transition_matrix": (reweighted / reweighted.sum(1, keepdims=True)).tolist(),
    }
    for same in (swapped, reweighted, {**data, "initial_solution": [0] * 8}):
        other = Ehrlich.from_json(same)
        assert label_digest(other) == label_digest(fn)
        np.testing.assert_array_equal(np.asarray(ehrlich.evaluate(other, x)), values)

    motifs = np.asarray(data["motifs"])
    motifs[0, [0, 1]] = motifs[0, [1, 0]]  # another motif: other labels, another digest
    changed = Ehrlich.from_json({**data, "motifs": motifs.tolist()})
    assert label_digest(changed) != label_digest(fn)
    assert label_digest(Ehrlich.from_json(_instance_data(4))) != label_digest(fn)


# ---------------------------------------------------------------------------------------------
# The prior's guard: by seed and by label digest
# ---------------------------------------------------------------------------------------------
def _print_config(capsys: pytest.CaptureFixture, out: pathlib.Path, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    argv = ["llome", "--preset", "cpu-pretrained", *argv, "--out", str(out), "--print-config"]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert not out.exists()
    return code, err


def _instance_file(tmp_path: pathlib.Path, seed: int, start: list[int] | None = None) -> str:
    fn = ehrlich.resolve_function("Ehr(32,32)-4-4-4", seed)
    data = fn.to_json()
    if start is not None:
        data["initial_solution"] = start
    path = tmp_path / f"instance_{seed}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_the_shipped_priors_record_their_instances_label_digests() -> None:
    """Spot checks recomputed here: the first, a middle and the last pretraining instance."""
    for name, function in (
        ("ehr32-32-4-4-4", "Ehr(32,32)-4-4-4"),
        ("ehr32-64-4-4-4", "Ehr(32,64)-4-4-4"),
    ):
        made = priors.provenance(priors.resolve(priors.PREFIX + name))
        digests = made["label_digests"]
        assert len(digests) == len(set(digests)) == made["instance_seeds"]["count"] == 256
        for seed in (1_000_000, 1_000_117, 1_000_255):
            fn = ehrlich.resolve_function(function, seed)
            assert digests[seed - 1_000_000] == label_digest(fn)[7:23]


def test_a_pretraining_instance_given_as_a_file_is_refused(
    capsys: pytest.CaptureFixture, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "run"
    for start in (None, list(range(32))):  # its own start sequence, or another one
        code, err = _print_config(
            capsys, out, "--function", _instance_file(tmp_path, 1_000_017, start)
        )
        assert code == 2 and len(err.splitlines()) == 1, err
        assert (
            "was pretrained on instance seeds 1,000,000-1,000,255, which include this run's "
            "instance 1,000,017 (the same labels, given without a seed, e.g. as an instance file)"
        ) in err
    # an instance it never saw, as a file, and f2 by name: accepted
    assert _print_config(capsys, out, "--function", _instance_file(tmp_path, 17))[0] == 0
    assert _print_config(capsys, out, "--function", "f2")[0] == 0


def test_a_prior_without_digests_checks_seeds_and_refuses_unchecked_files(
    capsys: pytest.CaptureFixture, tmp_path: pathlib.Path
) -> None:
    weights = tmp_path / "weights"
    shutil.copytree(priors.resolve(priors.PREFIX + priors.DEFAULT), weights)
    made = json.loads((weights / "pretrain.json").read_text())
    del made["label_digests"]
    (weights / "pretrain.json").write_text(json.dumps(made))
    out, given = tmp_path / "run", ["--weights", str(weights)]

    code, err = _print_config(capsys, out, *given, "--function", _instance_file(tmp_path, 17))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "records no label_digests" in err and "--instance-seed N" in err
    code, err = _print_config(
        capsys, out, *given, "--function", "Ehr(32,32)-4-4-4", "--instance-seed", "1000017"
    )
    assert code == 2 and "which include this run's instance 1,000,017;" in err
    assert _print_config(capsys, out, *given, "--function", "f2")[0] == 0
    assert (
        _print_config(
            capsys, out, *given, "--function", "Ehr(32,32)-4-4-4", "--instance-seed", "17"
        )[0]
        == 0
    )


def test_pretrained_instance_of_the_library() -> None:
    made = priors.provenance(priors.resolve(priors.PREFIX + priors.DEFAULT))
    seen = ehrlich.resolve_function("Ehr(32,32)-4-4-4", 1_000_200)
    unseen = ehrlich.resolve_function("Ehr(32,32)-4-4-4", 999_999)
    assert priors.pretrained_instance(made, seen, None) == 1_000_200  # by digest
    assert priors.pretrained_instance(made, seen, 1_000_200) == 1_000_200  # by seed
    assert priors.pretrained_instance(made, None, 1_000_000) == 1_000_000  # seed only
    assert priors.pretrained_instance(made, unseen, 999_999) is None
    assert priors.pretrained_instance(made, unseen, None) is None
    other = ehrlich.resolve_function("Ehr(32,64)-4-4-4", 1_000_200)  # another configuration
    assert priors.pretrained_instance(made, other, 1_000_200) is None
