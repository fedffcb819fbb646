"""Stopping a run: SIGTERM takes Ctrl-C's path in every process, and the results journal keeps
finished items even through SIGKILL. The end-to-end tests run pytest in a real subprocess,
signal it once some items finished and others are still running commands, and then look at
what it left: exit status, reports, JUnit, the journal, and which processes still exist."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from helpers import TASKS, write_dataset

from pytest_llmtool.run.journal import (
    JOURNAL_VERSION,
    Journal,
    JournalEntry,
    JournalWriter,
    read_journal,
)
from pytest_llmtool.run.roles import SETUP_ENTRY
from pytest_llmtool.run.signals import TermAsInterrupt

linux_only = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")

FAST = ("a_fast", "b_fast")
SLOW = ("c_slow", "d_slow")
WAIT_SECONDS = 120.0  # a bound on waits for something that normally takes a second or two


def results_of(journal: Journal) -> list[JournalEntry]:
    """The journal's results: what the model was given (setup entries) is journalled too."""
    return [e for e in journal.entries if e.type != SETUP_ENTRY]


def wait_for(what: str, condition: Callable[[], Any], log: Path | None = None) -> Any:
    """Poll `condition` until it is truthy; fail (with the run's output) only if it never is."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    output = log.read_text() if log is not None and log.exists() else ""
    pytest.fail(f"gave up waiting for {what}\n{output}")


def processes() -> dict[int, list[str]]:
    """Every live process's argv (zombies have none)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0]:
                found[int(entry.name)] = [a.decode(errors="replace") for a in argv if a]
    return found


def sleepers(token: str) -> list[int]:
    """The slow items' `sleep` commands, wherever they run (bwrap shows its argv too)."""
    return [
        pid for pid, argv in processes().items() if argv[0].endswith("sleep") and token in argv[1]
    ]


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


@dataclass
class Project:
    root: Path
    token: str

    def start(self, *args: str, new_session: bool = False) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        with (self.root / "log.txt").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )

    @property
    def log(self) -> Path:
        return self.root / "log.txt"

    @property
    def journal(self) -> Path:
        return self.root / "out" / "results.jsonl"

    def finished(self) -> list[str]:
        """Node ids the journal holds so far."""
        if not self.journal.exists():
            return []
        return [entry.nodeid for entry in results_of(read_journal(self.journal))]

    def wait_until_busy(self, proc: subprocess.Popen[bytes]) -> None:
        """Until the fast items are journalled and both slow commands run (one of them
        started ahead by the concurrency window)."""
        wait_for("the fast items", lambda: len(self.finished()) == len(FAST), self.log)
        wait_for("the slow commands", lambda: len(sleepers(self.token)) == len(SLOW), self.log)
        assert proc.poll() is None, self.log.read_text()

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "out" / "report.json").read_text())
        return data


@pytest.fixture
def project(pytester: pytest.Pytester) -> Iterator[Project]:
    """Four scenarios: two finish at once, two run `sleep` until killed. The sleep's argument
    carries a token unique to the test, to find those processes afterwards."""
    root = pytester.path
    token = str(uuid.uuid4().int)[:12]
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/bash\necho ok\n")
    (root / "bin" / "tool").chmod(0o755)
    for name in FAST + SLOW:
        command = f"sleep 600.{token}; echo done" if name in SLOW else "tool"
        data = {
            "name": name,
            "description": name,
            "target": {"binary": "bin/tool"},
            "task": {"prompt": "run tool"},
            "run": {"timeout_secs": 900},
            "evaluation": {"gates": [{"type": "command_succeeds", "command": "true"}]},
            "solution": [command],
        }
        (root / f"{name}.yaml").write_text(yaml.safe_dump(data))
    yield Project(root, token)
    # A failed test must not leave its sleepers behind.
    for pid in sleepers(token):
        os.kill(pid, signal.SIGKILL)


def sandbox_modes() -> list[Any]:
    no_bwrap = shutil.which("bwrap") is None
    return ["none", pytest.param("bwrap", marks=pytest.mark.skipif(no_bwrap, reason="no bwrap"))]


def assert_interrupted_with_fast_results(project: Project, proc: subprocess.Popen[bytes]) -> None:
    assert proc.wait(timeout=WAIT_SECONDS) == pytest.ExitCode.INTERRUPTED, project.log.read_text()
    report = project.report()
    assert report["metadata"]["exit_status"] == pytest.ExitCode.INTERRUPTED
    assert (
        report["partial"] == f"PARTIAL: {len(FAST)} of {len(FAST + SLOW)} items ran (interrupted)"
    )
    assert sorted(s["scenario"] for s in report["scenarios"]) == list(FAST)
    assert all(s["evaluation"]["outcome"] == "pass" for s in report["scenarios"])
    cases = ET.parse(project.root / "junit.xml").getroot().iter("testcase")
    assert sorted(case.get("name") for case in cases) == [f"{n}[oracle]" for n in FAST]
    journal = read_journal(project.journal)
    assert sorted(e.nodeid for e in results_of(journal)) == [f"{n}.yaml::{n}[oracle]" for n in FAST]
    # The slow items' commands, running or started ahead, were killed with the run.
    wait_for("the slow commands to be gone", lambda: not sleepers(project.token))


