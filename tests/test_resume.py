"""`--llm-resume`: a stopped run finishes where it stopped, and its report reads as if it had
never stopped. The end-to-end tests stop a real pytest subprocess (Ctrl-C, SIGKILL) while two
scenario items wait on a file, resume it, and compare its `report.json` with an uninterrupted
run's; the in-process ones cover what is finished, refusals and the budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import TASKS, WAIT_SECONDS, read_report, wait_for, write_dataset

from pytest_llmtool.records import LLMCallMetrics, TaskResult
from pytest_llmtool.run.journal import JournalEntry, JournalWriter, read_journal
from pytest_llmtool.run.resume import mismatch, spent, whole_run_status

linux_only = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")

SLOW = ("c_slow", "d_slow")
# What finishes while the slow items wait: the bash tasks the oracle can play (delta has no
# solution, so it is skipped and never journalled) and the fast scenarios.
QUICK = (
    "a_data.jsonl::alpha[oracle]",
    "a_data.jsonl::beta[oracle]",
    "a_data.jsonl::gamma[oracle]",
    "a_fast.yaml::a_fast[oracle]",
    "b_fast.yaml::b_fast[oracle]",
)
COMMON = ("-W", "ignore", "--llm-sandbox=none")
# Fields that differ between any two runs of the same items.
TIMING = (
    "duration_ms",
    "total_duration_ms",
    "avg_duration_ms",
    "latency_ms",
    "run_ms",
    "artifacts",
)


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same items: timing, where the
    artifacts went, the command line and the clock, and the order items arrived in."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING}
        if isinstance(value, list):
            items = [strip(v) for v in value]
            if items and all(isinstance(v, dict) and "nodeid" in v for v in items):
                items.sort(key=lambda v: v["nodeid"])
            return items
        return value

    stripped: dict[str, Any] = strip(report)
    for key in ("started", "finished", "command_line", "wall_s", "resumed"):
        del stripped["metadata"][key]
    return stripped


def results_of(path: Path) -> list[JournalEntry]:
    """A journal's result and error entries, without the setups they name."""
    return [e for e in read_journal(path).entries if e.type != "setup"]


@dataclass
class Project:
    """Four bash tasks and four scenarios; the two slow scenarios wait while `hold` exists."""

    root: Path

    def run(self, *args: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        with self.log.open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *COMMON, *args],
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a terminal's job is
            )

    def finish(self, *args: str) -> int:
        proc = self.run(*args)
        return proc.wait(timeout=WAIT_SECONDS)

    @property
    def log(self) -> Path:
        return self.root / "log.txt"

    def journalled(self, directory: str = "out") -> list[str]:
        path = self.root / directory / "results.jsonl"
        return [e.nodeid for e in results_of(path)] if path.exists() else []

    def started(self, name: str) -> bool:
        return (self.root / f"started.{name}").exists()

    def wait_until_busy(self, proc: subprocess.Popen[bytes]) -> None:
        """Until the quick items are journalled and both slow items are waiting."""
        wait_for("the quick items", lambda: sorted(self.journalled()) == list(QUICK), self.log)
        wait_for("the slow items", lambda: all(self.started(n) for n in SLOW), self.log)
        assert proc.poll() is None, self.log.read_text()

    def report(self, directory: str = "out") -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / directory / "report.json").read_text())
        return data


@pytest.fixture
def project(pytester: pytest.Pytester) -> Iterator[Project]:
    root = pytester.path
    write_dataset(pytester, TASKS, name="a_data")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/bash\necho ok\n")
    (root / "bin" / "tool").chmod(0o755)
    for name in ("a_fast", "b_fast", *SLOW):
        wait = f"touch {root}/started.{name}; while [ -e {root}/hold ]; do sleep 0.05; done; "
        data = {
            "name": name,
            "description": name,
            "target": {"binary": "bin/tool"},
            "task": {"prompt": "run tool"},
            "run": {"timeout_secs": 900},
            "evaluation": {"gates": [{"type": "command_succeeds", "command": "true"}]},
            "solution": [(wait if name in SLOW else "") + "tool"],
        }
        (root / f"{name}.yaml").write_text(yaml.safe_dump(data))
    yield Project(root)
    (root / "hold").unlink(missing_ok=True)  # lets any command left behind end


