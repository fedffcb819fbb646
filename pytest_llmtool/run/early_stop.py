"""`--llm-early-stop`: trials that are not run once their verdict is known.

"tasks": a task's remaining trials are not needed once its `--llm-task-pass` rule is decided
either way (`TaskRule.decide`); the concurrency window starts a trial ahead only while fewer
of its task's trials are in flight than the outcomes that could still decide it
(`TaskRule.outcomes_to_decide`), so no run it starts is certain to be wasted (a deferred
trial starts when pytest reaches it). "compare": with two or more models, items run
trial-major (every task's first trial before any second) and, once the anytime-valid
comparison (`stats/sequential.py`) is decided, trials after the first are not needed.

A trial not needed is SKIPPED ("not needed: ..."), carrying a `SkippedTrial` on its setup
report to the reporting process, which sums them (and the calls and cost they would have
taken, estimated from the same task's trials that ran) into `EvalReport.early_stop`. It is
never a pass, has no result, and is no stop of the run (`metadata.stopped` stays None).

Decisions only ever follow from outcomes seen: a tally of some of a task's trials that
decides its rule decides it for all of them, so each process may decide on its own trials.
Under xdist the controller sees every result and publishes its decisions to the workers as
JSON lines in a file (its path in `workerinput`), which a worker reads before it starts or
sets up an item, when the file has grown. A worker that cannot read it (another host) only
runs trials that were not needed; so may two workers running one task's trials at once.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.kinds import Kind
from pytest_llmtool.records import (
    CallUsage,
    EarlyStopSummary,
    ErrorRecord,
    ItemResult,
    SkippedTrial,
)
from pytest_llmtool.run.items import LlmItem
from pytest_llmtool.settings import Settings
from pytest_llmtool.stats.outcomes import task_of
from pytest_llmtool.stats.sequential import ModelComparisons, said
from pytest_llmtool.stats.task_rule import TaskRule

EARLY_STOP_KEY = pytest.StashKey["EarlyStop"]()
SKIPPED_ATTR = "llmtool_not_needed"  # {"data": a `SkippedTrial` as JSON}
DECISIONS_INPUT = "llmtool_early_stop"  # workerinput: the controller's decisions file
_SKIP_KEY = pytest.StashKey[SkippedTrial]()  # on an item, until its setup report carries it


@dataclass
class _Tally:
    """One task's trials seen by this process, and those in flight here."""

    passed: int = 0
    failed: int = 0
    running: set[str] = field(default_factory=set)
    # Trials the window reached while that many were in flight, in order: each starts when
    # an outcome makes room (`EarlyStop._make_room`), or at its setup.
    deferred: list[LlmItem] = field(default_factory=list)


@dataclass
class _Spent:
    """What one task's trials that ran took: the base of the saving's estimate."""

    ran: int = 0
    calls: int = 0
    priced: int = 0
    cost: float = 0.0


def paired_task(nodeid: str, model: str, trial: int) -> str:
    """The task a trial is of, whatever model ran it: what two models' outcomes pair on
    (the bracket of `file::task[model-label]` starts with the model's name)."""
    head, _, bracket = task_of(nodeid, trial).rpartition("[")
    return f"{head}[{bracket.removeprefix(model)}"


def trial_major(items: list[pytest.Item]) -> None:
    """Every task's first trial before any second (stable: the same order in every xdist
    worker), so a comparison can be decided over all tasks before repeats are paid for."""
    items.sort(key=lambda item: item.trial if isinstance(item, LlmItem) else 0)


