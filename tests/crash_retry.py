"""A pytest-xdist plugin: a test whose worker process died (a segfault, not a failed assertion) runs
once more on a fresh worker.

Why: jaxlib 0.10.2 on CPU now and then segfaults inside XLA's compiler (``backend_compile_and_load``,
``executable.serialize``), in a test that passes when rerun; in CI the suite compiles thousands of
programs, so one such crash in a few runs failed whole submissions. Only a crash is retried, and
only once per test: an assertion or exception fails as before, and a test that crashes twice fails.
Each retry is counted as ``rerun`` in the summary line and listed with its worker's message, so a
crash is never silent.

Used by ``tests/conftest.py``; a test of it runs pytest on crashing tests in a subprocess
(``tests/test_crash_retry.py``). Load it elsewhere with ``-p crash_retry`` (``tests/`` on the path).
"""

from __future__ import annotations

from typing import Any

import pytest

RERUN = "rerun"


class CrashRetry:
    """Controller-side state: which tests have been retried after a crash."""

    def __init__(self) -> None:
        self.retried: set[str] = set()

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist's report for the test a dead worker was running: put the test back in the queue
        (a fresh worker runs it) and count this report as a rerun, unless it was retried already."""
        if crashitem in self.retried:
            return
        try:
            sched.mark_test_pending(crashitem)
        except NotImplementedError:  # a scheduler that cannot requeue (e.g. --dist loadscope)
            return
        self.retried.add(crashitem)
        report.outcome = RERUN  # type: ignore[assignment]

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        if report.outcome == RERUN:
            return RERUN, "R", "RERUN"
        return None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        reruns = terminalreporter.stats.get(RERUN, [])
        if not reruns:
            return
        terminalreporter.section("tests rerun after their worker crashed", sep="=", yellow=True)
        for report in reruns:
            terminalreporter.line(f"RERUN {report.nodeid}: {report.longrepr}")


def pytest_configure(config: pytest.Config) -> None:
    """Register on the xdist controller only (``-n N``): workers neither see crashes nor requeue."""
    controller = config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
    if controller and config.getoption("numprocesses", None):
        config.pluginmanager.register(CrashRetry(), "llome-crash-retry")
