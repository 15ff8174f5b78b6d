"""What a SLURM cluster needs, said on the command line: ``--slurm KEY=VALUE`` values, and a
cap on each run's time limit.

``--slurm KEY=VALUE`` values (:func:`parse_slurm_options`): a value in ``[...]`` is a YAML list,
one in ``{...}`` a YAML mapping; ``true``/``false`` (also ``yes``/``no``) are booleans for the
keys that take one (:data:`BOOLEAN_KEYS`), digits are whole numbers for the counts
(:data:`WHOLE_KEYS`); anything else is the text as given (so ``account=no`` or ``qos=01`` stay
text, and a ``setup`` line may hold ``: ``)::

    --slurm 'setup=[module load cuda, source .venv/bin/activate]'   # lines before the task
    --slurm 'additional_parameters={comment: llome, mail-type: END}'  # more #SBATCH lines
    --slurm exclusive=true --slurm mem_per_gpu=40G --slurm time=120

``setup`` (one shell line or a list of them) becomes submitit's ``slurm_setup``,
``additional_parameters`` (a mapping; ``true``: a bare flag such as ``--requeue``, ``false``:
left out) ``slurm_additional_parameters``, ``exclusive`` (a boolean, or ``user``/``mcs``;
``false``: left out) ``slurm_exclusive``; with ``mem_per_gpu`` or ``mem_per_cpu`` no ``--mem``
is written (:meth:`~llome_jax.sweep.engines.SubmititExecutor.parameters`). ``time`` (minutes)
replaces every run's time limit. ``max_jobs`` keeps at most that many of the sweep's jobs
(array tasks count one each) queued or running at once, for clusters with a
``MaxSubmitJobs``-style limit; the rest are submitted as jobs end. ``pack`` K runs up to K
runs of a group one after another in one job (its time limit theirs added), for many short
runs. A plan's ``slurm:`` mapping holds the same keys (and ``max_minutes``); the command
line's win over it.

``--max-minutes N`` caps each run's time limit (its estimate times the margin, at least the
floor) at ``N`` minutes, and refuses, before anything is written or submitted, a sweep with runs
whose estimate alone is longer than ``N`` minutes (:func:`check_time_cap`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from llome_jax.bench.plan import UsageError

__all__ = [
    "BOOLEAN_KEYS",
    "MEMORY_KEYS",
    "WHOLE_KEYS",
    "check_max_minutes",
    "check_time_cap",
    "parse_slurm_options",
    "slurm_options",
]

#: keys whose value is a shell line or a list of them (submitit takes a list)
LINE_KEYS = ("setup", "teardown")
#: keys whose value is a whole number (minutes or a count)
WHOLE_KEYS = (
    "time",
    "signal_delay_s",
    "array_parallelism",
    "max_num_timeout",
    "max_jobs",
    "max_minutes",
    "pack",
)
#: keys whose value may be a boolean (``exclusive`` also ``user`` or ``mcs``)
BOOLEAN_KEYS = ("exclusive", "stderr_to_stdout", "use_srun")
#: keys that ask SLURM for memory per GPU or per CPU, which ``--mem`` (``mem_gb``) clashes with
MEMORY_KEYS = ("mem_per_gpu", "mem_per_cpu")
#: YAML 1.1's booleans, as :func:`parse_slurm_options` reads them for :data:`BOOLEAN_KEYS`
TRUE, FALSE = ("true", "yes", "on"), ("false", "no", "off")


def parse_slurm_options(items: Iterable[str], flag: str = "--slurm") -> dict[str, Any]:
    """``KEY=VALUE`` items as ``{key: value}`` (module docstring), then checked
    (:func:`slurm_options`); a key given twice keeps its last value.

    Raises:
      UsageError: an item without ``=``, a ``[...]``/``{...}`` value YAML cannot read, or a
        value of the wrong type; one line naming the flag and the key.
    """
    import yaml

    found: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got {item!r}")
        value: Any = text
        if text[:1] in ("[", "{"):
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as error:
                problem = " ".join(str(getattr(error, "problem", "") or error).split())
                raise UsageError(
                    f"{flag} {key}: {text!r} is not a YAML list or mapping ({problem}); write "
                    "lists as [a, b] and mappings as {k: v}, quoting an item that holds ', '"
                ) from None
        elif key in BOOLEAN_KEYS and text.lower() in TRUE + FALSE:
            value = text.lower() in TRUE
        elif key in (*WHOLE_KEYS, "max_array_size") and text.isdigit():  # the executor's
            value = int(text)
        found[key] = value
    return slurm_options(found, flag)


def slurm_options(options: Mapping[str, Any], where: str = "--slurm") -> dict[str, Any]:
    """``options`` (submitit's ``slurm_<key>`` parameters without the prefix) checked and in
    submitit's types: ``setup``/``teardown`` a list of lines (one string: one line),
    ``additional_parameters`` a mapping (``False`` values left out), ``exclusive`` a boolean or
    a string (``False``: left out), the counts of :data:`WHOLE_KEYS` whole numbers (digits as
    text too), ``mem_per_gpu``/``mem_per_cpu`` text and not beside ``mem``.

    Raises:
      UsageError: a value of the wrong type, or ``mem`` beside a per-GPU/CPU memory; one line.
    """
    found = dict(options)
    for key in LINE_KEYS:
        if key not in found:
            continue
        value = found[key]
        lines = [value] if isinstance(value, str) else value
        if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
            raise UsageError(f"{where} {key}: a shell line or a list of them, got {value!r}")
        found[key] = list(lines)
    if "additional_parameters" in found:
        value = found["additional_parameters"]
        if not isinstance(value, Mapping):
            raise UsageError(
                f"{where} additional_parameters: a mapping such as {{comment: llome}}, got "
                f"{value!r}"
            )
        found["additional_parameters"] = {
            str(k): v if isinstance(v, bool) else str(v)
            for k, v in value.items()
            if v is not False and v is not None
        }
    for key in BOOLEAN_KEYS:
        if key in found and not isinstance(found[key], bool | str):
            raise UsageError(f"{where} {key}: true or false, got {found[key]!r}")
    if found.get("exclusive") is False:  # submitit would write --exclusive=False
        del found["exclusive"]
    for key in WHOLE_KEYS:
        if key not in found:
            continue
        value = found[key]
        if isinstance(value, str) and value.strip().isdigit():
            value = found[key] = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"{where} {key}: a whole number (minutes or a count), got {value!r}")
    given = [key for key in MEMORY_KEYS if key in found]
    if given and "mem" in found:
        raise UsageError(
            f"{where} mem and {given[0]} both ask for memory (sbatch refuses --mem beside "
            f"--{given[0].replace('_', '-')}); give one"
        )
    for key in given:
        found[key] = str(found[key])
    return found


def check_max_minutes(max_minutes: int | None, fixed: int | None = None) -> int | None:
    """``max_minutes`` as a whole number of minutes (``None``: no cap).

    Raises:
      UsageError: below 1, or below a fixed time limit ``fixed`` (``--slurm time=N``).
    """
    if max_minutes is None:
        return None
    if isinstance(max_minutes, bool) or int(max_minutes) != max_minutes or max_minutes < 1:
        raise UsageError(f"--max-minutes: a whole number of minutes >= 1, got {max_minutes!r}")
    if fixed is not None and fixed > max_minutes:
        raise UsageError(
            f"--slurm time={fixed} is longer than --max-minutes {max_minutes}; lower it, or "
            "raise the cap (a partition with a longer MaxTime)"
        )
    return int(max_minutes)


def check_time_cap(
    seconds: Mapping[str, float], max_minutes: int | None, where: str = "--max-minutes"
) -> None:
    """Refuse runs whose estimate (``seconds``: run name -> estimated seconds, without the
    margin) is longer than ``max_minutes`` minutes (``None``: no cap).

    Raises:
      UsageError: one line with how many runs are over, the first three with their estimate in
        minutes (rounded up), and how many more there are.
    """
    if max_minutes is None:
        return
    over = {name: cost for name, cost in seconds.items() if cost > 60.0 * max_minutes}
    if not over:
        return
    first = list(over.items())[:3]
    shown = ", ".join(f"{name} ({math.ceil(cost / 60.0)} min)" for name, cost in first)
    if len(over) > 3:
        shown += f" and {len(over) - 3} more"
    raise UsageError(
        f"{where} {max_minutes}: {len(over)} run(s) estimated longer than the cap: {shown}; "
        "raise it (a partition with a longer MaxTime), or make the runs shorter (fewer rounds, "
        "a smaller budget); nothing submitted"
    )
