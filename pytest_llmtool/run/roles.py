"""The two roles a pytest process plays, as pytest-xdist splits them.

Every process (a plain run, the xdist controller, each worker) has a `Runner`: it starts item
runs ahead of pytest (the concurrency window), puts each finished item's result on its report
as JSON-native data, and closes the event loop and clients at the end. The process that
reports (a plain run or the controller) also has a `Controller`: it takes the results off the
reports as they arrive (so it sees the same thing with or without xdist), journals each one,
builds the run report at session finish and hands it to the writers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import itertools
import json
import platform
import shutil
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import pytest_llmtool
from pytest_llmtool.agents.models import driven_by, identity, secret_variables
from pytest_llmtool.agents.registry import ModelRef, overridden
from pytest_llmtool.history.gate import GATE_KEY
from pytest_llmtool.kinds import Kind
from pytest_llmtool.records import (
    AgentTrace,
    ErrorRecord,
    EvalReport,
    ItemResult,
    ModelInfo,
    ModelSetup,
    RunMetadata,
    StoppedTask,
)
from pytest_llmtool.report import Writer
from pytest_llmtool.report.figures import count_along
from pytest_llmtool.report.redact import Redactor, redact_report
from pytest_llmtool.report.store import ResultStore
from pytest_llmtool.report.terminal import WIDEST, Screen
from pytest_llmtool.run.compat import xdist_pending
from pytest_llmtool.run.digests import TaskDigests, model_digests
from pytest_llmtool.run.early_stop import EARLY_STOP_KEY
from pytest_llmtool.run.heap import freeze
from pytest_llmtool.run.items import BadInputItem, LlmItem
from pytest_llmtool.run.journal import JournalEntry, JournalWriter, journal_path, run_identity
from pytest_llmtool.run.state import STATE_KEY
from pytest_llmtool.run.trajectories import TrajectoryWriter
from pytest_llmtool.sandbox import RUNTIMES
from pytest_llmtool.sandbox.limits import Limits, enforced
from pytest_llmtool.settings import Settings
from pytest_llmtool.stats.compare import bash_pass, comparisons, diagnostics, read_bash_pass
from pytest_llmtool.stats.task_verdicts import report_verdicts
from pytest_llmtool.stats.trials import kind_trials

RESULT_ATTR = "llmtool_result"
ERROR_ATTR = "llmtool_error"
STOPPED_ATTR = "llmtool_stopped"  # {"data": a `StoppedTask` as JSON}: the cost limit stopped it
KINDS_KEY = pytest.StashKey[list[Kind[Any, Any]]]()
WRITERS_KEY = pytest.StashKey[list[Writer]]()
# The selected dataset's fingerprint (kind -> digest), as the process that collects found it.
FINGERPRINT_KEY = pytest.StashKey[dict[str, str]]()
FINGERPRINT_OUTPUT = "llmtool_fingerprint"
# Per model name, its digest (`run/digests.py`), when the run journals or resumes.
MODEL_DIGESTS_KEY = pytest.StashKey[dict[str, str]]()
# A journal entry holding a `ModelSetup` (its node id is the setup's key), not a result.
SETUP_ENTRY = "setup"
# A journal entry holding a `StoppedTask`: not a result (a resumed run runs it again), but
# what it spent counts toward a resumed run's `--llm-max-cost`.
STOPPED_ENTRY = "stopped"


def fingerprint(items: Sequence[pytest.Item], digests: TaskDigests | None = None) -> dict[str, str]:
    """Per kind, a digest of the selected tasks: each one's node id (without the model and
    trial) and content (its reference `solution` aside), whatever models and trials run
    it. Two runs with the same digest ran the same tasks; a changed check, prompt or file
    changes it. With `digests`, each item gets its task's own digest too (`item.digest`)."""
    tasks: dict[str, set[str]] = {}
    # A task's items (per model and trial) share its loaded object: dump it once.
    dumped: dict[int, tuple[str, str | None]] = {}
    for item in items:
        if isinstance(item, LlmItem):
            work = item.work
            known = dumped.get(id(work))
            if known is None:
                # `solution` is the oracle's answer, not the task: a changed one is the same
                # task.
                if isinstance(work, BaseModel):
                    content = work.model_dump_json(exclude={"solution"})
                else:
                    content = repr(work)
                own = None if digests is None else digests.digest(item.kind, work, content)
                known = dumped[id(work)] = content, own
            content, item.digest = known
            key, kind = item.nodeid.partition("[")[0], item.kind.name
        elif isinstance(item, BadInputItem):
            key, kind, content = item.nodeid, "input", str(item.problem)
        else:
            continue
        tasks.setdefault(kind, set()).add(json.dumps([key, content]))
    return {
        kind: hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:32]
        for kind, lines in sorted(tasks.items())
    }


