"""xdist workers that share no directory with the controller (`--tx popen//chdir=…`,
`--tx socket=…`): the budget, recordings and artifacts work as in a local `-n` run, and a
worker that differs from the controller (versions, its environment) stops the run, saying why.

Each "host" is a copy of the controller's project in a directory of its own, as every host
has the same checkout; `--basetemp=bt` is relative so that a socket worker (which gets the
controller's arguments, not a basetemp of its own) keeps its items in its own checkout.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import PROMPT, read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.run.hosts import Ledger, inside, pack, version_mismatch, write_inside

# Every call is 500 in / 20 out on haiku: 500 * 1 + 20 * 5 = 600 per million.
CALL_COST = 0.0006
LONG_TURNS = [
    Turn(tool_calls=["echo one"], input_tokens=500, output_tokens=20),
    Turn(tool_calls=["echo two"], input_tokens=500, output_tokens=20),
    Turn(text="done", input_tokens=500, output_tokens=20),
]
# About 8.3 calls: the ninth crosses it. Each worker alone would spend it on its own tasks.
LIMIT = 0.005

Spread = Callable[[], tuple[list[Path], list[str]]]


def _socket_server(cwd: Path) -> tuple[subprocess.Popen[str], int]:
    """execnet's socket server, as its docs run it, on a free port of 127.0.0.1 that it
    picks itself and prints."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "execnet.script.socketserver", "127.0.0.1:0"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    first = server.stdout.readline()
    found = re.search(r"Entering Accept loop \('127\.0\.0\.1', (\d+)\)", first)
    assert found, f"the socket server did not start: {first!r}"
    # The worker runs in the server's process and prints there: keep the pipe from filling.
    threading.Thread(target=server.stdout.read, daemon=True).start()
    return server, int(found[1])


@pytest.fixture(params=["popen-chdir", "socket"])
def spread(
    request: pytest.FixtureRequest,
    pytester: pytest.Pytester,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Spread]:
    """Copies the controller's project to two "hosts" and gives the `--tx` options that run
    a worker in each: a popen worker in its own directory, or a socket worker (each host its
    own socket server, started after the test has set the environment it inherits)."""
    servers: list[subprocess.Popen[str]] = []

    def copy() -> tuple[list[Path], list[str]]:
        pytester.makeini("[pytest]\n")  # every checkout is its own rootdir
        hosts, options = [], []
        for name in ("host-a", "host-b"):
            host = tmp_path_factory.mktemp(name)
            shutil.copytree(pytester.path, host, dirs_exist_ok=True)
            hosts.append(host)
            if request.param == "socket":
                server, port = _socket_server(host)
                servers.append(server)
                options += ["--tx", f"socket=127.0.0.1:{port}//chdir={host}"]
            else:
                options += ["--tx", f"popen//chdir={host}"]
        return hosts, options

    yield copy
    for server in servers:
        server.kill()
        server.wait()


def _counting_tasks(pytester: pytest.Pytester, server: FakeLLMServer, count: int) -> None:
    tasks = [
        {
            "id": f"t{i}",
            "category": "misc",
            "prompt": f"Count, {i}.",
            "expectations": [{"check": "exit_code:0"}],
        }
        for i in range(count)
    ]
    write_dataset(pytester, tasks)
    for i in range(count):
        server.script(f"Count, {i}.", LONG_TURNS)


def test_a_cost_limit_holds_across_hosts(
    pytester: pytest.Pytester, server: FakeLLMServer, spread: Spread
) -> None:
    _counting_tasks(pytester, server, 12)
    _, tx = spread()
    result = pytester.runpytest(
        "-d",
        *tx,
        "--basetemp=bt",
        "--llm-model=haiku",
        "--llm-max-tokens=20",
        f"--llm-max-cost={LIMIT}",
        "--llm-concurrency=1",
        "--llm-report=out",
        "-rs",
    )
    outcomes = result.parseoutcomes()
    stopped = outcomes.get("skipped", 0)
    assert outcomes.get("passed", 0) + stopped == 12 and stopped >= 1, outcomes
    assert "errors" not in outcomes
    report = read_report(pytester)
    # Tasks stopped by the limit are skipped for it, and listed with their traces.
    skips = re.findall(r"SKIPPED \[(\d+)\] .*: stopped by the cost limit", result.stdout.str())
    assert sum(map(int, skips)) == stopped == len(report["stopped"])
    served = len(server.requests)
    budget = report["budget"]
    assert budget["spent_usd"] == pytest.approx(served * CALL_COST)  # both workers' calls
    assert budget["reached"] is True
    # A call starts only when its worst case (some $0.003 for a task's first, with 20 output
    # tokens) fits; each worker, one call at a time, may take one worst case reserved before
    # it heard of the other's. Workers each spending the limit by themselves would make 16.
    assert served >= 1 and budget["spent_usd"] <= LIMIT + 2 * 0.0035