class _Feed:
    """The controller's decisions as JSON lines in a file: appended by the controller, read
    by the workers from where they last stopped, only when the file has grown."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read = 0

    def write(self, decision: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(decision) + "\n")

    def read_new(self) -> list[dict[str, Any]]:
        try:
            if self.path.stat().st_size <= self._read:
                return []
            with self.path.open("rb") as source:
                source.seek(self._read)
                data = source.read()
        except OSError:  # another host's path: this worker decides on its own trials only
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        self._read += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


class EarlyStop:
    """Per process: the tallies, the decisions, and (reporting) the trials skipped."""

    def __init__(
        self,
        settings: Settings,
        results: Mapping[str, type[ItemResult]],
        carried: tuple[str, str],
        feed: Path | None = None,
    ) -> None:
        """`results`: each kind's result type, on the reporting process (which decodes the
        results to tally them); empty on an xdist worker, which tallies its own reports and
        reads the controller's decisions from `feed`. `carried`: the report attributes the
        Runner puts a result and an error record on (`roles.py`, which imports this)."""
        reporting = bool(results)
        modes = settings.early_stop
        self.modes = list(modes)
        self.rule: TaskRule | None = settings.task_rule if "tasks" in modes else None
        names = [model.name for model in settings.models]
        compare = "compare" in modes and len(names) > 1 and settings.trials > 1
        # The comparison is the reporting process's alone: only it sees every model's trials.
        self.comparison = ModelComparisons(names) if compare and reporting else None
        self.ordered = compare
        self._models = set(names)
        self.reporting = reporting
        self.tallies: dict[str, _Tally] = {}
        self.decided: dict[str, dict[str, Any]] = {}  # task -> {"verdict", "passed", "failed"}
        self.compared: str | None = None  # why trials after the first are not needed
        self.skipped: list[SkippedTrial] = []
        self.spent: dict[str, _Spent] = {}
        self._results = results
        self._carried = carried
        self._tasks: dict[str, str] = {}  # node id -> task, for the trials started here
        self._feed = _Feed(feed) if feed is not None else None
        self._share: Path | None = None

    # Deciding.

    def _outcome(self, task: str, passed: bool | None) -> None:
        tally = self.tallies.setdefault(task, _Tally())
        if passed is None:  # an errored trial counts as neither (`TaskRule.decide`)
            return
        tally.passed += passed
        tally.failed += not passed
        if self.rule is None or task in self.decided:
            return
        verdict = self.rule.decide(tally.passed, tally.failed)
        if verdict is not None:
            self._decide(
                {"task": task, "verdict": verdict, "passed": tally.passed, "failed": tally.failed}
            )

    def _decide(self, decision: dict[str, Any]) -> None:
        if "compare" in decision:
            self.compared = decision["compare"]
        else:
            self.decided[decision["task"]] = decision
        if self.reporting and self._share is not None:
            _Feed(self._share / "decisions.jsonl").write(decision)

    def _compared(self, result: ItemResult) -> None:
        if self.comparison is None or self.compared is not None:
            return
        if result.model not in self._models:  # a resumed journal's model this run dropped
            return
        task = paired_task(result.nodeid, result.model, result.trial)
        self.comparison.observe(task, result.trial, result.model, result.passed)
        if self.comparison.decided:
            words = "; ".join(said(d) for d in self.comparison.decisions)
            self._decide({"compare": f"the sequential comparison is decided: {words}"})

    def seed(self, results: Iterable[ItemResult]) -> None:
        """`--llm-resume`: the journal's results count, so the trials they decided are not
        run again as missing."""
        for result in results:
            self._ran(result)

    def _ran(self, result: ItemResult) -> None:
        task = task_of(result.nodeid, result.trial)
        usage = CallUsage.of_run(getattr(result, "trace", None), result.judge_calls)
        spent = self.spent.setdefault(task, _Spent())
        spent.ran += 1
        spent.calls += usage.calls
        if usage.cost_usd is not None:
            spent.priced += 1
            spent.cost += usage.cost_usd
        self._outcome(task, result.passed)
        self._compared(result)

    # Before an item runs.

    def _refresh(self) -> None:
        if self._feed is not None:
            for decision in self._feed.read_new():
                if "compare" in decision or decision["task"] not in self.decided:
                    self._decide(decision)

    def not_needed(self, item: LlmItem) -> str | None:
        """Why `item` need not run, or None."""
        self._refresh()
        task = task_of(item.nodeid, item.trial)
        if (decided := self.decided.get(task)) is not None:
            assert self.rule is not None
            return (
                f"not needed: {item.task_id} already decided {decided['verdict']} "
                f"({decided['passed']} passed, {decided['failed']} failed; "
                f"rule {self.rule.text})"
            )
        if self.compared is not None and item.trial > 0:
            return f"not needed: {self.compared}"
        return None

    def may_start(self, item: LlmItem) -> bool:
        """Whether the window may start `item` ahead: needed, and not certain to be wasted
        by its task's trials already in flight here. A deferred item starts at its setup."""
        if item.nodeid in self._tasks:
            return True
        if self.not_needed(item) is not None:
            return False
        task = task_of(item.nodeid, item.trial)
        tally = self.tallies.setdefault(task, _Tally())
        if item in tally.deferred:
            return False
        if tally.deferred or self._full(tally):  # an earlier deferred trial goes first
            tally.deferred.append(item)
            return False
        self._running(item, task)
        return True

    def _full(self, tally: _Tally) -> bool:
        """As many of the task's trials in flight as outcomes could still decide it."""
        rule = self.rule
        return rule is not None and len(tally.running) >= rule.outcomes_to_decide(
            tally.passed, tally.failed
        )

    def _make_room(self, task: str) -> None:
        """After an outcome: start the task's deferred trials it made room for."""
        tally = self.tallies[task]
        while tally.deferred and not self._full(tally):
            item = tally.deferred[0]
            if item.session.shouldstop or item.session.shouldfail or self.not_needed(item):
                return  # each is skipped, or run, at its setup
            tally.deferred.pop(0)
            self._running(item, task)
            item.start()

    def _running(self, item: LlmItem, task: str) -> None:
        self._tasks[item.nodeid] = task
        self.tallies.setdefault(task, _Tally()).running.add(item.nodeid)

    # Hooks.

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """The controller's decisions file, made with the first worker (holding any made
        already, say from a resumed journal)."""
        if self._share is None:
            self._share = Path(tempfile.mkdtemp(prefix="llmtool-early-stop-"))
            feed = _Feed(self._share / "decisions.jsonl")
            feed.path.touch()
            for decision in self.decided.values():
                feed.write(decision)
            if self.compared is not None:
                feed.write({"compare": self.compared})
        node.workerinput[DECISIONS_INPUT] = str(self._share / "decisions.jsonl")

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.ordered:
            trial_major(items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not isinstance(item, LlmItem) or item.nodeid in self._tasks:
            return  # started ahead: its run is paid for, its outcome counts
        task = task_of(item.nodeid, item.trial)
        deferred = self.tallies.setdefault(task, _Tally()).deferred
        if item in deferred:
            deferred.remove(item)
        reason = self.not_needed(item)
        if reason is None:
            self._running(item, task)
            return
        item.stash[_SKIP_KEY] = SkippedTrial(
            nodeid=item.nodeid,
            kind=item.kind.name,
            model=item.model.name,
            task=task,
            trial=item.trial,
            reason=reason,
            by="task" if task in self.decided else "comparison",
        )
        pytest.skip(reason)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        skipped = item.stash.get(_SKIP_KEY, None) if report.when == "setup" else None
        if skipped is not None:
            setattr(report, SKIPPED_ATTR, {"data": skipped.model_dump_json()})
        return report

    @pytest.hookimpl(tryfirst=True)  # before the controller takes the result off the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        done = report.when == "call" or (report.when == "setup" and not report.passed)
        task = self._tasks.pop(report.nodeid, None) if done else None
        if task is not None:
            self.tallies[task].running.discard(report.nodeid)
        if self.reporting:
            self._reported(report)
        elif task is not None and report.when == "call":
            self._outcome(task, report.passed)
        if task is not None:
            self._make_room(task)

    def _reported(self, report: pytest.TestReport) -> None:
        """On the reporting process: every process's outcomes and skipped trials."""
        skipped = report.__dict__.pop(SKIPPED_ATTR, None)
        if skipped is not None:
            self.skipped.append(SkippedTrial.model_validate_json(skipped["data"]))
        result_attr, error_attr = self._carried
        carried = getattr(report, result_attr, None)
        if carried is not None and report.when == "call":
            self._ran(self._results[carried["kind"]].model_validate_json(carried["data"]))
        error = getattr(report, error_attr, None)
        if error is not None:
            record = ErrorRecord.model_validate(error)
            self._outcome(task_of(record.nodeid, record.trial), None)

    def pytest_unconfigure(self) -> None:
        if self._share is not None:
            shutil.rmtree(self._share, ignore_errors=True)

    # The summary.

    def summary(self) -> EarlyStopSummary:
        """What was skipped and, estimated from the same task's trials that ran, saved."""
        calls = 0.0
        cost: float | None = None
        for skipped in self.skipped:
            spent = self.spent.get(skipped.task)
            if spent is None or not spent.ran:
                continue
            calls += spent.calls / spent.ran
            if spent.priced:
                cost = (cost or 0.0) + spent.cost / spent.priced
        decisions = self.comparison.decisions if self.comparison is not None else []
        return EarlyStopSummary(
            modes=self.modes,
            trials_skipped=len(self.skipped),
            skipped=sorted(self.skipped, key=lambda s: s.nodeid),
            calls_saved=round(calls, 2),
            cost_saved_usd=None if cost is None else round(cost, 6),
            comparisons=decisions,
        )


def install(
    config: pytest.Config,
    settings: Settings,
    kinds: list[Kind[Any, Any]],
    carried: tuple[str, str],
) -> None:
    """Register the early stop of this process when the run asks for it."""
    if not settings.early_stop:
        return
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    feed = workerinput.get(DECISIONS_INPUT) if workerinput is not None else None
    results = {} if workerinput is not None else {kind.name: kind.result_type for kind in kinds}
    early = EarlyStop(settings, results, carried, Path(feed) if feed else None)
    config.stash[EARLY_STOP_KEY] = early
    config.pluginmanager.register(early, "llmtool-early-stop")