def stop(proc: subprocess.Popen[bytes], how: signal.Signals) -> None:
    """Ctrl-C reaches the whole foreground process group; SIGKILL spares nothing."""
    os.killpg(proc.pid, how)
    expected = pytest.ExitCode.INTERRUPTED if how == signal.SIGINT else -signal.SIGKILL
    assert proc.wait(timeout=WAIT_SECONDS) == expected


@linux_only
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_stopped_run_resumes_to_the_report_of_an_uninterrupted_one(
    project: Project, how: signal.Signals, xdist: list[str]
) -> None:
    assert project.finish(*xdist, "--llm-report=full") == pytest.ExitCode.TESTS_FAILED
    (project.root / "hold").touch()
    proc = project.run(*xdist, "--llm-report=out")
    project.wait_until_busy(proc)
    stop(proc, how)
    (project.root / "hold").unlink()

    status = project.finish(*xdist, "--llm-report=out", "--llm-resume")
    log = project.log.read_text()
    # gamma failed before the stop: the whole run fails, as the uninterrupted one did.
    assert status == pytest.ExitCode.TESTS_FAILED, log
    assert "llmtool: resumed 5 items from" in log
    assert "(4 passed, 1 failed); 3 run now" in log  # both slow items, and delta's skip
    assert comparable(project.report()) == comparable(project.report("full"))
    assert project.report()["metadata"]["exit_status"] == pytest.ExitCode.TESTS_FAILED
    # The new journal again holds every finished item.
    assert sorted(project.journalled()) == sorted(project.journalled("full"))


@linux_only
def test_a_resumed_run_stopped_again_resumes_again(project: Project) -> None:
    assert project.finish("--llm-report=full") == pytest.ExitCode.TESTS_FAILED
    (project.root / "hold").touch()
    proc = project.run("--llm-report=out")
    project.wait_until_busy(proc)
    stop(proc, signal.SIGKILL)
    for name in SLOW:
        (project.root / f"started.{name}").unlink()

    # The resumed run rewrites the journal at once, the earlier results first.
    proc = project.run("--llm-report=out", "--llm-resume")
    wait_for("the slow items", lambda: all(project.started(n) for n in SLOW), project.log)
    journal = read_journal(project.root / "out" / "results.jsonl")
    assert sorted(e.nodeid for e in journal.entries if e.type != "setup") == list(QUICK)
    assert "--llm-resume" in journal.header["args"]
    stop(proc, signal.SIGKILL)
    (project.root / "hold").unlink()

    assert project.finish("--llm-report=out", "--llm-resume") == pytest.ExitCode.TESTS_FAILED
    assert comparable(project.report()) == comparable(project.report("full"))


# In-process: what counts as finished, where the journal comes from, and refusals.


def journal_of(pytester: pytest.Pytester, directory: str = "out") -> Path:
    return pytester.path / directory / "results.jsonl"


