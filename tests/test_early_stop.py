"""`--llm-early-stop`: trials not run once their task's rule (or the comparison) is decided,
with the same verdicts, fewer model calls, and the saving said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, read_report, write_dataset

from pytest_llmtool.records import EarlyStopSummary, SequentialDecision, SkippedTrial
from pytest_llmtool.run.early_stop import _Feed, paired_task

# --------------------------------------------------------------------------- pure parts


def test_a_task_pairs_across_models_by_its_node_id_without_model_and_trial() -> None:
    assert paired_task("d.jsonl::alpha[oracle-t3]", "oracle", 2) == "d.jsonl::alpha[]"
    assert paired_task("d.jsonl::alpha[nop-t3]", "nop", 2) == "d.jsonl::alpha[]"
    assert paired_task("d.jsonl::a[nop-guide-t1]", "nop", 0) == "d.jsonl::a[-guide]"


def test_a_worker_reads_only_whole_new_lines_of_the_decisions(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    writer, reader = _Feed(path), _Feed(path)
    assert reader.read_new() == []  # no file yet: nothing decided
    writer.write({"task": "a", "verdict": "pass"})
    with path.open("a", encoding="utf-8") as out:
        out.write('{"task": "b"')  # a line the controller is still writing
    assert reader.read_new() == [{"task": "a", "verdict": "pass"}]
    assert reader.read_new() == []
    with path.open("a", encoding="utf-8") as out:
        out.write(', "verdict": "fail"}\n')
    assert reader.read_new() == [{"task": "b", "verdict": "fail"}]


def test_the_line_says_estimated_and_leaves_out_an_unknown_cost() -> None:
    skipped = [
        SkippedTrial(
            nodeid=f"d::a[m-t{n}]",
            kind="bash",
            model="m",
            task="d::a[m]",
            trial=n - 1,
            reason="not needed",
        )
        for n in (9, 10)
    ]
    summary = EarlyStopSummary(modes=["tasks"], trials_skipped=2, skipped=skipped, calls_saved=4)
    assert summary.line() == (
        "early stop: 2 trials not needed (tasks decided); saved ~4 model calls "
        "(estimated from the trials that ran)"
    )
    summary.cost_saved_usd = 0.1234
    assert "saved ~4 model calls and ~$0.12 (estimated" in summary.line()


def test_the_line_names_what_was_decided_not_the_modes_asked_for() -> None:
    """A comparison decided in the first round skips every later trial before any task is
    decided: the line must not say "tasks decided" for it."""
    skipped = [
        SkippedTrial(
            nodeid=f"d::a[m-t{n}]",
            kind="bash",
            model="m",
            task="d::a[m]",
            trial=n - 1,
            reason="not needed: the sequential comparison is decided",
            by="comparison",
        )
        for n in (2, 3)
    ]
    summary = EarlyStopSummary(modes=["tasks", "compare"], trials_skipped=2, skipped=skipped)
    assert "not needed (comparison decided);" in summary.line()
    summary.skipped[0].by = "task"
    assert "not needed (tasks decided, comparison decided);" in summary.line()


# --------------------------------------------------------------------------- end to end

HELLO = [Turn(tool_calls=["echo hello"]), Turn(text="Done.")]
REFUSE = [Turn(text="I would rather not.")]
COPY = [
    Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt && wc -l < /out/b.txt"]),
    Turn(text="Copied; it has 2 lines."),
]
SHOW = [Turn(tool_calls=["cat /in/c.txt"]), Turn(text="Shown.")]

ARGS = ["--llm-model=haiku", "--llm-trials=10", "--llm-task-pass=8/10", "-rs"]
# Serially: alpha passes 8 then is decided (2 not needed), beta alternates and has failed 3
# times after 6 trials (4 not needed), gamma fails 3 (7 not needed).
RAN, SKIPPED = 8 + 6 + 3, 2 + 4 + 7


def _plant(server: FakeLLMServer) -> None:
    """alpha always passes, beta ("Say hello.") passes every other time, gamma never."""
    server.reset()
    server.script(TASKS[0]["prompt"], COPY)
    server.script_attempts(TASKS[1]["prompt"], [HELLO, REFUSE])
    server.script(TASKS[2]["prompt"], SHOW)


@pytest.fixture
def planted(pytester: pytest.Pytester, server: FakeLLMServer) -> Path:
    return write_dataset(pytester, TASKS[:3])


def _verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {v["task_id"]: v["verdict"] for v in report["task_verdicts"]}


def _run(
    pytester: pytest.Pytester, server: FakeLLMServer, out: str, *args: str
) -> tuple[pytest.RunResult, dict[str, Any], int]:
    _plant(server)
    result = pytester.runpytest(*ARGS, f"--llm-report={out}", *args)
    return result, read_report(pytester, out), len(server.requests)


def test_off_by_default_every_trial_runs(
    pytester: pytest.Pytester, server: FakeLLMServer, planted: Path
) -> None:
    result, report, _ = _run(pytester, server, "out")
    result.assert_outcomes(passed=15, failed=15)
    assert report["early_stop"] is None
    assert _verdicts(report) == {"alpha": "pass", "beta": "fail", "gamma": "fail"}
    result.stdout.no_fnmatch_line("*early stop*")


def test_tasks_mode_runs_fewer_calls_with_the_same_verdicts(
    pytester: pytest.Pytester, server: FakeLLMServer, planted: Path
) -> None:
    _, whole, calls_whole = _run(pytester, server, "whole")
    result, early, calls_early = _run(pytester, server, "early", "--llm-early-stop=tasks")
    assert _verdicts(early) == _verdicts(whole)
    # Skipped as not needed: never a pass, never a failure.
    result.assert_outcomes(passed=8 + 3, failed=3 + 3, skipped=SKIPPED)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*not needed: alpha already decided pass (8 passed, 0 failed; rule 8/10)",
            "SKIPPED*not needed: gamma already decided fail (0 passed, 3 failed; rule 8/10)",
        ]
    )
    assert calls_early < calls_whole
    stop = early["early_stop"]
    assert (stop["modes"], stop["trials_skipped"]) == (["tasks"], SKIPPED)
    assert {s["trial"] for s in stop["skipped"] if "alpha" in s["task"]} == {8, 9}
    # Each task's trials take 2 model calls (a tool call, then the answer; a refusal 1).
    assert stop["calls_saved"] == pytest.approx(2 * 2 + 4 * 1.5 + 7 * 2)
    assert calls_whole - calls_early == 2 * 2 + 4 * 1.5 + 7 * 2
    # Not a stopped run: every item has its outcome.
    assert early["metadata"]["stopped"] is None and early["partial"] is None
    result.stdout.fnmatch_lines(
        [
            f"early stop: {SKIPPED} trials not needed (tasks decided); saved ~24 model calls"
            "* (estimated from the trials that ran)"
        ]
    )
    markdown = (pytester.path / "early" / "report.md").read_text(encoding="utf-8")
    assert "## Early stop" in markdown and f"{SKIPPED} trials not needed" in markdown


def test_the_window_starts_no_run_certain_to_be_wasted(
    pytester: pytest.Pytester, server: FakeLLMServer, planted: Path
) -> None:
    result, report, _ = _run(
        pytester, server, "out", "--llm-early-stop=tasks", "--llm-concurrency=4"
    )
    # The same items as serially: no started run was not needed.
    result.assert_outcomes(passed=8 + 3, failed=3 + 3, skipped=SKIPPED)
    assert _verdicts(report) == {"alpha": "pass", "beta": "fail", "gamma": "fail"}


def test_xdist_gives_the_same_verdicts(
    pytester: pytest.Pytester, server: FakeLLMServer, planted: Path
) -> None:
    result, report, _ = _run(pytester, server, "out", "--llm-early-stop=tasks", "-n", "2")
    assert _verdicts(report) == {"alpha": "pass", "beta": "fail", "gamma": "fail"}
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == report["early_stop"]["trials_skipped"] > 0
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == 30
    assert report["metadata"]["stopped"] is None


def test_compare_mode_stops_once_one_model_is_better(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS[:2])  # the oracle passes both, nop neither
    result = pytester.runpytest(
        "--llm-model=oracle,nop",
        "--llm-trials=10",
        "--llm-early-stop=compare",
        "--llm-concurrency=1",  # else runs started ahead finish after the decision
        "--llm-report=out",
        "-rs",
    )
    report = read_report(pytester)
    (decision,) = (
        SequentialDecision.model_validate(d) for d in report["early_stop"]["comparisons"]
    )
    assert decision.decided and decision.better == "oracle"
    assert decision.discordant == decision.pairs == 7  # 7 straight wins reach e >= 20
    skipped = report["early_stop"]["skipped"]
    # Trial-major, the 7th pair is alpha's 4th trial: beta's 4th and every later one are
    # not needed.
    assert len(skipped) == 40 - 14
    assert min(s["trial"] for s in skipped) == 3  # a task's first trial always runs
    result.assert_outcomes(passed=7, failed=7, skipped=26)
    result.stdout.fnmatch_lines(
        ["SKIPPED*not needed: the sequential comparison is decided: oracle ahead*"]
    )
