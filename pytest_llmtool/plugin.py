"""The pytest entry point: options, collection, and the role-specific plugin objects.

Every process (a plain run, the xdist controller, each worker) gets a `TaskRunner`, which
owns the event loop and attaches each item's result to its report. Only the process that
reports (plain run or controller) also gets a `ResultCollector`, which aggregates those
reports into the run summary, journals each result as it arrives and writes the report
files. Results travel on the reports as JSON-native data, so the collector sees the same
thing with or without xdist. Every process also turns SIGTERM into Ctrl-C (`signals.py`).
"""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import pytest_llmtool
from pytest_llmtool.budget import Budget
from pytest_llmtool.collect import (
    STATE_KEY,
    AgentItem,
    DatasetFile,
    LlmItem,
    RunState,
    TaskItem,
)
from pytest_llmtool.journal import JOURNAL_NAME, EntryType, JournalWriter
from pytest_llmtool.records import ErrorRecord, EvalReport, ScenarioResult, TaskResult
from pytest_llmtool.report import write_report_files
from pytest_llmtool.report.terminal import terminal_lines
from pytest_llmtool.settings import Settings, add_options
from pytest_llmtool.signals import TermAsInterrupt
from pytest_llmtool.summary import build_report
from pytest_llmtool.tasks import looks_like_dataset

SPEND_DIR_KEY = "llmtool_spend_dir"
RESULT_ATTR = "llmtool_result"
SCENARIO_ATTR = "llmtool_scenario"
ERROR_ATTR = "llmtool_error"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "llm(model, category): set on every pytest-llmtool task item"
    )
    settings = Settings.from_config(config)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    spend_dir: Path | None = None
    if settings.max_cost is not None:
        if workerinput is not None:
            spend_dir = Path(workerinput[SPEND_DIR_KEY])
        elif config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
            spend_dir = Path(tempfile.mkdtemp(prefix="llmtool-spend-"))
    process = workerinput["workerid"] if workerinput else "main"
    config.stash[STATE_KEY] = RunState.create(
        settings, Budget(settings.max_cost, spend_dir, process)
    )
    config.pluginmanager.register(TaskRunner(spend_dir), "llmtool-runner")
    signals = TermAsInterrupt()
    config.pluginmanager.register(signals, "llmtool-signals")
    signals.install()
    # Restored by a cleanup, which runs after every pytest_unconfigure: until then SIGTERM's
    # default action could cut the cancelling of runs in flight short.
    config.add_cleanup(signals.uninstall)
    if workerinput is None:
        config.pluginmanager.register(ResultCollector(config), "llmtool-collector")


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.File | None:
    settings = parent.config.stash[STATE_KEY].settings
    if file_path.suffix == ".jsonl":
        patterns = settings.dataset_patterns
        if any(file_path.match(p) for p in patterns) and looks_like_dataset(file_path):
            return DatasetFile.from_parent(parent, path=file_path)
    elif file_path.suffix in (".yaml", ".yml") and any(
        file_path.match(p) for p in settings.scenario_patterns
    ):
        # Scenario machinery (jsonschema, gates, judge) is imported only when needed.
        from pytest_llmtool.collect_scenarios import ScenarioFile
        from pytest_llmtool.scenarios import looks_like_scenario

        if looks_like_scenario(file_path):
            return ScenarioFile.from_parent(parent, path=file_path)
    return None


def _worker_queue(config: pytest.Config) -> Any:
    """xdist's per-worker queue of item indices, when this is an xdist worker."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor":
            return getattr(plugin, "torun", None)
    return None


class TaskRunner:
    """Per process: start task runs ahead of pytest, attach results to reports, clean up."""

    def __init__(self, spend_dir: Path | None) -> None:
        self.spend_dir = spend_dir
        self._positions: dict[str, int] | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: tell each worker where the run's spend is tallied."""
        if self.spend_dir is not None:
            node.workerinput[SPEND_DIR_KEY] = str(self.spend_dir)

    def _upcoming(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.Item]:
        """The items this process will run next, this one first, as far as it can tell."""
        session = item.session
        queue = _worker_queue(item.config)
        if queue is not None:
            with queue.lock() as pending:
                indices = [i for i in pending if isinstance(i, int)]
            return [item, *([nextitem] if nextitem else []), *(session.items[i] for i in indices)]
        if self._positions is None:
            self._positions = {it.nodeid: n for n, it in enumerate(session.items)}
        start = self._positions.get(item.nodeid)
        return [item] if start is None else session.items[start:]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if not isinstance(item, AgentItem):
            return
        window = item.config.stash[STATE_KEY].settings.concurrency
        if window == 1 or item.session.shouldstop or item.session.shouldfail:
            return
        # Keep up to `window` runs in flight; after a stop (-x, --maxfail) at most that many
        # started runs are left unreported.
        for upcoming in self._upcoming(item, nextitem)[:window]:
            if isinstance(upcoming, AgentItem):
                upcoming.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if isinstance(item, AgentItem) and item.result is not None:
            if report.when == "setup":
                # The setup may have only waited for a run started earlier: report how long
                # the task itself ran.
                report.duration = item.result.duration_ms / 1000
            elif report.when == "call":
                attr = RESULT_ATTR if isinstance(item, TaskItem) else SCENARIO_ATTR
                setattr(report, attr, item.result.model_dump(mode="json"))
                item.result = None  # the report now carries it
        if report.when == "setup" and report.failed and isinstance(item, LlmItem):
            setattr(report, ERROR_ATTR, item.error_record(report.longreprtext).model_dump())
        return report

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        config.stash[STATE_KEY].close()
        if self.spend_dir is not None and not hasattr(config, "workerinput"):
            shutil.rmtree(self.spend_dir, ignore_errors=True)