def rewrite(path: Path, change: Any) -> None:
    """Apply `change` to the journal's lines (parsed) and write them back."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(line) + "\n" for line in change(lines)))


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_nothing_left_to_run_reports_the_whole_run_again(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str]
) -> None:
    args = ["--llm-model=oracle,nop", "--llm-report=out"]
    pytester.runpytest(*args).assert_outcomes(passed=3, failed=4, skipped=1)
    full = read_report(pytester)
    result = pytester.runpytest(*xdist, *args, "--llm-resume")
    # Only the oracle's delta (skipped, so never finished) is collected and run again.
    result.assert_outcomes(skipped=1, deselected=0 if xdist else 7)
    result.stdout.fnmatch_lines(["llmtool: resumed 7 items from * (3 passed, 4 failed); 1 run now"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert comparable(read_report(pytester)) == comparable(full)


def test_a_fully_finished_passing_run_resumes_to_exit_status_ok(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    args = ["-k", "alpha or beta", "--llm-report=out"]
    assert pytester.runpytest(*args).ret == pytest.ExitCode.OK
    result = pytester.runpytest(*args, "--llm-resume")
    result.assert_outcomes(deselected=4)  # two by -k, two resumed
    assert result.ret == pytest.ExitCode.OK
    assert read_report(pytester)["metadata"]["exit_status"] == pytest.ExitCode.OK


def test_errored_and_unrun_items_run_again(pytester: pytest.Pytester, dataset: Path) -> None:
    """An error is infrastructure, not a result: beta's becomes one and gamma's is lost."""
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)

    def change(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [line for line in lines if "gamma" not in line.get("nodeid", "")]
        for line in kept:
            if "beta" in line.get("nodeid", ""):
                line["type"] = "error"
        return kept

    rewrite(journal_of(pytester), change)
    result = pytester.runpytest("--llm-report=out", "--llm-resume", "-v")
    result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*beta*PASSED*", "*gamma*FAILED*"])
    journal = read_journal(journal_of(pytester))
    # The setup the results name and alpha (resumed) first, then what ran now; the old error
    # is gone.
    (key,) = read_report(pytester)["setups"]
    assert [(e.type, e.nodeid) for e in journal.entries] == [
        ("setup", key),
        ("bash", "data.jsonl::alpha[oracle]"),
        ("bash", "data.jsonl::beta[oracle]"),
        ("bash", "data.jsonl::gamma[oracle]"),
    ]
    assert read_report(pytester)["summary"]["total_tasks"] == 3


def test_journal_items_no_longer_collected_are_dropped_with_a_note(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    result = pytester.runpytest("--llm-report=out", "--llm-resume", "-k", "not gamma")
    result.stdout.fnmatch_lines(
        [
            "llmtool: resumed 2 items from * (2 passed, 0 failed); 1 run now",
            "llmtool: left out 1 item of the journal no longer collected: "
            "data.jsonl::gamma?oracle?",
        ]
    )
    assert result.ret == pytest.ExitCode.OK
    assert [r["task_id"] for r in read_report(pytester)["results"]] == ["alpha", "beta"]
    assert len(results_of(journal_of(pytester))) == 2


def test_resume_from_another_directory_and_from_the_cache(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-report=first").assert_outcomes(passed=2, failed=1, skipped=1)
    result = pytester.runpytest("--llm-resume=first", "--llm-report=second")
    result.assert_outcomes(skipped=1, deselected=3)
    assert comparable(read_report(pytester, "second")) == comparable(read_report(pytester, "first"))
    assert len(results_of(journal_of(pytester, "second"))) == 3
    # Without --llm-report the journal is in pytest's cache, and so is the one resumed.
    pytester.runpytest("-k", "alpha").assert_outcomes(passed=1, deselected=3)
    result = pytester.runpytest("--llm-resume")
    result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=1)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--llm-model=nop"], "--llm-model was ['oracle'], is ['nop']"),
        (["--llm-trials=2"], "--llm-trials was 1, is 2"),
        (["--llm-max-turns=3"], "--llm-max-turns was 10, is 3"),
    ],
)
def test_resuming_another_runs_journal_is_refused(
    pytester: pytest.Pytester, dataset: Path, args: list[str], problem: str
) -> None:
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    result = pytester.runpytest("--llm-report=out", "--llm-resume", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-resume: *results.jsonl is another run's journal*"])
    assert f"({problem});" in result.stderr.str()


def test_a_journal_of_another_plugin_version_is_refused(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)

    def older(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[0]["plugin"] = "0.0.1"
        return lines

    rewrite(journal_of(pytester), older)
    result = pytester.runpytest("--llm-report=out", "--llm-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*another run's journal (pytest-llmtool version was '0.0.1'*"])


def test_no_journal_or_a_damaged_one_is_a_usage_error(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("--llm-resume=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-resume: no journal at *nowhere*results.jsonl*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--llm-resume")
    result.stderr.fnmatch_lines(["ERROR: --llm-resume: no journal to resume*"])
    (pytester.path / "out").mkdir()
    journal_of(pytester).write_text('{"type": "header", "version": 1}\nnot json\n{}\n')
    result = pytester.runpytest("--llm-resume=out")
    result.stderr.fnmatch_lines(["ERROR: --llm-resume: *results.jsonl:2: not a JSON line"])


def test_the_ini_key_resumes_too(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    pytester.makeini("[pytest]\nllm_resume = out\n")
    pytester.runpytest().assert_outcomes(skipped=1, deselected=3)
    # The flag wins over the ini.
    pytester.runpytest("--llm-resume=false").assert_outcomes(passed=2, failed=1, skipped=1)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
@pytest.mark.parametrize(("limit", "runs"), [("0.5", False), ("1", True)])
def test_the_budget_starts_from_the_spend_already_recorded(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str], limit: str, runs: bool
) -> None:
    """alpha's three calls cost 0.25 each in the journal: 0.75 spent before the run starts,
    which a limit of 0.5 has already reached (the rest is skipped) and 1 has not."""
    pytester.runpytest("--llm-report=out", "-k", "alpha").assert_outcomes(passed=1, deselected=3)

    def priced(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # lines: the header, the setup, alpha
        for call in lines[2]["data"]["trace"]["llm_calls"]:
            call["cost_usd"] = 0.25
        return lines

    rewrite(journal_of(pytester), priced)
    result = pytester.runpytest(
        *xdist, "--llm-report=out", "--llm-resume", f"--llm-max-cost={limit}"
    )
    if runs:
        result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=0 if xdist else 1)
    else:
        result.assert_outcomes(skipped=3, deselected=0 if xdist else 1)
    budget = read_report(pytester)["budget"]
    assert budget["spent_usd"] == pytest.approx(0.75)
    assert budget["reached"] is not runs


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -0.5])
def test_a_journalled_cost_that_is_not_a_price_is_refused(
    pytester: pytest.Pytester, dataset: Path, cost: float
) -> None:
    """One `cost_usd: NaN` in a journal made the whole run's spend NaN, and a NaN spend never
    reaches a limit: the journal is input like any other, and checked."""
    pytester.runpytest("--llm-report=out", "-k", "alpha").assert_outcomes(passed=1, deselected=3)

    def priced(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[2]["data"]["trace"]["llm_calls"][-1]["cost_usd"] = cost
        return lines

    rewrite(journal_of(pytester), priced)
    result = pytester.runpytest("--llm-report=out", "--llm-resume", "--llm-max-cost=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --llm-resume: *results.jsonl: the result of *alpha* has a model call "
            f"costing {cost!r}; costs are finite numbers >= 0"
        ]
    )


# The pure parts.


def test_mismatch_names_the_first_setting_that_differs() -> None:
    now = {"plugin": "1.0", "models": ["a"], "trials": 2}
    assert mismatch({"type": "header", **now, "args": ["-x"]}, now) is None
    assert mismatch({**now, "trials": 1}, now) == "--llm-trials was 1, is 2"
    # A journal that does not record a setting is not known to match.
    assert mismatch({"plugin": "1.0", "models": ["a"]}, now) == "--llm-trials was None, is 2"


@pytest.mark.parametrize(
    ("status", "resumed", "failed", "whole"),
    [
        (pytest.ExitCode.OK, 3, 1, pytest.ExitCode.TESTS_FAILED),
        (pytest.ExitCode.NO_TESTS_COLLECTED, 3, 1, pytest.ExitCode.TESTS_FAILED),
        (pytest.ExitCode.NO_TESTS_COLLECTED, 3, 0, pytest.ExitCode.OK),
        (pytest.ExitCode.NO_TESTS_COLLECTED, 0, 0, pytest.ExitCode.NO_TESTS_COLLECTED),
        (pytest.ExitCode.INTERRUPTED, 3, 1, pytest.ExitCode.INTERRUPTED),
        (pytest.ExitCode.TESTS_FAILED, 3, 0, pytest.ExitCode.TESTS_FAILED),
        (pytest.ExitCode.OK, 3, 0, pytest.ExitCode.OK),
    ],
)
def test_the_exit_status_is_the_whole_runs(
    status: int, resumed: int, failed: int, whole: int
) -> None:
    assert whole_run_status(status, resumed, failed) == whole


def call(cost: float | None) -> LLMCallMetrics:
    return LLMCallMetrics(
        call_number=1,
        input_tokens=1,
        output_tokens=1,
        latency_ms=1,
        cumulative_input=1,
        tool_calls_made=0,
        cost_usd=cost,
    )


def test_spent_adds_the_agents_and_the_judges_calls() -> None:
    result = TaskResult.model_validate(
        {
            "nodeid": "d.jsonl::t[m]",
            "model": "m",
            "task_id": "t",
            "category": "c",
            "score": {"task_id": "t", "results": [], "score": 0, "max_score": 0},
            "trace": {"llm_calls": [call(0.5).model_dump(), call(None).model_dump()]},
            "judge_calls": [call(0.25).model_dump()],
        }
    )
    assert spent(result) == 0.75  # 0.5 + 0 (unpriced) + 0.25


def test_a_seeded_journal_replaces_the_old_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    old = JournalWriter(path, {"models": ["m"]})
    old.append("bash", "f::a[m]", {"n": 1})
    old.close()
    seed = read_journal(path).entries
    new = JournalWriter(path, {"models": ["m"], "resumed": True}, seed)
    new.append("bash", "f::b[m]", {"n": 2})
    new.close()
    journal = read_journal(path)
    assert journal.header["resumed"] is True
    assert journal.entries == [
        JournalEntry("bash", "f::a[m]", {"n": 1}),
        JournalEntry("bash", "f::b[m]", {"n": 2}),
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]  # no partial file left


def test_a_journal_line_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    # A model may answer with U+2028 or U+0085; JSON keeps them raw, and they are no newline.
    text = "a\u2028b\x85c\u2029d"
    path = tmp_path / "results.jsonl"
    writer = JournalWriter(path, {"started": "s"})
    writer.append_json("bash", "d.jsonl::t[m]", json.dumps({"answer": text}, ensure_ascii=False))
    writer.append("error", "d.jsonl::u[m]", {"answer": text})
    writer.close()
    entries = read_journal(path).entries
    assert [(e.nodeid, e.data["answer"]) for e in entries] == [
        ("d.jsonl::t[m]", text),
        ("d.jsonl::u[m]", text),
    ]


def test_a_resumed_run_keeps_the_setups_its_results_name(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    """The setup (system prompt, tools) is journalled once, before the first result naming
    it; a resumed run's report has it for the items it did not run again."""
    pytester.runpytest("--llm-report=out", "-k", "alpha").assert_outcomes(passed=1, deselected=3)
    journal = read_journal(journal_of(pytester))
    assert [e.type for e in journal.entries] == ["setup", "bash"]
    result = pytester.runpytest("--llm-report=out", "--llm-resume", "-k", "alpha or beta")
    result.assert_outcomes(passed=1, deselected=3)
    report = read_report(pytester)
    names = {r["trace"]["setup"] for r in report["results"]}
    assert len(report["results"]) == 2 and names == set(report["setups"])
    assert "bash" in report["setups"][names.pop()]["system"]

    rewrite(
        journal_of(pytester),
        lambda lines: [
            {**line, "data": {"system": 1}} if line.get("type") == "setup" else line
            for line in lines
        ],
    )
    result = pytester.runpytest("--llm-report=out", "--llm-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-resume: *: setup * is not a model setup*"])
