"""`--llm-baseline` and `--llm-fail-on-regression`: compare the run with a baseline, and let
that comparison, not the failing tasks, decide the exit status.

Failing tasks are the normal state of an eval; what should fail CI is a change beyond noise.
With `--llm-fail-on-regression` the session exits 0 when no model regressed, even with failing
tasks, `EXIT_REGRESSION` when one did, and `EXIT_UNDECIDED` when nothing was compared (a gate
that saw nothing does not pass) or a model's name now means another model (unless
`--llm-allow-model-change`). `--llm-fail-under` adds absolute thresholds (`EXIT_BELOW`).
The decision goes into `report.gate` as one sentence that says what was decided and with
what power ("gate held: no detectable change for cand on 5 shared tasks (...; changes under
±94 pp cannot be seen)"), which every headline shows.
What the gates never hide: ERROR items, failures
of anything that is not a scored task (a plain test, a teardown), and pytest's own statuses
for an interrupted run, a usage or internal error, or no tests: those keep their exit status.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool import history
from pytest_llmtool.kinds import Kind
from pytest_llmtool.records import SCHEMA_VERSION, BaselineComparison, EvalReport, TaskVerdict
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats import baseline, intervals
from pytest_llmtool.stats.outcomes import Outcome, outcomes
from pytest_llmtool.stats.task_verdicts import below_rule

Found = tuple[str, int | None, EvalReport]  # (source, history run id, report)

# Exit statuses of the gates (pytest itself uses 0 to 5; docs/history-and-gate.md, "Exit statuses").
EXIT_REGRESSION = 6  # a model regressed beyond noise
EXIT_UNDECIDED = 7  # nothing was compared (or judged): the gate cannot pass what it never saw
EXIT_BELOW = 8  # --llm-fail-under: a metric is below its threshold


def _refuse_newer(text: str, where: str) -> None:
    """A report from a newer pytest-llmtool is refused rather than misread."""
    try:
        version = json.loads(text).get("schema_version", 1)
    except (ValueError, AttributeError, RecursionError):
        return  # validation says what is wrong
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ValueError(
            f"{where} is a schema {version} report; this pytest-llmtool reads up to schema "
            f"{SCHEMA_VERSION}: upgrade pytest-llmtool"
        )


METRICS = ("pass_rate", "weighted_rate", "tasks_passed", "tasks_failed", "pass_hat_k")
# Judged from the per-task verdicts over trials (`report.task_verdicts`): they need trials.
TASK_METRICS = ("tasks_passed", "tasks_failed", "pass_hat_k")
_THRESHOLD = re.compile(
    r"(?P<metric>\w+)(?:\[(?P<scope>[^\]]*)\])?(?::(?P<bound>point|upper))?=(?P<value>\S+)"
)


@dataclass(frozen=True)
class Threshold:
    """`--llm-fail-under=pass_rate[model=m,category=c,kind=k]:upper=0.8`: per model (all
    of them unless scoped), the metric over its scored items in the scope. The point estimate
    is judged by default; `:upper` fails only when even the 95% interval's upper bound is
    below, i.e. when the run shows the model is below the bar beyond noise."""

    text: str
    metric: str
    value: float
    upper: bool = False
    model: str | None = None
    category: str | None = None
    kind: str | None = None

    @classmethod
    def parse(cls, text: str, trials: int | None = None) -> Threshold:
        """A usage error names the bad part; VALUE is a fraction (0.8) or a percentage (80%),
        a count of tasks for `tasks_failed`. With `trials` 1, a metric of the per-task
        verdicts is a usage error: there are none to judge."""
        found = _THRESHOLD.fullmatch(text)
        if found is None or found["metric"] not in METRICS:
            raise pytest.UsageError(
                f"--llm-fail-under: expected METRIC[SCOPE][:upper]=VALUE with METRIC one of "
                f"{', '.join(METRICS)}, got {text!r}"
            )
        if trials == 1 and found["metric"] in TASK_METRICS:
            raise pytest.UsageError(
                f"--llm-fail-under: {text!r}: {found['metric']} judges per-task verdicts over "
                "trials: it needs --llm-trials above 1"
            )
        raw = found["value"]
        if found["metric"] == "tasks_failed":
            if not (raw.isascii() and raw.isdigit()):  # `²` is a digit to isdigit
                raise pytest.UsageError(
                    f"--llm-fail-under: {text!r}: tasks_failed is a count of tasks (0, 1, ...)"
                )
            value = float(raw)
        else:
            try:
                value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
            except ValueError:
                value = math.nan
        if not 0 <= value <= 1 and found["metric"] != "tasks_failed":
            raise pytest.UsageError(
                f"--llm-fail-under: {text!r}: the value must be within 0..1 or 0%..100%"
            )
        scope: dict[str, str] = {}
        for part in filter(None, (found["scope"] or "").split(",")):
            key, sep, name = part.partition("=")
            if not sep or key not in ("model", "category", "kind") or not name or key in scope:
                raise pytest.UsageError(
                    f"--llm-fail-under: {text!r}: a scope is model=M, category=C or kind=K, "
                    f"each once, got {part!r}"
                )
            scope[key] = name
        return cls(text, found["metric"], value, found["bound"] == "upper", **scope)

    def judge(
        self, rows: Sequence[Outcome], model: str, verdicts: Sequence[TaskVerdict] = ()
    ) -> tuple[bool | None, str]:
        """Whether `model` is below the bar (None: nothing scored to judge), and the line."""
        if self.metric in TASK_METRICS:
            return self._judge_tasks(verdicts, model)
        rows = [
            r
            for r in rows
            if r.model == model
            and r.passed is not None
            and (self.category is None or r.category == self.category)
            and (self.kind is None or r.kind == self.kind)
        ]
        where = "".join(
            f" {k} {v}" for k, v in (("category", self.category), ("kind", self.kind)) if v
        )
        if not rows:
            return None, f"{model}{where}: no scored items to judge {self.text}"
        if self.metric == "pass_rate":
            passes: dict[str, list[bool]] = {}
            for r in rows:
                passes.setdefault(r.task, []).append(bool(r.passed))
            found = intervals.pass_rate(passes)
        else:
            parts: dict[str, list[tuple[float, float]]] = {}
            for r in rows:
                pair = (r.score, r.max_score) if r.max_score else (r.rate or 0.0, 1.0)
                parts.setdefault(r.task, []).append((pair[0] or 0.0, pair[1] or 1.0))
            found = intervals.ratio(parts)
        if found is None:
            return None, f"{model}{where}: {self.metric} cannot be estimated for {self.text}"
        judged = found.high if self.upper else found.estimate
        below = judged < self.value
        shown, bar = intervals.against(judged, self.value)
        told = f"upper bound {shown}" if self.upper else f"{shown} {intervals.bounds(found)}"
        return below, f"{model}{where}: {self.metric} {told} {'<' if below else '>='} {bar}"

    def _judge_tasks(self, verdicts: Sequence[TaskVerdict], model: str) -> tuple[bool | None, str]:
        """A metric of the per-task verdicts. Undecided tasks count against the bar (as
        failed, as not passed: the gate fails closed) and are named with the failed ones."""
        verdicts = [
            v
            for v in verdicts
            if v.model == model
            and (self.category is None or v.category == self.category)
            and (self.kind is None or v.kind == self.kind)
        ]
        where = "".join(
            f" {k} {v}" for k, v in (("category", self.category), ("kind", self.kind)) if v
        )
        if not verdicts:
            return None, f"{model}{where}: no task verdicts to judge {self.text}"
        rule = f"{verdicts[0].need}/{verdicts[0].trials}"
        named = f" (below {rule}: {below_rule(verdicts)})" if below_rule(verdicts) else ""
        if self.metric == "tasks_failed":
            failing = sum(v.verdict != "pass" for v in verdicts)
            below = failing > self.value
            return below, (
                f"{model}{where}: tasks_failed {failing}/{len(verdicts)} "
                f"{'>' if below else '<='} {int(self.value)}{named}"
            )
        if self.metric == "pass_hat_k":
            return self._judge_pass_hat_k(verdicts, f"{model}{where}", named)
        found = intervals.pass_rate({v.task: [v.verdict == "pass"] for v in verdicts})
        if found is None:
            return None, f"{model}{where}: {self.metric} cannot be estimated for {self.text}"
        met = sum(v.verdict == "pass" for v in verdicts)
        judged = found.high if self.upper else found.estimate
        below = judged < self.value
        shown, bar = intervals.against(judged, self.value)
        told = f"{met}/{len(verdicts)} ({intervals.percent(found.estimate)})"
        told += f", upper bound {shown}" if self.upper else ""
        return below, (
            f"{model}{where}: {self.metric} {told} {'<' if below else '>='} {bar}{named}"
        )

    def _judge_pass_hat_k(
        self, verdicts: Sequence[TaskVerdict], who: str, named: str
    ) -> tuple[bool | None, str]:
        """pass^N over tasks. A task with fewer than N scored trials has no pass^N: it is
        judged both ways (as 0 and as 1), and only a bar both readings agree on is decided."""
        n = verdicts[0].trials
        known = [v.pass_hat_k[n] for v in verdicts if n in v.pass_hat_k]
        missing = len(verdicts) - len(known)
        readings = []
        for fill in (0.0, 1.0) if missing else (0.0,):
            values = known + [fill] * missing
            found = intervals.mean(values, clustered=True)  # as the trials table's pass^k
            if found is None:
                return None, f"{who}: pass_hat_k cannot be estimated for {self.text}"
            readings.append(found)
        judged = [r.high if self.upper else r.estimate for r in readings]
        shown, bar = intervals.against(judged[0], self.value)
        told = f"pass^{n} " + (
            f"upper bound {shown}" if self.upper else f"{shown} {intervals.bounds(readings[0])}"
        )
        told += f" over {len(verdicts)} tasks"
        if missing:
            told += (
                f" ({missing} with fewer than {n} scored trials counted as 0; "
                f"as 1: {intervals.against(judged[-1], self.value)[0]})"
            )
        if (min(judged) < self.value) != (max(judged) < self.value):
            return None, f"{who}: {told}: undecided against {bar}{named}"
        below = judged[0] < self.value
        return below, f"{who}: {told} {'<' if below else '>='} {bar}{named}"


class RegressionGate:
    """Resolves the baseline when the run starts (a bad REF is a usage error before anything
    is spent), compares at the end, judges the `--llm-fail-under` thresholds, and prints the
    verdict as the last section."""

    def __init__(
        self,
        ref: str | Path | None,
        history_path: Path | None,
        fail: bool,
        allow_missing: bool = False,
        thresholds: Sequence[Threshold] = (),
        allow_model_change: bool = False,
    ) -> None:
        self.ref = ref
        self.allow_model_change = allow_model_change
        self.thresholds = tuple(thresholds)
        self.threshold_lines: list[str] = []
        self.history_path = history_path
        self.fail = fail
        self.allow_missing = allow_missing
        self.loaded: Found | None = None
        self.problem: str | None = None
        self.passed_over: list[str] = []
        self.comparison: BaselineComparison | None = None
        self.reason: str | None = None
        self.status: int | None = None
        # `report.gate`, as the last line of the terminal says it too.
        self.said: str | None = None
        self.verdicts: Sequence[TaskVerdict] = ()  # the report's, while it is judged
        if isinstance(ref, Path):
            try:
                text = ref.read_text(encoding="utf-8")
                _refuse_newer(text, str(ref))
                report = EvalReport.model_validate_json(text)
            except (OSError, ValueError, RecursionError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise pytest.UsageError(f"--llm-baseline: cannot read {ref}: {first}") from None
            self.loaded = (str(ref), None, report)
        elif ref is None:
            return
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

    def _baseline(self, models: Sequence[str], fingerprint: dict[str, str]) -> Found | None:
        """`last`: the newest complete earlier run with the same models and dataset. A
        history that cannot be read is a problem, never "no earlier run"."""
        if self.loaded is not None or self.history_path is None:
            return self.loaded
        if not self.history_path.is_file():
            return None
        try:
            run_id, self.passed_over = history.latest_complete(
                self.history_path, models, fingerprint
            )
            if run_id is None:
                return None
            _, report = history.load_report(self.history_path, run_id)
        except history.HistoryError as exc:
            self.problem = f"the run history cannot be read: {exc}"
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
        if self.ref is not None:
            found = self._baseline(models, report.metadata.fingerprint)
            if found is None:
                comparison = BaselineComparison(
                    ref=str(self.ref), gate=self.fail, unmatched=models, problem=self.problem
                )
            else:
                source, run_id, base = found
                comparison = baseline.compare(
                    current,
                    outcomes(base, kinds),
                    models,
                    str(self.ref),
                    source,
                    run_id,
                    self.fail,
                    (report.metadata.models, base.metadata.models),
                )
            comparison.passed_over = self.passed_over
            comparison.model_change_allowed = self.allow_model_change
            report.baseline = self.comparison = comparison
        self.verdicts = report.task_verdicts
        self.status = self._status(current, models, session, exitstatus)
        report.metadata.exit_status = self.status
        report.gate = self.said = self._sentence(exitstatus)
        return self.status

    def _sentence(self, exitstatus: int) -> str | None:
        """`report.gate`: the decision and the reason with its numbers, or that the run
        ended before anything could be judged; None when nothing gates the exit status."""
        if not (self.fail or self.thresholds):
            return None
        if self.reason is None:  # interrupted, a usage or internal error, no tests
            return (
                f"gate undecided: the run ended with exit status {int(exitstatus)} before "
                "anything could be judged"
            )
        if self.status == pytest.ExitCode.OK:
            return f"gate held: {self.reason}"
        if self.status == EXIT_UNDECIDED:
            return f"gate undecided: {self.reason}"
        return f"gate failed: {self.reason}"

    def _below(self, current: Sequence[Outcome], models: Sequence[str]) -> tuple[str, int] | None:
        """The thresholds each model misses (8), or cannot be judged on (7); None if met."""
        below: list[str] = []
        unknown: list[str] = []
        for threshold in self.thresholds:
            for model in [threshold.model] if threshold.model else models:
                verdict, line = threshold.judge(current, model, self.verdicts)
                self.threshold_lines.append(line)
                if verdict is None:
                    unknown.append(line)
                elif verdict:
                    below.append(line)
        if below:
            return "below --llm-fail-under: " + "; ".join(below), EXIT_BELOW
        if unknown:
            return "nothing to judge: " + "; ".join(unknown), EXIT_UNDECIDED
        return None

    def _status(
        self,
        current: Sequence[Outcome],
        models: Sequence[str],
        session: pytest.Session,
        exitstatus: int,
    ) -> int:
        gated = self.fail or self.thresholds
        if not gated or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return exitstatus
        comparison = self.comparison if self.fail else None
        changed = None if comparison is None else baseline.changed_identity(comparison)
        if changed is not None:  # whatever it shows, it is not this model's change
            self.reason = f"the baseline ran another model: {changed}"
            return EXIT_UNDECIDED
        if comparison is not None and comparison.regressed:
            self.reason = baseline.verdict(comparison)
            return EXIT_REGRESSION
        if comparison is not None:
            undecided = baseline.undecided(comparison, self.allow_missing)
            if undecided is not None:
                self.reason = f"nothing compared: {undecided}"
                return EXIT_UNDECIDED
        missed = self._below(current, models)
        if missed is not None:
            self.reason, status = missed
            return status
        # Every failed report that is not a scored task's failure: errors, plain tests.
        task_failures = sum(1 for row in current if row.passed is False)
        others = session.testsfailed - task_failures
        if others > 0:
            self.reason = (
                f"{others} failures or errors besides failing tasks: the gate does not hide them"
            )
            return pytest.ExitCode.TESTS_FAILED
        said = [baseline.verdict(comparison)] if comparison is not None else []
        if self.thresholds:
            said.append(f"every --llm-fail-under threshold met ({len(self.threshold_lines)})")
        self.reason = "; ".join(said)
        return pytest.ExitCode.OK

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter
    ) -> Generator[None, None, None]:
        # Around pytest's own summary, so this is the last section, after the short summary.
        yield
        comparison = self.comparison
        if comparison is None and self.said is None:
            return
        terminalreporter.write_sep("=", "llmtool baseline" if comparison else "llmtool gate")
        if comparison is not None:
            terminalreporter.write_line(f"baseline: {comparison.ref} ({comparison.source or '-'})")
            if comparison.models:
                for line in format_table(*baseline.change_rows(comparison)):
                    terminalreporter.write_line(line)
            for note in baseline.notes(comparison):
                terminalreporter.write_line(note)
        for line in self.threshold_lines:
            terminalreporter.write_line(f"--llm-fail-under {line}")
        if self.said is not None:
            terminalreporter.write_line(f"llmtool {self.said} (exit status {self.status})")


# Where the reporting process keeps its gate (with --llm-baseline), for the controller.
GATE_KEY = pytest.StashKey[RegressionGate]()
