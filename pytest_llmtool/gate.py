"""`--llm-baseline` and `--llm-fail-on-regression`: compare the run with a baseline, and let
that comparison, not the failing tasks, decide the exit status.

Failing tasks are the normal state of an eval; what should fail CI is a change beyond noise.
With `--llm-fail-on-regression` the session exits 0 when no model regressed, even with failing
tasks, and `EXIT_REGRESSION` when one did. What the gate never hides: ERROR items, failures
of anything that is not a scored task (a plain test, a teardown), and pytest's own statuses
for an interrupted run, a usage or internal error, or no tests: those keep their exit status.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool import baseline, history
from pytest_llmtool.kinds import Kind
from pytest_llmtool.outcomes import Outcome, outcomes
from pytest_llmtool.records import BaselineComparison, EvalReport
from pytest_llmtool.report.terminal import format_table

Found = tuple[str, int | None, EvalReport]  # (source, history run id, report)

# The exit status of a run whose gate found a regression: pytest itself uses 0 to 5.
EXIT_REGRESSION = 6


class RegressionGate:
    """Resolves the baseline when the run starts (a bad REF is a usage error before anything
    is spent), compares at the end, and prints the verdict as the last section."""

    def __init__(self, ref: str | Path, history_path: Path | None, fail: bool) -> None:
        self.ref = ref
        self.history_path = history_path
        self.fail = fail
        self.loaded: Found | None = None
        self.comparison: BaselineComparison | None = None
        self.reason: str | None = None
        self.status: int | None = None
        if isinstance(ref, Path):
            try:
                report = EvalReport.model_validate_json(ref.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"--llm-baseline: cannot read {ref}: {exc}") from None
            self.loaded = (str(ref), None, report)
        elif history_path is None:
            raise pytest.UsageError(
                f"--llm-baseline={ref} reads the run history, which --llm-history=off disables"
            )
        elif ref != "last":
            try:
                run_id, report = history.load_report(history_path, int(ref))
            except history.HistoryError as exc:
                raise pytest.UsageError(f"--llm-baseline: {exc}") from None
            self.loaded = (f"history run {run_id}", run_id, report)

    def _baseline(self, models: Sequence[str], kinds: Sequence[str]) -> Found | None:
        """`last`: the newest earlier run with the same models and kinds, if there is one."""
        if self.loaded is not None or self.history_path is None:
            return self.loaded
        try:
            run_id = history.latest_run(self.history_path, models, kinds)
            if run_id is None:
                return None
            _, report = history.load_report(self.history_path, run_id)
        except history.HistoryError:
            return None
        return (f"history run {run_id}", run_id, report)

    def judge(
        self,
        report: EvalReport,
        kinds: Sequence[Kind[Any, Any]],
        session: pytest.Session,
        exitstatus: int,
    ) -> int:
        """Put the comparison into `report`; return the session's exit status."""
        current = outcomes(report, kinds)
        models = [m.name for m in report.metadata.models]
        found = self._baseline(models, sorted({row.kind for row in current}))
        if found is None:
            comparison = BaselineComparison(ref=str(self.ref), gate=self.fail)
        else:
            source, run_id, base = found
            comparison = baseline.compare(
                current, outcomes(base, kinds), models, str(self.ref), source, run_id, self.fail
            )
        report.baseline = self.comparison = comparison
        self.status = self._status(comparison, current, session, exitstatus)
        report.metadata.exit_status = self.status
        return self.status

    def _status(
        self,
        comparison: BaselineComparison,
        current: Sequence[Outcome],
        session: pytest.Session,
        exitstatus: int,
    ) -> int:
        if not self.fail or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return exitstatus
        if comparison.regressed:
            self.reason = baseline.verdict(comparison)
            return EXIT_REGRESSION
        # Every failed report that is not a scored task's failure: errors, plain tests.
        task_failures = sum(1 for row in current if row.passed is False)
        others = session.testsfailed - task_failures
        if others > 0:
            self.reason = (
                f"{others} failures or errors besides failing tasks: the gate does not hide them"
            )
            return pytest.ExitCode.TESTS_FAILED
        self.reason = baseline.verdict(comparison)
        return pytest.ExitCode.OK

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter
    ) -> Generator[None, None, None]:
        # Around pytest's own summary, so this is the last section, after the short summary.
        yield
        comparison = self.comparison
        if comparison is None:
            return
        terminalreporter.write_sep("=", "llmtool baseline")
        terminalreporter.write_line(f"baseline: {comparison.ref} ({comparison.source or '-'})")
        if comparison.models:
            for line in format_table(*baseline.change_rows(comparison)):
                terminalreporter.write_line(line)
        for note in baseline.notes(comparison):
            terminalreporter.write_line(note)
        if self.reason is not None:
            terminalreporter.write_line(f"llmtool gate: {self.reason} (exit status {self.status})")


# Where the reporting process keeps its gate (with --llm-baseline), for the controller.
GATE_KEY = pytest.StashKey[RegressionGate]()