FAILING = {
    "name": "add_bread",
    "task": {"prompt": "Add the note 'bread'."},
    "evaluation": {"gates": [{"type": "file_contains", "path": "notes.txt", "substring": "x"}]},
}


PRICED = {"input_tokens": 500, "output_tokens": 20}


def _recorded_project(pytester: pytest.Pytester, project: Path, server: FakeLLMServer) -> None:
    """A bash task and two scenarios (one fails) answered by the fake server."""
    hello = {
        "id": "hello",
        "category": "text",
        "prompt": "Say hello.",
        "expectations": [{"check": "stdout_contains:hello"}],
    }
    write_dataset(pytester, [hello])
    server.script(
        "Say hello.", [Turn(tool_calls=["echo hello"], **PRICED), Turn(text="done", **PRICED)]
    )
    write_scenario(project, scenario())
    server.script(
        PROMPT,
        [
            Turn(tool_calls=["note add milk"], **PRICED),
            Turn(tool_calls=["note add eggs"], **PRICED),
            Turn(text="Done.", **PRICED),
        ],
    )
    write_scenario(project, scenario(**FAILING), name="failing")
    server.script(
        "Add the note 'bread'.",
        [Turn(tool_calls=["note add bread"], **PRICED), Turn(text="Ok.", **PRICED)],
    )


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_recordings_and_artifacts_come_back_to_the_controller(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer, spread: Spread
) -> None:
    _recorded_project(pytester, project, server)
    hosts, tx = spread()
    args = ["--llm-model=haiku", "--llm-report=out"]
    result = pytester.runpytest(
        "-d", *tx, "--basetemp=bt", "--llm-record=rec", "--llm-max-cost=1", *args
    )
    result.assert_outcomes(passed=2, failed=1)

    # Every recording a worker made, at the same path under the controller's --llm-record.
    # Three items on two workers: xdist gives each of them one at least.
    made_there = [_files(host / "rec") for host in hosts]
    assert all(made_there)
    recorded = _files(pytester.path / "rec")
    assert recorded == made_there[0] | made_there[1]
    assert len(recorded) == len(server.requests)

    report = read_report(pytester)
    # The budget holds what both workers spent.
    runs = report["results"] + report["scenarios"]
    assert report["budget"]["spent_usd"] == pytest.approx(
        sum(run["trace"]["cost_usd"] for run in runs)
    )
    assert report["budget"]["spent_usd"] > 0
    basetemp = pytester.path / "bt"
    for run in report["scenarios"]:
        copy = Path(run["artifacts"])
        assert copy.parent == basetemp  # not a worker's own directory
        evaluation = json.loads((copy / "evaluation.json").read_text())
        assert evaluation["outcome"] == run["evaluation"]["outcome"]
        events = [json.loads(line) for line in (copy / "events.jsonl").read_text().splitlines()]
        calls = [e["command"] for e in events if e["event"] == "tool_call"]
        assert calls == [c["commands"] for c in run["trace"]["tool_calls"]]
        assert "note add" in (copy / "transcript.txt").read_text()
        if run["evaluation"]["outcome"] == "fail":  # its failure names the copy too
            result.stdout.fnmatch_lines([f"artifacts: {copy}"])
    assert report["scenarios"][0]["artifacts"] in (pytester.path / "out" / "report.md").read_text()

    # The controller replays the run from what came back, with no server.
    asked = len(server.requests)
    replayed = pytester.runpytest(
        "data.jsonl", "scenario.yaml", "failing.yaml", "--llm-replay=rec", *args
    )
    replayed.assert_outcomes(passed=2, failed=1)
    assert len(server.requests) == asked


