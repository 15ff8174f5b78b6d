"""The ``llome-jax`` command line.

Subcommands live in :mod:`llome_jax.commands` (one module each, exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``) and are discovered here, so adding a command
never touches this file. Command modules keep heavy imports inside ``run`` so ``--help`` is fast.

Bad input (a ``ValueError``, an ``OSError`` such as a missing or unreadable file, a run directory
in use) ends a command with one line ``llome-jax COMMAND: error: ...`` on stderr and exit code 2;
the commands check their input before they write anything. A resume that has nothing to do
(``rundir.NothingToDoError``) says so on stdout and exits 0. Ctrl-C (exit 130), SIGTERM
(exit 143) and SIGUSR2 (a scheduler's time-limit or preemption warning, exit 140) end a run
with one line, no traceback: what the run directory kept (the rounds up to its last
checkpoint) and the ``--resume`` command that continues it. During the rounds the first
signal finishes the current round and a second abandons it (``llome_jax.run.runner.run``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
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
    re-executes itself with huge pages for ``malloc`` (:mod:`llome_jax.host.memory`)."""
    if argv is None:
        from llome_jax.host.memory import reexec_with_huge_pages

        reexec_with_huge_pages()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error (message already printed)
        return int(exit_.code or 0)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 0
    from llome_jax.run.lock import RunDirectoryInUseError
    from llome_jax.run.rundir import NothingToDoError
    from llome_jax.run.runner import Preempted, Terminated

    previous = signal.signal(signal.SIGTERM, _terminated) if _main_thread() else None
    try:
        return int(args._run(args) or 0)
    except (KeyboardInterrupt, Terminated) as stop:
        code = 140 if isinstance(stop, Preempted) else 143 if isinstance(stop, Terminated) else 130
        print(f"llome-jax {args.command}: {_interrupted(args, stop)}", file=sys.stderr)
        return code
    except NothingToDoError as done:  # a resume asking for fewer rounds than the run holds
        print(f"llome-jax {args.command}: {_one_line(done)}")
        return 0
    except (ValueError, OSError, RunDirectoryInUseError) as error:
        # bad input (files included): one line, exit 2; the commands check before writing
        print(f"llome-jax {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: object) -> None:
    from llome_jax.run.runner import Terminated

    raise Terminated


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _interrupted(args: argparse.Namespace, stop: BaseException) -> str:
    """One line for Ctrl-C / SIGTERM: what the run directory kept and the command that
    continues it (a round interrupted midway is recomputed from the last checkpoint; no label
    is lost)."""
    import pathlib

    from llome_jax.run.runner import Preempted, Terminated

    what = (
        "interrupted (SIGUSR2: time limit or preemption)"
        if isinstance(stop, Preempted)
        else "interrupted (SIGTERM)"
        if isinstance(stop, Terminated)
        else "interrupted (Ctrl-C)"
    )
    out = getattr(args, "out", None)
    if out is None or not (pathlib.Path(out) / "config.json").is_file():
        return f"{what}; nothing to resume."
    from llome_jax.run.integrity import checkpoint_steps

    steps = checkpoint_steps(pathlib.Path(out))
    if not steps:
        return f"{what} before round 0 was saved; start it again (nothing to resume)."
    resume = f"llome-jax {args.command} --resume --out {out}"
    return (
        f"{what}; {out} keeps rounds 0-{steps[-1]} (labels and checkpoint); continue with: {resume}"
    )


def _one_line(error: BaseException) -> str:
    """An error message on one line (some libraries' messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
