"""Suite timing: a summary line after every run, and per-test compile time when asked for.

Every run (with or without pytest-xdist) ends with

    suite wall time: 512 s; 1,366 tests; the 10 slowest: 61.2 s tests/test_x.py::test_y, ...

so that growth shows up in every CI log. ``LLOME_JAX_TEST_TIMINGS=FILE`` also writes one JSON
line per test phase to ``FILE`` (each xdist worker to ``FILE.<worker>``): the node id, the phase
(setup, call, teardown), its wall seconds and the seconds JAX spent compiling in it (tracing,
lowering to MLIR and XLA's backend compile, from ``jax.monitoring``) and how many programs XLA
compiled. ``benchmarks/suite_times.py``
sums those lines per file and per fixture.
"""

from __future__ import annotations

import json
import os
import time

import pytest

_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class _CompileClock:
    """Seconds JAX reports for compile events since the last ``take``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.programs = 0
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **_: object) -> None:
        if event in _COMPILE_EVENTS:
            self.seconds += duration
        if event == _COMPILE_EVENTS[-1]:
            self.programs += 1

    def take(self) -> tuple[float, int]:
        """(compile seconds, programs compiled by XLA) since the last call."""
        taken = (self.seconds, self.programs)
        self.seconds, self.programs = 0.0, 0
        return taken


class SuiteTiming:
    """Collects every test's phases (on the controller, from xdist's reports too)."""

    def __init__(self, path: str | None, runs_tests_here: bool) -> None:
        self.started = time.perf_counter()
        self.per_test: dict[str, float] = {}
        self.clock: _CompileClock | None = None
        self.out = None
        if path and runs_tests_here:
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            self.out = open(f"{path}.{worker}" if worker else path, "a")
            self.clock = _CompileClock()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        if self.clock is not None:
            self.clock.take()
        yield

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.per_test[report.nodeid] = self.per_test.get(report.nodeid, 0.0) + report.duration
        if (
            self.out is not None
            and self.clock is not None
            and report.when
            in (
                "setup",
                "call",
                "teardown",
            )
        ):
            compile_seconds, programs = self.clock.take()
            line = {
                "test": report.nodeid,
                "phase": report.when,
                "seconds": round(report.duration, 4),
                "compile_seconds": round(compile_seconds, 4),
                "programs": programs,
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            }
            self.out.write(json.dumps(line) + "\n")
            self.out.flush()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        wall = time.perf_counter() - self.started
        slowest = sorted(self.per_test.items(), key=lambda kv: -kv[1])[:10]
        listed = ", ".join(f"{seconds:.1f} s {nodeid}" for nodeid, seconds in slowest)
        terminalreporter.write_line(
            f"suite wall time: {wall:.0f} s; {len(self.per_test):,} tests; the 10 slowest: {listed}"
        )


def pytest_configure(config: pytest.Config) -> None:
    # Under xdist the controller only receives reports; its workers run (and time) the tests.
    is_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(
        config, "workerinput"
    )
    timing = SuiteTiming(os.environ.get("LLOME_JAX_TEST_TIMINGS"), not is_controller)
    config.pluginmanager.register(timing, "llome_jax_suite_timing")