class ResultCollector:
    """On the reporting process only: aggregate results, print the summary, write files."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[TaskResult] = []
        self.errors: list[ErrorRecord] = []
        self.scenarios: list[ScenarioResult] = []
        self.started = dt.datetime.now(dt.UTC)
        self.report: EvalReport | None = None
        self.written: list[Path] = []
        self.journal: JournalWriter | None = None

    def _journal_path(self) -> Path | None:
        """`results.jsonl` next to the reports, else in pytest's cache (when it is enabled)."""
        report_dir = self.config.stash[STATE_KEY].settings.report_dir
        if report_dir is not None:
            return report_dir / JOURNAL_NAME
        cache: pytest.Cache | None = getattr(self.config, "cache", None)
        return None if cache is None else cache.mkdir("llmtool") / JOURNAL_NAME

    def _record(self, kind: EntryType, nodeid: str, data: dict[str, Any]) -> None:
        """Journal a finished item at once, so that even a killed run keeps it. The journal
        is started by the first one: a run without LLM items leaves the last journal be."""
        if self.journal is None:
            path = self._journal_path()
            if path is None:
                return
            params = self.config.invocation_params
            self.journal = JournalWriter(
                path,
                {
                    "plugin": pytest_llmtool.__version__,
                    "started": self.started.isoformat(timespec="seconds"),
                    "models": [m.name for m in self.config.stash[STATE_KEY].settings.models],
                    "args": list(params.args),
                    "invocation_dir": str(params.dir),
                },
            )
        self.journal.append(kind, nodeid, data)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # After every other plugin, and journalled last: an interrupt landing in the middle
        # may cost the journal a line, but what is journalled is in JUnit and the report too.
        # Taken off the report: pytest keeps every report to the end, and one copy of each
        # result (with its whole trace) is enough.
        result = report.__dict__.pop(RESULT_ATTR, None)
        if result is not None:
            self.results.append(TaskResult.model_validate(result))
            self._record("task", report.nodeid, result)
        scenario = report.__dict__.pop(SCENARIO_ATTR, None)
        if scenario is not None:
            self.scenarios.append(ScenarioResult.model_validate(scenario))
            self._record("scenario", report.nodeid, scenario)
        error = getattr(report, ERROR_ATTR, None)
        if error is not None:
            self.errors.append(ErrorRecord.model_validate(error))
            self._record("error", report.nodeid, error)

    def _metadata(self, exitstatus: int) -> dict[str, Any]:
        settings = self.config.stash[STATE_KEY].settings
        return {
            "tool": f"pytest-llmtool {pytest_llmtool.__version__}",
            "pytest": pytest.__version__,
            "python": platform.python_version(),
            "models": ", ".join(m.name for m in settings.models),
            "max_turns": settings.max_turns,
            "started": self.started.isoformat(timespec="seconds"),
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "exit_status": int(exitstatus),
        }

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.journal is not None:
            self.journal.close()
        if not (self.results or self.errors or self.scenarios):
            return
        # Runs even when the session was interrupted, so a partial run still leaves a report.
        self.report = build_report(
            self.results, self.errors, self._metadata(exitstatus), self.scenarios
        )
        report_dir = self.config.stash[STATE_KEY].settings.report_dir
        if report_dir is not None:
            self.written = write_report_files(self.report, report_dir)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.report is None:
            return
        terminalreporter.write_sep("=", "llmtool eval summary")
        for line in terminal_lines(self.report):
            terminalreporter.write_line(line)
        if self.written:
            terminalreporter.write_line("")
            terminalreporter.write_line("report: " + ", ".join(str(p) for p in self.written))