def record_fingerprint(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """Keep the selected dataset's fingerprint, and hand it to the controller under xdist;
    when the run journals or resumes, each item's task digest and the models' too."""
    settings = config.stash[STATE_KEY].settings
    journals = settings.report_dir is not None or getattr(config, "cache", None) is not None
    wanted = journals or settings.resume is not False
    found = fingerprint(items, TaskDigests() if wanted else None)
    if wanted:
        config.stash[MODEL_DIGESTS_KEY] = model_digests(settings)
    config.stash[FINGERPRINT_KEY] = found
    output: dict[str, Any] | None = getattr(config, "workeroutput", None)
    if output is not None:  # the controller does not collect
        output[FINGERPRINT_OUTPUT] = found


def item_fingerprint(item: LlmItem) -> str | None:
    """What the item's result is made of: its task's digest and its model's (`digests.py`);
    None when the run does not journal."""
    models = item.config.stash.get(MODEL_DIGESTS_KEY, None)
    if item.digest is None or models is None:
        return None
    return f"{item.digest}{models[item.model.name]}"


REDACTOR_KEY = pytest.StashKey[Redactor]()


def redactor(config: pytest.Config) -> Redactor:
    """The run's redactor, made on first use from the environment, `--llm-agent-env` and the
    model table."""
    found = config.stash.get(REDACTOR_KEY, None)
    if found is None:
        state = config.stash.get(STATE_KEY, None)
        settings = state.settings if state is not None else None
        found = config.stash[REDACTOR_KEY] = Redactor.from_env(
            # The model table's key variables and the variables its headers read, too.
            names=(*settings.agent_env, *secret_variables(settings.aliases)) if settings else (),
            urls=settings.base_urls if settings else None,
        )
    return found


class Runner:
    """Per process: start runs ahead of pytest, attach results to reports, clean up."""

    def __init__(self) -> None:
        self._positions: dict[str, int] | None = None
        # Where the concurrency window last reached in `session.items` (a plain run).
        self._frontier = 0
        # The setups this process has sent to the controller: each goes once.
        self._sent: set[str] = set()
        self._refrozen = False

    def _new_setup(self, result: ItemResult) -> tuple[str, str] | None:
        """The item's setup (key, JSON) when this process has not sent it yet."""
        trace = getattr(result, "trace", None)
        if not isinstance(trace, AgentTrace) or trace.given is None or trace.setup is None:
            return None
        if trace.setup in self._sent:
            return None
        self._sent.add(trace.setup)
        return trace.setup, trace.given.model_dump_json()

    @pytest.hookimpl(trylast=True)  # after -k, -m and --lf have deselected theirs
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if FINGERPRINT_KEY not in config.stash:  # `--llm-resume` took it before deselecting
            record_fingerprint(config, items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if any(isinstance(item, LlmItem) for item in session.items):
            freeze(session.config)

    def _upcoming(
        self, item: pytest.Item, nextitem: pytest.Item | None, window: int
    ) -> Iterator[pytest.Item]:
        """Up to `window` items this process will run next, this one first, less those an
        earlier item already started.

        The tasks started ahead only progress while pytest's thread waits for one of them
        (`runtime.py`), so they stop before an item of another kind: a plain test holds that
        thread for as long as it runs. (Between two items an xdist worker may wait for its
        controller to send the next: a round trip.)"""
        session = item.session
        pending = xdist_pending(item.config)
        if pending is not None:
            later = (session.items[i] for i in pending[:window])
            upcoming: Iterable[pytest.Item] = [item, *([nextitem] if nextitem else []), *later]
            ahead = itertools.takewhile(lambda it: isinstance(it, LlmItem), upcoming)
            return itertools.islice(ahead, window)
        if self._positions is None:
            self._positions = {it.nodeid: n for n, it in enumerate(session.items)}
        start = self._positions.get(item.nodeid)
        if start is None:
            return iter([item])
        # The items before the frontier were started by the items before this one: start only
        # those the window now reaches (one per item, not `window` idempotent calls).
        begin = max(start, self._frontier)
        found = list(
            itertools.takewhile(
                lambda it: isinstance(it, LlmItem), session.items[begin : start + window]
            )
        )
        self._frontier = begin + len(found)
        return iter(found)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if not isinstance(item, LlmItem):
            return
        window = item.config.stash[STATE_KEY].settings.concurrency
        if window == 1 or item.session.shouldstop or item.session.shouldfail:
            return
        # Keep up to `window` runs in flight; after a stop (-x, --maxfail) at most that many
        # started runs are left unreported.
        early = item.config.stash.get(EARLY_STOP_KEY, None)
        for upcoming in self._upcoming(item, nextitem, window):
            assert isinstance(upcoming, LlmItem)
            if early is None or early.may_start(upcoming):  # else started at its setup
                upcoming.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if isinstance(item, LlmItem) and item.result is not None:
            if report.when == "setup":
                # The setup may have only waited for a run started earlier: report how long
                # the task itself ran, the figure its result records.
                item.result.run_ms = round(item.ran_ms, 3)
                report.duration = item.result.run_ms / 1000
            elif report.when == "call":
                # As JSON text: one string to send and keep, not thousands of small objects.
                data = item.result.model_dump_json()
                carried: dict[str, object] = {"kind": item.kind.name, "data": data}
                if (made_of := item_fingerprint(item)) is not None:
                    carried["fingerprint"] = made_of
                setup = self._new_setup(item.result)
                if setup is not None:
                    carried |= {"setup_key": setup[0], "setup": setup[1]}
                if item.result.judge_calls_saved:  # summed without decoding the result
                    carried["judge_calls_saved"] = item.result.judge_calls_saved
                setattr(report, RESULT_ATTR, carried)
                item.result = None  # the report now carries it
                if not self._refrozen:  # the first task imported the SDK it calls
                    self._refrozen = True
                    freeze(item.config)
        if isinstance(item, LlmItem) and report.when == "teardown":
            item.work = None  # an item runs once (`LlmItem.start`), skipped or not
        if isinstance(item, LlmItem) and report.when == "setup" and item.stopped is not None:
            setattr(report, STOPPED_ATTR, {"data": item.stopped.model_dump_json()})
            item.stopped = None  # the report now carries it
        failed_setup = report.when == "setup" and report.failed
        if failed_setup and isinstance(item, LlmItem | BadInputItem):
            setattr(report, ERROR_ATTR, item.error_record(report.longreprtext).model_dump())
        if isinstance(item, LlmItem | BadInputItem):
            # The choke point: all that reaches JUnit, the journal, the reports and the
            # terminal about an item is on its report.
            redact_report(redactor(item.config), report, (RESULT_ATTR, ERROR_ATTR, STOPPED_ATTR))
        return report

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        config.stash[STATE_KEY].close()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_info(ref: ModelRef, settings: Settings) -> ModelInfo:
    """What `ref`'s name resolved to, as the run record keeps it (`models.identity`): its
    entry with the command line's values over it, the endpoint without credentials, query or
    fragment, the parameters every call is sent, and their digest. No key, no header value."""
    if ref.provider in ("offline", "external"):  # nothing the plugin sends
        return ModelInfo(name=ref.name, provider=ref.provider, model_id=ref.model_id, resolved=True)
    entry = overridden(ref, settings.params, settings.base_urls).setup
    if ref.agent is not None:  # the CLI's version, asked once per run
        from pytest_llmtool.agents.installed.runner import cli_version

        return driven_by(identity(ref.name, entry), ref.agent, cli_version(ref.agent))
    return identity(ref.name, entry)


class Controller:
    """On the reporting process only: collect and journal results, build the report, write."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.kinds: list[Kind[Any, Any]] = config.stash[KINDS_KEY]
        # Compressed, decoded as read (`report/store.py`): a 100k-task run fits in memory.
        self.results: dict[str, ResultStore[ItemResult]] = {
            kind.name: ResultStore(kind.result_type) for kind in self.kinds
        }
        self.errors: list[ErrorRecord] = []
        # Items the cost limit stopped: reported, and journalled for their spend (a resumed
        # run runs them again).
        self.stopped: list[StoppedTask] = []
        # What the models were given, each distinct setup once (`EvalReport.setups`).
        self.setups: dict[str, ModelSetup] = {}
        self.started = dt.datetime.now(dt.UTC)
        self.clock = time.monotonic()
        # Items of this session whose outcome is known (by node id), and those resumed.
        self.ran: set[str] = set()
        self.resumed = 0
        # Judge calls the items' checks and gates made needless (`--llm-judge-when`).
        self.judge_calls_saved = 0
        self.report: EvalReport | None = None
        self.written: list[Path] = []
        self.journal: JournalWriter | None = None
        # What could not be written at the end (a full disk), said in the summary.
        self.unwritten: list[str] = []
        self._finished = False
        directory = config.stash[STATE_KEY].settings.trajectories
        self.trajectories = (
            None if directory is None else TrajectoryWriter(directory, redactor(config))
        )

    def _open_journal(self, seed: list[JournalEntry]) -> None:
        settings = self.config.stash[STATE_KEY].settings
        try:
            path = journal_path(self.config, settings.report_dir)
        except OSError as exc:  # pytest's cache cannot be made: a journal stopped at once
            self.journal = JournalWriter(Path(exc.filename or "."), {}, failed=exc)
            return
        if path is None:
            return
        params = self.config.invocation_params
        header = {
            **run_identity(settings),
            "started": self.started.isoformat(timespec="seconds"),
            "args": list(params.args),
            "invocation_dir": str(params.dir),
        }
        self.journal = JournalWriter(path, header, seed)

    def _record(self, kind: str, nodeid: str, data: str, made_of: str | None = None) -> None:
        """Journal a finished item (its JSON, and what it was made of) at once, so that even
        a killed run keeps it. The journal is started by the first one: a run without LLM
        items leaves the last journal be."""
        if self.journal is None:
            self._open_journal([])
            if self.journal is None:
                return
        self.journal.append_json(kind, nodeid, data, made_of)

    def resume(
        self,
        finished: list[tuple[JournalEntry, ItemResult]],
        started: dt.datetime,
        setups: Sequence[tuple[JournalEntry, ModelSetup]] = (),
        stopped: Sequence[JournalEntry] = (),
    ) -> None:
        """`--llm-resume`: an earlier run's finished results become this run's, from the
        time it started, and the new journal starts with them at once (and the setups they
        name, and the tasks the cost limit stopped, for what they spent), so that it again
        holds every finished item and all the spend when this run is stopped too."""
        self.started = started
        self.resumed = len(finished)
        early = self.config.stash.get(EARLY_STOP_KEY, None)
        if early is not None:
            early.seed(result for _, result in finished)
        for entry, result in finished:
            self.results[entry.type].append(result)
            self.judge_calls_saved += result.judge_calls_saved
        for entry, setup in setups:
            self.setups[entry.nodeid] = setup
        self._open_journal(
            [*(entry for entry, _ in setups), *(entry for entry, _ in finished), *stopped]
        )

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # After every other plugin, and journalled last: an interrupt landing in the middle
        # may cost the journal a line, but what is journalled is in JUnit and the report too.
        # Taken off the report: pytest keeps every report to the end, and one copy of each
        # result (with its whole trace) is enough, kept as the JSON it came as.
        # Ran once its outcome is known: its call, or a setup that failed or skipped. Not
        # only at teardown: a worker killed between an item's call and its teardown has
        # still delivered the item's result, and the count must agree with the results.
        # xdist's report of an item whose worker crashed (`when="???"`) is no outcome.
        if report.when in ("call", "teardown") or (report.when == "setup" and not report.passed):
            self.ran.add(report.nodeid)
        carried = report.__dict__.pop(RESULT_ATTR, None)
        if carried is not None:
            key, setup = carried.get("setup_key"), carried.get("setup")
            if isinstance(key, str) and isinstance(setup, str) and key not in self.setups:
                self.setups[key] = ModelSetup.model_validate_json(setup)
                self._record(SETUP_ENTRY, key, setup)
            self.results[carried["kind"]].append_json(carried["data"])
            self.judge_calls_saved += carried.get("judge_calls_saved", 0)
            self._record(
                carried["kind"], report.nodeid, carried["data"], carried.get("fingerprint")
            )
            if self.trajectories is not None:
                self._trajectory(carried["kind"], report.nodeid, carried["data"])
        stopped = report.__dict__.pop(STOPPED_ATTR, None)
        if stopped is not None:
            self.stopped.append(StoppedTask.model_validate_json(stopped["data"]))
            self._record(STOPPED_ENTRY, report.nodeid, stopped["data"])
        error = getattr(report, ERROR_ATTR, None)
        if error is not None:
            self.errors.append(ErrorRecord.model_validate(error))
            self._record("error", report.nodeid, json.dumps(error, ensure_ascii=False))

    def _trajectory(self, kind: str, nodeid: str, data: str) -> None:
        """`--llm-trajectories`: the item's trajectory, written as its result arrives."""
        assert self.trajectories is not None
        result = self.results[kind].result_type.model_validate_json(data)
        setup_key = getattr(getattr(result, "trace", None), "setup", None)
        try:
            self.trajectories.write(nodeid, result, self.setups.get(setup_key or ""))
        except OSError as exc:
            self.unwritten.append(f"{exc.filename or nodeid}: {exc.strerror or exc}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Under xdist: the fingerprint a worker collected (each collects the same)."""
        found = getattr(node, "workeroutput", {}).get(FINGERPRINT_OUTPUT)
        if found is not None:
            self.config.stash[FINGERPRINT_KEY] = found

    def _stopped(self, session: pytest.Session, exitstatus: int) -> str | None:
        """Why items did not run: an interrupt, the cost limit, a stop on failures."""
        budget = self.config.stash[STATE_KEY].budget.summary(len(self.stopped))
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "interrupted"
        if budget is not None and budget.reached:
            return "stopped by --llm-max-cost"
        if session.shouldfail or session.shouldstop:
            return "stopped early: " + str(session.shouldfail or session.shouldstop)
        return None

    def _metadata(self, exitstatus: int, session: pytest.Session | None = None) -> RunMetadata:
        settings = self.config.stash[STATE_KEY].settings
        collected = ran = None
        stopped = None
        if session is not None:
            collected = session.testscollected + self.resumed
            ran = min(len(self.ran), session.testscollected) + self.resumed
            stopped = self._stopped(session, exitstatus)
            if stopped is None and ran < collected:
                stopped = "not every item ran"
        fingerprint = self.config.stash.get(FINGERPRINT_KEY, {})
        if session is not None and not fingerprint and stopped is None:
            stopped = "no dataset fingerprint"  # an xdist worker that never reported it
        models = [model_info(m, settings) for m in settings.models]
        return RunMetadata(
            plugin=pytest_llmtool.__version__,
            pytest=pytest.__version__,
            python=platform.python_version(),
            bashkit=_version("bashkit"),
            bashkit_runtimes=dict(RUNTIMES),
            bash_shells=list(settings.bash),
            sdks={name: v for name in ("anthropic", "openai") if (v := _version(name))},
            models=models,
            agents={m.agent: m.agent_version for m in models if m.agent is not None},
            max_turns=settings.max_turns,
            trials=settings.trials,
            command_line=list(self.config.invocation_params.args),
            started=self.started.isoformat(timespec="seconds"),
            finished=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            exit_status=int(exitstatus),
            limits=Limits().updated(settings.limits).record(),
            limits_enforced=enforced(jailed=settings.sandbox != "none"),
            fingerprint=fingerprint,
            collected=collected,
            ran=ran,
            complete=None if session is None else stopped is None,
            stopped=stopped,
            resumed=self.resumed,
            wall_s=round(time.monotonic() - self.clock, 3),
        )

    def build_report(self, exitstatus: int, session: pytest.Session | None = None) -> EvalReport:
        settings = self.config.stash[STATE_KEY].settings
        # Models to compare: what the comparisons read of the bash results is read along the
        # summaries' pass over them.
        store = self.results.get("bash")
        read = read_bash_pass(store) if store is not None and len(settings.models) > 1 else None
        keep_figures = count_along(self.results)  # the headline's figures, along that pass
        fields: dict[str, Any] = {}
        for kind in self.kinds:
            own_errors = [e for e in self.errors if e.kind == kind.name]
            for name, value in kind.report_fields(self.results[kind.name], own_errors).items():
                if name in kind.report_keys:
                    fields[name] = value
                else:  # a plugin's section holds what it returned, in full
                    value = list(value) if isinstance(value, ResultStore) else value
                    fields.setdefault("extensions", {}).setdefault(kind.name, {})[name] = value
        if settings.trials > 1:
            names = [m.name for m in settings.models]
            fields["trials"] = {
                kind.name: kind_trials(self.results[kind.name], names, settings.trials)
                for kind in self.kinds
                if self.results[kind.name]
            }
        budget = self.config.stash[STATE_KEY].budget.summary(len(self.stopped))
        # A kind's stored results go in as they are: validating them would decode them all.
        stored = {k: v for k, v in fields.items() if isinstance(v, ResultStore)}
        report = EvalReport(
            metadata=self._metadata(exitstatus, session),
            errors=self.errors,
            budget=budget,
            stopped=self.stopped,
            **{k: v for k, v in fields.items() if k not in stored},
        )
        report.partial = report.metadata.partial_line()
        report.setups = dict(sorted(self.setups.items()))
        report.judge_when = settings.judge_when
        report.judge_calls_saved = self.judge_calls_saved
        for name, results in stored.items():
            setattr(report, name, results)
        # Read off the kinds' finished sections: models and guidance documents side by side.
        bash = bash_pass(report, read() if read is not None else None)
        report.comparisons = comparisons(report, bash)
        if (early := self.config.stash.get(EARLY_STOP_KEY, None)) is not None:
            report.early_stop = early.summary()
        report.diagnostics = diagnostics(report, bash)
        if settings.task_rule is not None:  # after the early stop's skipped trials are in
            report.task_rule = settings.task_rule.text
            report.task_verdicts = report_verdicts(report, settings.task_rule, self.kinds)
        keep_figures(report)
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)

    def finish(self, session: pytest.Session) -> None:
        """Build, judge and write the run report, once: at session finish, or earlier when
        pytest-html asks for its summary (its session finish may run before ours)."""
        if self._finished:
            return
        self._finished = True
        if self.journal is not None:
            self.journal.close()
        interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
        llm = bool(self.config.stash.get(FINGERPRINT_KEY, {}))
        if not (self.errors or self.stopped or any(self.results.values()) or (interrupted and llm)):
            return
        # The run's reports and items live to its end: the passes over the results below
        # make much short-lived garbage, whose collections then skip them (`run/heap.py`).
        freeze(self.config)
        # Runs even when the session was interrupted (before any item finished too), so a
        # partial run still leaves a report that says it is partial.
        # The session's status, which a resumed run sets from the whole run's results.
        directory = self.config.stash[STATE_KEY].settings.report_dir
        writers = self.config.stash[WRITERS_KEY]
        for writer in writers:  # may read along the summaries' pass over the results
            writer.before_report(self.results, self.kinds, directory)
        self.report = self.build_report(session.exitstatus, session)
        gate = self.config.stash.get(GATE_KEY, None)
        if gate is not None:  # --llm-baseline: compares, and may decide the exit status
            session.exitstatus = gate.judge(self.report, self.kinds, session, session.exitstatus)
        for writer in writers:
            try:
                self.written += writer.files(self.report, self.kinds, directory)
            except OSError as exc:  # the others, the history and the summary still go out
                where = exc.filename or directory or type(writer).__name__
                self.unwritten.append(f"{where}: {exc.strerror or exc}")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        problem = self.journal.problem if self.journal is not None else None
        if problem is not None:
            terminalreporter.write_line(
                f"llmtool: journal stopped: {problem}; the results after that are not "
                "journalled (--llm-resume will run them again)",
                yellow=True,
            )
        if self.report is None:
            return
        terminalreporter.write_sep("=", "llmtool eval summary")
        redact = redactor(self.config)
        screen = Screen.of(
            self.config.stash[STATE_KEY].settings.summary,
            self.config.get_verbosity(),
            shutil.get_terminal_size((WIDEST, 24)).columns,  # a log has no width: the widest
        )
        for writer in self.config.stash[WRITERS_KEY]:
            for line in writer.terminal_screen(self.report, self.kinds, screen):
                terminalreporter.write_line(redact(line))
        if self.written:
            terminalreporter.write_line("")
            terminalreporter.write_line("report: " + ", ".join(str(p) for p in self.written))
        for unwritten in self.unwritten:
            terminalreporter.write_line(f"report: not written: {unwritten}", red=True)