@linux_only
@pytest.mark.parametrize("sandbox", sandbox_modes())
def test_sigterm_ends_a_plain_run_like_ctrl_c(project: Project, sandbox: str) -> None:
    proc = project.start(
        "--llm-report=out", "--junitxml=junit.xml", f"--llm-sandbox={sandbox}", "-W", "ignore"
    )
    project.wait_until_busy(proc)
    proc.send_signal(signal.SIGTERM)
    assert_interrupted_with_fast_results(project, proc)
    assert "KeyboardInterrupt" in project.log.read_text()


@linux_only
@pytest.mark.parametrize("target", ["controller", "process group"])
def test_sigterm_ends_an_xdist_run_and_its_workers(project: Project, target: str) -> None:
    """To the controller alone (it passes the signal on), or to the whole process group as
    `timeout` does, so every process gets it twice; then once more to the controller."""
    proc = project.start(
        "-n",
        "2",
        "--llm-report=out",
        "--junitxml=junit.xml",
        "--llm-sandbox=none",
        "-W",
        "ignore",
        new_session=True,
    )
    project.wait_until_busy(proc)
    workers = children(proc.pid)
    assert len(workers) == 2
    if target == "controller":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    assert_interrupted_with_fast_results(project, proc)
    assert not workers & set(processes()), "a worker outlived the controller"


@linux_only
def test_sigterm_before_any_item_finished_still_writes_the_reports(project: Project) -> None:
    proc = project.start("--llm-report=out", "--llm-sandbox=none", "-W", "ignore", "-k", "slow")
    wait_for("the slow commands", lambda: len(sleepers(project.token)) == len(SLOW), project.log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT_SECONDS) == pytest.ExitCode.INTERRUPTED, project.log.read_text()
    report = project.report()
    assert report["partial"] == f"PARTIAL: 0 of {len(SLOW)} items ran (interrupted)"
    assert report["scenarios"] == []
    markdown = (project.root / "out" / "report.md").read_text()
    assert f"**PARTIAL: 0 of {len(SLOW)} items ran (interrupted)**" in markdown
    assert "PARTIAL: 0 of" in project.log.read_text()
    wait_for("the slow commands to be gone", lambda: not sleepers(project.token))


@linux_only
def test_sigkill_keeps_every_finished_item_in_the_journal(project: Project) -> None:
    proc = project.start("--llm-report=out", "--llm-sandbox=none")
    project.wait_until_busy(proc)
    proc.kill()
    assert proc.wait(timeout=WAIT_SECONDS) == -signal.SIGKILL
    journal = read_journal(project.journal)
    assert journal.header["models"] == ["oracle"]
    assert journal.header["args"] == [
        "-p",
        "no:cacheprovider",
        "--llm-report=out",
        "--llm-sandbox=none",
    ]
    assert [(e.type, e.data["scenario"]) for e in results_of(journal)] == [
        ("scenario", name) for name in FAST
    ]
    assert not (project.root / "out" / "report.json").exists()


# In-process: where the journal goes and what it holds.


def journal_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_journal_holds_a_header_and_one_line_per_finished_item(pytester: pytest.Pytester) -> None:
    bad = '{"id": "broken", "prompt": 3}'
    write_dataset(pytester, [*TASKS, bad])
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=3, failed=4, skipped=1, errors=1)
    header, *lines = journal_lines(pytester.path / "out" / "results.jsonl")
    entries = [e for e in lines if e["type"] != SETUP_ENTRY]
    assert header["type"] == "header"
    assert header["version"] == JOURNAL_VERSION
    assert header["models"] == ["oracle", "nop"]
    # pytester adds its own --basetemp.
    assert header["args"][:2] == ["--llm-model=oracle,nop", "--llm-report=out"]
    assert header["invocation_dir"] == str(pytester.path)
    # The skipped item (delta has no solution for the oracle) finished nothing.
    by_node = {e["nodeid"]: e for e in entries}
    assert len(by_node) == len(entries) == 8
    assert by_node["data.jsonl::line5"]["type"] == "error"
    assert "data.jsonl::delta[oracle]" not in by_node
    task = by_node["data.jsonl::alpha[oracle]"]
    assert task["type"] == "bash"
    # The same record report.json holds.
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    [alpha] = [r for r in report["results"] if r["nodeid"] == "data.jsonl::alpha[oracle]"]
    assert task["data"] == alpha


