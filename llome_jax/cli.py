"""The ``llome-jax`` command line.

Subcommands live in :mod:`llome_jax.commands` (one module each, exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``) and are discovered here, so adding a command
never touches this file. Command modules keep heavy imports inside ``run`` so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import llome_jax
from llome_jax import commands


def _command_modules() -> list:
    modules = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            modules.append(module)
    return sorted(modules, key=lambda m: getattr(m, "ORDER", 100))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llome-jax",
        description=(
            "LLOME in JAX: Ehrlich test functions, the GA, LaMBO-2 and LLM optimizers "
            "(Chen, Stanton et al., ICML 2025)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"llome-jax {llome_jax.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Called without ``argv`` (the ``llome-jax`` executable), the process first
    re-executes itself with huge pages for ``malloc`` (:mod:`llome_jax.host_memory`)."""
    if argv is None:
        from llome_jax.host_memory import reexec_with_huge_pages

        reexec_with_huge_pages()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error (message already printed)
        return int(exit_.code or 0)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except (ValueError, FileNotFoundError) as error:
        print(f"llome-jax {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