def test_a_local_worker_writes_where_it_runs(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    """A plain popen worker shares the controller's files: nothing is sent back."""
    _recorded_project(pytester, project, server)
    result = pytester.runpytest(
        "-n", "2", "--llm-record=rec", "--llm-model=haiku", "--llm-report=out"
    )
    result.assert_outcomes(passed=2, failed=1)
    for run in read_report(pytester)["scenarios"]:
        assert re.search(r"/popen-gw\d/[^/]+/artifacts$", run["artifacts"])
    assert len(_files(pytester.path / "rec")) == len(server.requests)


# What makes host-b differ, set up by a conftest only host-b has (loaded before the plugin
# configures), the options, and the reason the controller gives.
FAKE_BASHKIT = """\
import pathlib, sys
# As if another bashkit were installed there: its metadata first on the path.
site = pathlib.Path(__file__).parent / "site"
(site / "bashkit-99.0.dist-info").mkdir(parents=True, exist_ok=True)
(site / "bashkit-99.0.dist-info" / "METADATA").write_text("Name: bashkit\\nVersion: 99.0\\n")
sys.path.insert(0, str(site))
"""
NO_KEY = "import os\nos.environ.pop('ANTHROPIC_API_KEY')\n"
DIFFERENCES = {
    "bashkit": (
        FAKE_BASHKIT,
        [],
        f"bashkit 99.0 on the worker, {importlib.metadata.version('bashkit')} on the controller; "
        "install the same pytest-llmtool and bashkit on every host",
    ),
    "no-key": (
        NO_KEY,
        ["--llm-model=haiku"],
        "--llm-model=haiku needs ANTHROPIC_API_KEY in the environment "
        "(or --llm-replay=DIR to answer from recordings)",
    ),
}


@pytest.mark.parametrize("difference", list(DIFFERENCES))
def test_a_worker_that_differs_is_refused_and_stops_the_run(
    pytester: pytest.Pytester,
    dataset: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    difference: str,
) -> None:
    conftest, options, reason = DIFFERENCES[difference]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    pytester.makeini("[pytest]\n")
    hosts = [tmp_path_factory.mktemp(name) for name in ("host-a", "host-b")]
    for host in hosts:
        shutil.copytree(pytester.path, host, dirs_exist_ok=True)
    (hosts[1] / "conftest.py").write_text(conftest)
    tx = [option for host in hosts for option in ("--tx", f"popen//chdir={host}")]
    result = pytester.runpytest_subprocess("-d", *tx, *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: pytest-llmtool: xdist worker gw1 (popen//chdir={hosts[1]}, host *) refused "
            f"to run: {reason}"
        ]
    )
    # Stopped before any item ran, and no replacement worker was started.
    result.stdout.fnmatch_lines(["*no tests ran*"])
    assert "crashed worker" not in result.stdout.str()


# The pure parts.


def test_the_ledger_tells_each_worker_what_the_others_spent() -> None:
    ledger = Ledger()
    ledger.record("gw0", 0.5)
    ledger.record("gw1", 0.25)
    ledger.record("gw0", 0.25)  # overtaken by a later total: changes nothing
    assert ledger.total() == 0.75
    assert (ledger.others("gw0"), ledger.others("gw1"), ledger.others("gw9")) == (0.25, 0.5, 0.75)
    # Reservations come and go: the last said holds.
    ledger.record("gw1", 0.25, 0.5)
    assert ledger.reserved_by_others("gw0") == 0.5
    ledger.record("gw1", 0.25, 0.0)
    assert ledger.reserved_by_others("gw0") == 0.0


def test_a_budget_adds_what_it_hears_and_tells_its_own() -> None:
    told: list[tuple[float, float]] = []
    budget = Budget(1.0)
    budget.publish = lambda own, reserved: told.append((own, reserved))
    budget.add(0.25)
    budget.add(0.5)
    budget.hear(0.5)
    budget.hear(0.25)  # late: the rest of the run never spends less
    assert told == [(0.25, 0.0), (0.75, 0.0)]
    assert budget.own == 0.75 and budget.spent() == 1.25
    assert budget.exhausted_reason() == "stopped by the cost limit: $1.2500 spent of $1.0000"


@pytest.mark.parametrize(
    "hostile", ["../x", "a/../../x", "/etc/passwd", "", ".", "a/..", "link/x", "link"]
)
def test_a_path_from_a_worker_cannot_leave_its_destination(tmp_path: Path, hostile: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError):
        write_inside(root, hostile, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_a_path_inside_is_written_whole(tmp_path: Path) -> None:
    assert inside(tmp_path, "a/./b.json") == tmp_path / "a" / "b.json"
    written = write_inside(tmp_path, "a/b.json", b"{}")
    assert written.read_bytes() == b"{}" and sorted(p.name for p in written.parent.iterdir()) == [
        "b.json"
    ]


def test_pack_sends_regular_files_up_to_its_limit(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_bytes(b"12345")
    (tmp_path / "sub" / "b.txt").write_bytes(b"123456")
    (tmp_path / "c.txt").write_bytes(b"1")
    (tmp_path / "outside").symlink_to("/etc/passwd")
    (tmp_path / "dir-link").symlink_to(tmp_path / "sub")
    files, left = pack(tmp_path, limit=7)
    assert files == {"a.txt": b"12345", "c.txt": b"1"}
    assert left == ["sub/b.txt: over the 7 bytes an item sends back"]


def test_a_version_mismatch_names_what_differs() -> None:
    ours = {"pytest-llmtool": "0.1.0", "bashkit": "0.20.1"}
    assert version_mismatch(ours, dict(ours)) is None
    theirs = {"pytest-llmtool": "0.2.0", "bashkit": None}
    assert version_mismatch(ours, theirs) == (
        "bashkit 0.20.1 on the worker, (not installed) on the controller; "
        "pytest-llmtool 0.1.0 on the worker, 0.2.0 on the controller"
    )
