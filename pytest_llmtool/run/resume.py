"""`--llm-resume`: finish a stopped run instead of paying for it again.

The results journal (`run/journal.py`) of a run stopped halfway (Ctrl-C, a killed CI job,
`--llm-max-cost`) holds every item that finished. Resuming deselects those items, runs the
rest, and hands the journal's results to the `Controller` before the run, so the report, the
new journal and the budget cover the whole run as if it had never stopped. An item that
errored (an outage, a crashed sandbox) or never ran is not finished: it runs again. Nor is one
the cost limit stopped, but what it spent is journalled and counts toward the resumed run's
`--llm-max-cost`, so that stopping and resuming never buys more than the limit.
So does one whose fingerprint (`run/digests.py`: its task as loaded, its model as resolved)
is not the one journaled with its result, or that has none (a journal written before results
were fingerprinted): its old verdict is not this task's, or not known to be.

Collection must be the same in every xdist worker, so each worker deselects the same node ids,
which the controller reads once and passes on (`workerinput`). The controller does not collect
under xdist: the first worker to finish collecting writes which journal items it still
collected to a directory they share, so the controller can drop the ones that are gone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shlex
import shutil
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import ValidationError

from pytest_llmtool.kinds import Kind
from pytest_llmtool.records import ItemResult, ModelSetup, RunMetadata, StoppedTask
from pytest_llmtool.run.items import LlmItem
from pytest_llmtool.run.journal import JOURNAL_NAME, JournalEntry, journal_path, read_journal
from pytest_llmtool.run.journal import run_identity as current_identity
from pytest_llmtool.run.roles import (
    KINDS_KEY,
    SETUP_ENTRY,
    STOPPED_ENTRY,
    Controller,
    item_fingerprint,
    record_fingerprint,
    redactor,
)
from pytest_llmtool.run.state import STATE_KEY
from pytest_llmtool.settings import Settings

# What the journal holds: an item's result, or a task the cost limit stopped.
Checked = TypeVar("Checked", ItemResult, StoppedTask)

IDS_KEY = "llmtool_resume_ids"
SHARE_KEY = "llmtool_resume_dir"

# How `run_identity`'s fields read in a refusal.
IDENTITY_NAMES = {
    "plugin": "pytest-llmtool version",
    "models": "--llm-model",
    "model_ids": "models (as resolved)",
    "trials": "--llm-trials",
    "max_turns": "--llm-max-turns",
    "bash": "--llm-bash",
}


@dataclass(frozen=True)
class Finished:
    """What a stopped run finished: each result by node id, with its journal entry."""

    source: Path
    started: dt.datetime
    results: dict[str, tuple[JournalEntry, ItemResult]]
    # Entries of a kind no plugin provides now: their items cannot be collected.
    orphans: tuple[str, ...] = ()
    # What the models were given, by key (`ModelSetup`), for the results to name.
    setups: tuple[tuple[JournalEntry, ModelSetup], ...] = ()
    # Items the cost limit stopped (not finished: they run again), for what they spent.
    stopped: tuple[tuple[JournalEntry, StoppedTask], ...] = ()


def source(config: pytest.Config, settings: Settings) -> Path:
    """The journal to resume: `--llm-resume=DIR`'s (or the file named), else the one this run
    would write."""
    if isinstance(settings.resume, Path):
        given = settings.resume
        return given if given.is_file() else given / JOURNAL_NAME
    try:
        path = journal_path(config, settings.report_dir)
    except OSError as exc:
        raise pytest.UsageError(
            f"--llm-resume: pytest's cache, where the journal would be, cannot be made: {exc}"
        ) from None
    if path is None:
        raise pytest.UsageError(
            "--llm-resume: no journal to resume: without --llm-report the journal is in "
            "pytest's cache, which is off (-p no:cacheprovider); use --llm-resume=DIR"
        )
    return path


def mismatch(header: dict[str, Any], identity: dict[str, Any]) -> str | None:
    """Why a journal's run is not this run (models, trials, plugin version...), or None."""
    for key, now in identity.items():
        then = header.get(key)
        if then != now:
            return f"{IDENTITY_NAMES.get(key, key)} was {then!r}, is {now!r}"
    return None