def test_journal_goes_to_the_cache_without_a_report_dir_and_a_new_run_replaces_it(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, TASKS)
    pytester.runpytest().assert_outcomes(passed=2, failed=1, skipped=1)
    path = pytester.path / ".pytest_cache" / "d" / "llmtool" / "results.jsonl"
    assert len(results_of(read_journal(path))) == 3
    pytester.runpytest("-k", "alpha").assert_outcomes(passed=1, deselected=3)
    journal = read_journal(path)
    assert journal.header["args"][:2] == ["-k", "alpha"]
    assert [e.nodeid for e in results_of(journal)] == ["data.jsonl::alpha[oracle]"]


def test_no_journal_without_a_report_dir_or_the_cache(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2, failed=1, skipped=1)
    assert not list(pytester.path.rglob("results.jsonl"))


def test_journal_under_xdist_is_written_by_the_controller(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS)
    result = pytester.runpytest("-n", "2", "--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=3, failed=4, skipped=1)
    journal = read_journal(pytester.path / "out" / "results.jsonl")
    assert len(results_of(journal)) == 7
    assert {e.type for e in results_of(journal)} == {"bash"}


# The reader.


def write_journal(path: Path, entries: int) -> None:
    writer = JournalWriter(path, {"models": ["m"]})
    for n in range(entries):
        writer.append("task", f"f.jsonl::t{n}[m]", {"n": n})
    writer.close()


def test_read_journal_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "results.jsonl"
    write_journal(path, 2)
    journal = read_journal(path)
    assert journal.header == {"type": "header", "version": JOURNAL_VERSION, "models": ["m"]}
    assert [(e.type, e.nodeid, e.data) for e in journal.entries] == [
        ("task", "f.jsonl::t0[m]", {"n": 0}),
        ("task", "f.jsonl::t1[m]", {"n": 1}),
    ]


def test_read_journal_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_journal(path, 3)
    text = path.read_text()
    path.write_text(text[: text.rindex('"n": 2')])
    assert [e.data for e in read_journal(path).entries] == [{"n": 0}, {"n": 1}]


def test_read_journal_rejects_damage_before_the_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_journal(path, 3)
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"results\.jsonl:2: not a JSON line"):
        read_journal(path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no journal header"),
        ('{"type": "task", "nodeid": "x", "data": {}}\n', "no journal header"),
        ('{"type": "header", "version": 99}\n', "journal version 99 is not supported"),
        ('{"type": "header", "version": 1}\n{"type": "bash", "data": {}}\n', "not a journal"),
    ],
)
def test_read_journal_rejects_what_is_not_a_journal(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem):
        read_journal(path)


# The handler itself.


def test_sigterm_raises_keyboard_interrupt_once_and_the_old_handler_comes_back() -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        handler = TermAsInterrupt()
        handler.install()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # a second one: the shutdown goes on
        handler.uninstall()
        signal.raise_signal(signal.SIGTERM)
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_ignored_once_the_session_finishes() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    handler = TermAsInterrupt()
    handler.install()
    try:
        handler.pytest_sessionfinish()
        signal.raise_signal(signal.SIGTERM)
    finally:
        handler.uninstall()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_the_controller_passes_sigterm_on_to_its_local_workers() -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    remote = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def node(gateway_id: str, pid: int, popen: bool) -> Any:
        spec = SimpleNamespace(popen=popen, via=None)
        info = SimpleNamespace(pid=pid)
        return SimpleNamespace(
            gateway=SimpleNamespace(id=gateway_id, spec=spec, _rinfo=lambda: info)
        )

    handler = TermAsInterrupt()
    handler.pytest_testnodeready(node("gw0", worker.pid, popen=True))
    # A remote worker's pid is another machine's: never signalled.
    handler.pytest_testnodeready(node("gw1", remote.pid, popen=False))
    # A worker that went down is forgotten: its pid may be anyone's now.
    handler.pytest_testnodeready(node("gw2", remote.pid, popen=True))
    handler.pytest_testnodedown(node("gw2", remote.pid, popen=True), None)
    assert handler.workers == {"gw0": worker.pid}
    handler.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
    finally:
        handler.uninstall()
        remote.kill()
        remote.wait()
    assert worker.wait(timeout=WAIT_SECONDS) == -signal.SIGTERM


def test_an_item_interrupted_between_its_call_and_its_teardown_counts_as_ran(
    pytester: pytest.Pytester,
) -> None:
    """A worker killed after it sent an item's result but before its teardown report (the
    race CI hit under `-n 2`): the item's result is in the report, so it ran."""
    write_dataset(pytester, TASKS)
    pytester.makeconftest(
        """
        def pytest_runtest_teardown(item):
            if item.name == "alpha[oracle]":
                raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest_subprocess("--llm-report=out", "-k", "alpha or beta")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert [r["nodeid"] for r in report["results"]] == ["data.jsonl::alpha[oracle]"]
    assert report["partial"] == "PARTIAL: 1 of 2 items ran (interrupted)"
