"""``llome-jax ehrlich``: describe an Ehrlich instance or evaluate sequences from a file."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys

NAME = "ehrlich"
HELP = (
    "List the paper's functions and the shipped priors, describe an Ehrlich function or "
    "evaluate sequences (one comma-separated sequence per line)."
)
ORDER = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ehrlich_command", metavar="ACTION", required=True)
    sub.add_parser(
        "list",
        help="the paper's functions (f1-f4 and the q < k instances) with their parameters, and "
        "the shipped priors with the configuration each was pretrained on",
    )
    describe = sub.add_parser(
        "describe", help="print the instance: motifs, spacings, optimum, sparsity"
    )
    _function_arguments(describe)
    describe.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text: the whole instance, loadable as --function FILE.json",
    )
    evaluate = sub.add_parser("evaluate", help="evaluate sequences read from a file ('-' = stdin)")
    _function_arguments(evaluate)
    evaluate.add_argument(
        "--input", required=True, help="file with one sequence per line, e.g. '3,1,0,5'"
    )
    evaluate.add_argument(
        "--alphabet",
        default=None,
        help="read (and write) sequences as strings of these characters, the i-th being state i "
        "(e.g. 'ACDE...'; a line 'CAD' is then 1,0,2): the text bridge for poli in a numpy<2 "
        "environment (llome_jax.compat.poli)",
    )
    evaluate.add_argument(
        "--output", default="-", help="CSV file for 'sequence,value' ('-' = stdout)"
    )


def _function_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "function",
        help="f1..f4, a paper Ehr name, 'Ehr(v,L)-c-k-q' with --instance-seed, or an instance "
        "file (describe --json)",
    )
    parser.add_argument(
        "--instance-seed",
        type=int,
        default=None,
        help="sample a new instance with this seed (0 to 2,147,483,647)",
    )


def list_text() -> str:
    """The paper's functions (name, Ehr name, ``v, L, c, k, q``) and the shipped priors (name,
    configuration, instance seeds), as ``llome-jax ehrlich list`` prints them."""
    import json as _json

    from llome_jax import priors
    from llome_jax.ehrlich import EhrlichConfig
    from llome_jax.ehrlich.instances import PAPER_FUNCTIONS

    lines = ["the paper's functions (--function NAME; any 'Ehr(v,L)-c-k-q' with --instance-seed):"]
    for short, full in PAPER_FUNCTIONS.items():
        c = EhrlichConfig.from_name(full)
        name = short if short == full else f"{short} = {full}"
        lines.append(
            f"  {name:<24} v={c.num_states} L={c.dim} c={c.num_motifs} k={c.motif_length} "
            f"q={c.quantization or c.motif_length}"
        )
    lines.append(
        "shipped priors (llome --weights prior:NAME; instance seeds they saw are refused):"
    )
    for name in priors.PRIORS:
        info = _json.loads((priors.resolve(priors.PREFIX + name) / "pretrain.json").read_text())
        seeds = info["instance_seeds"]
        default = " (the cpu-pretrained preset's)" if name == priors.DEFAULT else ""
        lines.append(
            f"  {name:<24} {info['function']}, instance seeds {seeds['first']}-{seeds['last']}"
            f"{default}"
        )
    return "\n".join(lines)


def describe_instance(fn) -> dict:
    """A JSON-ready summary: configuration, motifs, spacings, optimum and feasibility sparsity."""
    import numpy as np

    from llome_jax import ehrlich

    cfg = fn.config
    allowed = np.asarray(fn.transition_matrix) > 0
    # P(uniform random sequence is feasible) = (1/v) 1^T (B/v)^(L-1) 1, computed in log space.
    vector = np.full(cfg.num_states, 1.0 / cfg.num_states)
    log_scale = 0.0
    for _ in range(cfg.dim - 1):
        vector = vector @ (allowed / cfg.num_states)
        total = vector.sum()
        log_scale += np.log(total)
        vector = vector / total
    optimum = ehrlich.optimal_solution(fn)
    return {
        "name": cfg.name,
        "num_states": cfg.num_states,
        "dim": cfg.dim,
        "num_motifs": cfg.num_motifs,
        "motif_length": cfg.motif_length,
        "quantization": cfg.q,
        "epistasis_factor": cfg.epistasis_factor,
        "motifs": np.asarray(fn.motifs).tolist(),
        "spacings": np.asarray(fn.spacings).tolist(),
        "offsets": np.asarray(fn.offsets).tolist(),
        "optimal_solution": np.asarray(optimum).tolist(),
        "optimal_value": float(ehrlich.evaluate(fn, optimum)),
        "infeasible_transition_fraction": float(1.0 - allowed.mean()),
        "log10_prob_uniform_sequence_feasible": float(log_scale / np.log(10.0)),
    }


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _parse_line(line: str, alphabet: str | None = None) -> list[int]:
    """``"3,1,0,5"`` (or ``"[3, 1, 0, 5]"``, spaces around the commas allowed) -> ``[3, 1, 0, 5]``;
    with ``alphabet`` ``"CAD"`` -> the characters' positions in it. ``ValueError`` on anything
    else: a token must be one decimal integer (``"1 5"`` is not ``15``)."""
    if alphabet is not None:
        if any(c not in alphabet for c in line.strip()):
            raise ValueError("a character outside the alphabet")
        return [alphabet.index(c) for c in line.strip()]
    cleaned = line.strip().removeprefix("[").removesuffix("]")
    tokens = [token.strip() for token in cleaned.split(",")]
    if tokens and tokens[-1] == "":  # a trailing comma
        tokens.pop()
    if not tokens or not all(_INTEGER.fullmatch(token) for token in tokens):
        raise ValueError("not a list of integers")
    return [int(token) for token in tokens]


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from llome_jax import ehrlich
    from llome_jax.rough_mt_fuji import is_rmf_name

    if args.ehrlich_command == "list":
        print(list_text())
        return 0
    if is_rmf_name(args.function):
        raise ValueError(
            f"{args.function!r} is a Rough Mt. Fuji function, not an Ehrlich one "
            "(docs/howto/rough-mt-fuji.md)"
        )
    fn = ehrlich.resolve_function(args.function, args.instance_seed)
    if args.ehrlich_command == "describe":
        info = describe_instance(fn)
        if args.json:  # the description plus the whole instance: a loadable --function file
            start = ehrlich.resolve_initial_solution(args.function, args.instance_seed)
            instance = {**info, **fn.to_json(), "initial_solution": np.asarray(start).tolist()}
            print(json.dumps(instance, indent=1))
            return 0
        print(
            f"{info['name']}  (v={info['num_states']}, L={info['dim']}, c={info['num_motifs']}, "
            f"k={info['motif_length']}, q={info['quantization']}, a={info['epistasis_factor']:g})"
        )
        for i, (motif, spacing) in enumerate(zip(info["motifs"], info["spacings"])):
            print(f"  motif {i}: {motif}   spacings {spacing}")
        print(f"  optimum ({info['optimal_value']:g}): {info['optimal_solution']}")
        print(
            f"  infeasible transitions: {info['infeasible_transition_fraction']:.1%}; "
            f"P(uniform sequence feasible) = 10^{info['log10_prob_uniform_sequence_feasible']:.1f}"
        )
        return 0

    alphabet = getattr(args, "alphabet", None)
    if alphabet is not None and (len(set(alphabet)) != len(alphabet) or len(alphabet) < 2):
        raise ValueError(f"--alphabet {alphabet!r} must hold distinct characters")
    # '-' reads stdin / writes stdout without closing them (the caller may go on using them)
    stream = contextlib.nullcontext(sys.stdin) if args.input == "-" else open(args.input)
    with stream as stream:
        rows = []
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                row = _parse_line(line, alphabet)
            except ValueError:
                what = (
                    f"a string of the --alphabet {alphabet!r}"
                    if alphabet is not None
                    else "a comma-separated list of integers"
                )
                raise ValueError(f"{args.input}:{number}: not {what}") from None
            outside = [state for state in row if not 0 <= state < fn.config.num_states]
            if outside:  # before any array conversion (a huge integer would overflow int64)
                raise ValueError(
                    f"{args.input}:{number}: state {outside[0]} is outside [0, "
                    f"{fn.config.num_states}) of {fn.config.name}"
                )
            rows.append(row)
    if not rows:
        raise ValueError(f"{args.input}: no sequences found")
    lengths = {len(r) for r in rows}
    if lengths != {fn.config.dim}:
        raise ValueError(
            f"every sequence must have length {fn.config.dim}; found lengths {sorted(lengths)}"
        )
    values = np.asarray(ehrlich.evaluate(fn, np.asarray(rows, dtype=np.int64)))
    out = contextlib.nullcontext(sys.stdout) if args.output == "-" else open(args.output, "w")
    with out as out:
        out.write("sequence,value\n")
        for row, value in zip(rows, values):
            text = "".join(alphabet[s] for s in row) if alphabet else ",".join(map(str, row))
            out.write(f'"{text}",{float(value)!r}\n')
    return 0