def read_finished(path: Path, identity: dict[str, Any], kinds: list[Kind[Any, Any]]) -> Finished:
    """The finished results of the journal at `path`; a usage error when there is none, it
    is damaged, or it is another run's."""
    if not path.is_file():
        raise pytest.UsageError(
            f"--llm-resume: no journal at {path} (a bare --llm-resume takes the next argument "
            "as DIR: write --llm-resume=DIR)"
        )
    try:
        journal = read_journal(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise pytest.UsageError(f"--llm-resume: {exc}") from None
    different = mismatch(journal.header, identity)
    if different is not None:
        raise pytest.UsageError(
            f"--llm-resume: {path} is another run's journal ({different}); resume with the "
            "settings it was started with, or start a new run without --llm-resume"
        )
    try:
        started = dt.datetime.fromisoformat(str(journal.header.get("started")))
    except ValueError:
        raise pytest.UsageError(f"--llm-resume: {path}: the header has no start time") from None
    by_name = {kind.name: kind for kind in kinds}
    results: dict[str, tuple[JournalEntry, ItemResult]] = {}
    orphans: list[str] = []
    setups: list[tuple[JournalEntry, ModelSetup]] = []
    stopped: list[tuple[JournalEntry, StoppedTask]] = []
    for entry in journal.entries:
        kind = by_name.get(entry.type)
        if entry.type == "error":
            continue
        if entry.type == STOPPED_ENTRY:
            said = f"stopped item {entry.nodeid}"
            stopped.append((entry, _checked(path, entry, StoppedTask, said, "a stopped task")))
            continue
        if entry.type == SETUP_ENTRY:
            try:
                setups.append((entry, ModelSetup.model_validate(entry.data)))
            except ValidationError as exc:
                raise pytest.UsageError(
                    f"--llm-resume: {path}: setup {entry.nodeid} is not a model setup: "
                    f"{exc.errors()[0]['msg']}"
                ) from None
            continue
        if kind is None:
            orphans.append(entry.nodeid)
            continue
        said = f"the result of {entry.nodeid}"
        result = _checked(path, entry, kind.result_type, said, f"a {kind.name} result")
        results[entry.nodeid] = (entry, result)
    return Finished(path, started, results, tuple(orphans), tuple(setups), tuple(stopped))


def _checked(
    path: Path, entry: JournalEntry, model: type[Checked], said: str, what: str
) -> Checked:
    """A journalled result or stopped task as `model`; a usage error when it is not one, or
    a call of its has a cost that is not a price (it would switch the budget off)."""
    try:
        found = model.model_validate(entry.data)
    except ValidationError as exc:
        raise pytest.UsageError(
            f"--llm-resume: {path}: {said} is not {what}: {exc.errors()[0]['msg']}"
        ) from None
    if (cost := _bad_cost(found)) is not None:
        raise pytest.UsageError(
            f"--llm-resume: {path}: {said} has a model call costing {cost!r}; costs are "
            "finite numbers >= 0"
        )
    return found


def _calls(result: ItemResult | StoppedTask) -> list[Any]:
    trace = getattr(result, "trace", None)
    return [*getattr(trace, "llm_calls", []), *result.judge_calls]


def _bad_cost(result: ItemResult | StoppedTask) -> float | None:
    """A journalled call's cost that is NaN, infinite or negative (it would switch the
    budget off), if any."""
    for call in _calls(result):
        cost = call.cost_usd
        if cost is not None and not (math.isfinite(cost) and cost >= 0):
            return float(cost)
    return None


def spent(result: ItemResult | StoppedTask) -> float:
    """What an item's model calls cost, the agent's (when it has a trace) and the judge's."""
    return sum(call.cost_usd or 0.0 for call in _calls(result))


def whole_run_status(status: int, resumed: int, resumed_failed: int) -> int:
    """The exit status of the whole run: a resumed failure fails it, and a run whose items
    had all finished before is not one where no tests ran."""
    if resumed_failed and status in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return pytest.ExitCode.TESTS_FAILED
    if resumed and status == pytest.ExitCode.NO_TESTS_COLLECTED:
        return pytest.ExitCode.OK
    return status


def changed(items: Iterable[pytest.Item], finished: Mapping[str, str | None]) -> list[str]:
    """The node ids of the finished items (node id -> journaled fingerprint) collected now
    whose fingerprint is not the journaled one, or is not known: they run again."""
    rerun = []
    for item in items:
        if item.nodeid in finished:
            now = item_fingerprint(item) if isinstance(item, LlmItem) else None
            if now is None or now != finished[item.nodeid]:
                rerun.append(item.nodeid)
    return rerun


def deselect(
    config: pytest.Config, items: list[pytest.Item], finished: Collection[str]
) -> list[str]:
    """Take the finished items out of the run; returns their node ids."""
    done = [item for item in items if item.nodeid in finished]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [item for item in items if item.nodeid not in finished]
    return [item.nodeid for item in done]


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


class ResumeWorker:
    """On an xdist worker: deselect what the controller says finished (less what changed
    since), and say which of those this worker collected."""

    def __init__(self, finished: dict[str, str | None], share: Path, worker: str) -> None:
        self.finished = finished
        self.share = share
        self.worker = worker

    @pytest.hookimpl(trylast=True)  # after -k, -m and --lf have deselected theirs
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        record_fingerprint(config, items)  # of the whole run, resumed items included
        rerun = set(changed(items, self.finished))
        collected = deselect(config, items, self.finished.keys() - rerun)
        _write_atomic(self.share / f"{self.worker}.json", json.dumps(collected))


class Resume:
    """On the reporting process: deselect the finished items (or have the workers do it),
    hand their results to the controller, and say what was resumed."""

    def __init__(self, config: pytest.Config, finished: Finished, controller: Controller) -> None:
        self.config = config
        self.finished = finished
        self.controller = controller
        self.share: Path | None = None
        self.seeded = False
        self.resumed: list[ItemResult] = []
        self.dropped: list[str] = []
        # Finished items collected now that run again: what they were made of changed.
        self.rerun: list[str] = []
        self.to_run = 0

    def _seed(self, collected: Iterable[str], rerun: Sequence[str]) -> None:
        """Hand the results of the finished items this run still collected, unchanged, to
        the controller, and their cost to the budget; once."""
        if self.seeded or self.config.option.collectonly:
            return
        self.seeded = True
        self.rerun = list(rerun)
        again = set(rerun)
        still = set(collected) - again
        kept = [pair for nodeid, pair in self.finished.results.items() if nodeid in still]
        self.dropped = [
            *(n for n in self.finished.results if n not in still and n not in again),
            *self.finished.orphans,
        ]
        self.resumed = [result for _, result in kept]
        stopped = [entry for entry, _ in self.finished.stopped]
        self.controller.resume(kept, self.finished.started, self.finished.setups, stopped)
        # What the stopped items spent was paid for all the same, collected now or not.
        prior = sum(spent(result) for result in self.resumed) + self.stopped_spent()
        if prior:
            self.config.stash[STATE_KEY].budget.add(prior)

    @pytest.hookimpl(trylast=True)  # after -k, -m and --lf have deselected theirs
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        record_fingerprint(config, items)  # of the whole run, resumed items included
        rerun = changed(items, self.made_of())
        collected = deselect(config, items, self.finished.results.keys() - set(rerun))
        self.to_run = len(items)
        self._seed(collected, rerun)

    def stopped_spent(self) -> float:
        """What the items the cost limit stopped had spent, in the runs resumed."""
        return sum(spent(task) for _, task in self.finished.stopped)

    def made_of(self) -> dict[str, str | None]:
        """Each finished item's journaled fingerprint, by node id."""
        return {nodeid: entry.fingerprint for nodeid, (entry, _) in self.finished.results.items()}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.share is None:
            self.share = Path(tempfile.mkdtemp(prefix="llmtool-resume-"))
        node.workerinput[IDS_KEY] = self.made_of()
        node.workerinput[SHARE_KEY] = str(self.share)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """The controller's collection: what the first worker collected."""
        if self.seeded or self.share is None:
            return
        self.to_run = len(ids)
        # A finished item the worker left in the run is one that changed.
        rerun = [nodeid for nodeid in ids if nodeid in self.finished.results]
        written = self.share / f"{node.workerinput['workerid']}.json"
        try:
            collected: list[str] = json.loads(written.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # A remote worker's files are elsewhere: keep every finished item it did not run.
            collected = list(self.finished.results)
        self._seed(collected, rerun)

    @pytest.hookimpl(tryfirst=True)  # before the controller reports the status
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        failed = sum(not result.passed for result in self.resumed)
        status = whole_run_status(int(session.exitstatus), len(self.resumed), failed)
        session.exitstatus = pytest.ExitCode(status)

    def pytest_report_header(self) -> str:
        count = len(self.finished.results)
        return f"llmtool: resuming {self.finished.source}: {count} finished items"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seeded:
            return
        failed = sum(not result.passed for result in self.resumed)
        terminalreporter.write_line(
            f"llmtool: resumed {_items(len(self.resumed))} from {self.finished.source} "
            f"({len(self.resumed) - failed} passed, {failed} failed){self._reruns()}; "
            f"{self.to_run - len(self.rerun)} run now"
        )
        if self.finished.stopped:
            count = len({entry.nodeid for entry, _ in self.finished.stopped})
            said = f"llmtool: rerunning {_items(count)} the cost limit stopped"
            if self.config.stash[STATE_KEY].budget.limit is not None:
                said += (
                    f"; the ${self.stopped_spent():.4f} they spent before counts toward "
                    "--llm-max-cost"
                )
            terminalreporter.write_line(said)
        if self.dropped:
            shown = ", ".join(self.dropped[:5])
            more = f" and {len(self.dropped) - 5} more" if len(self.dropped) > 5 else ""
            terminalreporter.write_line(
                f"llmtool: left out {_items(len(self.dropped))} of the journal no longer "
                f"collected: {shown}{more}"
            )

    def _reruns(self) -> str:
        """`, 2 rerun because their task or model changed`, and those the journal did not
        fingerprint; or nothing."""
        made_of = self.made_of()
        unknown = sum(made_of.get(nodeid) is None for nodeid in self.rerun)
        said = ""
        if len(self.rerun) > unknown:
            count = len(self.rerun) - unknown
            whose = "its" if count == 1 else "their"
            said += f", {count} rerun because {whose} task or model changed"
        if unknown:
            said += (
                f", {unknown} rerun because the journal does not record what "
                f"{'it was' if unknown == 1 else 'they were'} made of (an older journal)"
            )
        return said

    def pytest_unconfigure(self) -> None:
        if self.share is not None:
            shutil.rmtree(self.share, ignore_errors=True)


RESUME_FLAG = "--llm-resume"


def resume_command(args: Sequence[str]) -> str:
    """The command that resumes a run of `args`, quoted for a POSIX shell: its arguments
    without any `--llm-resume` of their own, then a bare `--llm-resume` (last: a bare flag
    takes the next argument, when it is not an option, as its DIR). A bare flag resumes the
    journal the run wrote, beside `--llm-report`'s reports or in pytest's cache."""
    return shlex.join(["pytest", *_fresh(args), RESUME_FLAG])


def _fresh(args: Sequence[str]) -> list[str]:
    """`args` without any `--llm-resume` (and the DIR given apart after it)."""
    kept: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == RESUME_FLAG:
            if rest and not rest[0].startswith("-"):
                rest.pop(0)  # its DIR, given apart: the run took it so
            continue
        if not arg.startswith(RESUME_FLAG + "="):
            kept.append(arg)
    return kept


def resume_line(metadata: RunMetadata, args: Sequence[str], journalled: bool) -> str | None:
    """After a run that did not finish: how far it got, and the command that finishes it
    (or why there is nothing to resume); None after a complete run."""
    if metadata.complete is not False:
        return None
    said = f"{metadata.stopped}: {metadata.ran} of {metadata.collected} items ran"
    if not journalled:
        # Stopped before its first result (a Harbor trial's build, a slow first call), or with
        # nowhere to journal: finishing it is running it again.
        why = (
            "no item had finished"
            if not metadata.ran
            else "no item's result was journalled (a run journals into --llm-report's DIR, "
            "else pytest's cache)"
        )
        again = shlex.join(["pytest", *_fresh(args)])
        return f"{said}; nothing to resume: {why}; run it again: {again}"
    first = "; raise --llm-max-cost first" if "--llm-max-cost" in str(metadata.stopped) else ""
    return f"{said}; resume with: {resume_command(args)}{first}"


class ResumeAdvice:
    """On the reporting process: after a run that did not finish (Ctrl-C, the cost limit, a
    stop on failures), the summary ends with the command that finishes it."""

    def __init__(self, config: pytest.Config, controller: Controller) -> None:
        self.config = config
        self.controller = controller

    @pytest.hookimpl(trylast=True)  # the summary's last line
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        report = self.controller.report
        if report is None:
            return
        redact = redactor(self.config)
        # Each argument redacted before it is quoted: a `[redacted NAME]` put in after would
        # split the argument at its spaces.
        args = [redact(arg) for arg in self.config.invocation_params.args]
        line = resume_line(report.metadata, args, self.controller.journal is not None)
        if line is not None:
            terminalreporter.write_line(redact(line), yellow=True)


def install(config: pytest.Config, settings: Settings, controller: Controller | None) -> None:
    """Register the resume plugin of this process, when the run resumes; a usage error when
    its journal cannot be resumed. Called from `pytest_configure`."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        if IDS_KEY in workerinput:
            worker = ResumeWorker(
                dict(workerinput[IDS_KEY]),
                Path(workerinput[SHARE_KEY]),
                workerinput["workerid"],
            )
            config.pluginmanager.register(worker, "llmtool-resume")
        return
    if controller is None:
        return
    config.pluginmanager.register(ResumeAdvice(config, controller), "llmtool-resume-advice")
    if settings.resume is False:
        return
    path = source(config, settings)
    finished = read_finished(path, current_identity(settings), config.stash[KINDS_KEY])
    config.pluginmanager.register(Resume(config, finished, controller), "llmtool-resume")
