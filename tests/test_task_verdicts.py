"""Per-task verdicts over trials (`--llm-task-pass`): the computation, the terminal lines,
the gate's task metrics, and a planted 10-trial run end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, read_report, run_metadata, write_dataset

from pytest_llmtool.history.gate import EXIT_BELOW, Threshold
from pytest_llmtool.records import EvalReport, SkippedTrial, StoppedTask
from pytest_llmtool.report.terminal import verdict_lines
from pytest_llmtool.stats.outcomes import Outcome
from pytest_llmtool.stats.task_rule import TaskRule
from pytest_llmtool.stats.task_verdicts import task_verdicts

RULE = TaskRule.parse("8/10", 10)
TASK = "data.jsonl::beta[m]"


def _rows(*passed: bool | None, task: str = TASK, model: str = "m") -> list[Outcome]:
    task_id = task.partition("::")[2].partition("[")[0]
    return [
        Outcome("bash", f"{task[:-1]}-t{n + 1}]", task, task_id, model, n, "c", p)
        for n, p in enumerate(passed)
    ]


def _one(*passed: bool | None, **extra: Any) -> Any:
    (verdict,) = task_verdicts(_rows(*passed), RULE, **extra)
    return verdict


# --------------------------------------------------------------------------- the computation


def test_eight_of_ten_meets_the_rule_with_pass_at_k_and_pass_hat_k() -> None:
    verdict = _one(*[True] * 8, False, False)
    assert (verdict.verdict, verdict.shown, verdict.need, verdict.trials) == ("pass", "8/10", 8, 10)
    assert (verdict.task, verdict.task_id, verdict.category) == (TASK, "beta", "c")
    assert verdict.flaky
    # pass@1 = 8/10; pass@10 = 1 - C(2,10)/C(10,10) = 1; pass^10 = C(8,10)/C(10,10) = 0
    assert verdict.pass_at_k == pytest.approx({1: 0.8, 10: 1.0})
    assert verdict.pass_hat_k == pytest.approx({1: 0.8, 10: 0.0})


def test_seven_of_ten_fails_it_and_ten_of_ten_is_not_flaky() -> None:
    assert _one(*[True] * 7, *[False] * 3).verdict == "fail"
    steady = _one(*[True] * 10)
    assert (steady.verdict, steady.flaky, steady.pass_hat_k[10]) == ("pass", False, 1.0)


def test_errored_trials_leave_it_open_and_are_shown() -> None:
    verdict = _one(*[True] * 7, False, None, None)
    assert verdict.verdict == "undecided"
    assert (verdict.passed, verdict.failed, verdict.errored) == (7, 1, 2)
    assert verdict.shown == "7/10 (2 errored)"
    assert verdict.reason == "2 errored trials leave it open"
    # pass^10 needs 10 scored trials: this task has 8
    assert verdict.pass_hat_k == pytest.approx({1: 7 / 8})
    # errors that cannot change it do not hold a decided verdict open
    assert _one(*[True] * 8, None, None).verdict == "pass"
    assert _one(*[False] * 3, None).verdict == "fail"


def test_a_trial_stopped_by_the_cost_limit_is_not_scored() -> None:
    stopped = StoppedTask(
        nodeid="data.jsonl::beta[m-t10]",
        kind="bash",
        task_id="beta",
        model="m",
        category="c",
        trial=9,
        reason="cost limit",
    )
    verdict = _one(*[True] * 7, *[False] * 2, stopped=[stopped])
    # Said as what it was, not an error: the limit says nothing of the model (issue 35, 5).
    assert (verdict.verdict, verdict.errored, verdict.stopped) == ("undecided", 0, 1)
    assert verdict.shown == "7/10 (1 stopped by the cost limit)"
    assert verdict.reason == "stopped by the cost limit"


def _skipped(trials: range, reason: str = "not needed: the task's verdict is decided") -> Any:
    return [
        SkippedTrial(
            nodeid=f"{TASK[:-1]}-t{n + 1}]",
            kind="bash",
            model="m",
            task=TASK,
            trial=n,
            reason=reason,
        )
        for n in trials
    ]


def test_not_needed_trials_are_counted_apart_never_as_passes() -> None:
    passed = _one(*[True] * 8, skipped=_skipped(range(8, 10)))
    assert (passed.verdict, passed.passed, passed.not_needed) == ("pass", 8, 2)
    assert passed.shown == "8/10 (2 not needed)"
    failed = _one(*[False] * 3, skipped=_skipped(range(3, 10)))
    assert (failed.verdict, failed.passed, failed.failed, failed.not_needed) == ("fail", 0, 3, 7)
    assert failed.shown == "0/10 (7 not needed)"
    cut = _one(True, True, skipped=_skipped(range(2, 10), "cut short: comparison decided"))
    assert (cut.verdict, cut.reason) == ("undecided", "cut short: comparison decided")


def test_tasks_and_models_get_a_verdict_each_in_order() -> None:
    rows = _rows(*[True] * 10) + _rows(*[False] * 10, task="data.jsonl::alpha[m]")
    rows += _rows(*[True] * 10, task="data.jsonl::beta[n]", model="n")
    found = [(v.task, v.model, v.verdict) for v in task_verdicts(rows, RULE)]
    assert found == [
        (TASK, "m", "pass"),
        ("data.jsonl::alpha[m]", "m", "fail"),
        ("data.jsonl::beta[n]", "n", "pass"),
    ]


def test_trials_that_never_ran_are_said() -> None:
    verdict = _one(True, True, True)
    assert (verdict.verdict, verdict.reason) == ("undecided", "7 of 10 trials did not run")


# --------------------------------------------------------------------------- terminal and gate


def _report() -> EvalReport:
    rows = _rows(*[True] * 10, task="data.jsonl::alpha[m]")
    rows += _rows(*[True] * 3, *[False] * 7, task="data.jsonl::t3[m]")
    rows += _rows(*[True] * 6, *[False] * 4, task="data.jsonl::t7[m]")
    rows += _rows(*[True] * 7, False, None, None, task="data.jsonl::t9[m]")
    report = EvalReport(metadata=run_metadata().model_copy(update={"trials": 10}))
    report.task_rule = RULE.text
    report.task_verdicts = task_verdicts(rows, RULE)
    return report


def test_the_terminal_gives_one_line_per_model_and_the_list_in_full() -> None:
    report = _report()
    assert verdict_lines(report) == [
        "Task verdicts (each task needs 8/10 trials passed), tasks meeting it:",
        "  m: bash 1 of 4 (2 failed, 1 undecided)",
    ]
    assert verdict_lines(report, full=True)[1] == (
        "  [bash m] tasks meeting 8/10: 1 of 4; failed: t3 3/10, t7 6/10; "
        "undecided: t9 7/10 (2 errored) (2 errored trials leave it open)"
    )
    assert verdict_lines(EvalReport(metadata=run_metadata())) == []


def _judge(text: str, report: EvalReport | None = None) -> tuple[bool | None, str]:
    report = report or _report()
    return Threshold.parse(text, 10).judge([], "m", report.task_verdicts)


def test_tasks_passed_counts_undecided_as_not_passed_and_names_them() -> None:
    below, line = _judge("tasks_passed=1")
    assert below
    assert line == (
        "m: tasks_passed 1/4 (25%) < 100% (below 8/10: t3 3/10, t7 6/10, t9 7/10 (2 errored))"
    )
    assert _judge("tasks_passed=0.25")[0] is False
    # :upper judges the interval's upper bound over tasks: 1 of 4 does not show below 50%
    assert _judge("tasks_passed:upper=0.5")[0] is False


def test_tasks_failed_is_at_most_with_or_without_upper() -> None:
    below, line = _judge("tasks_failed:upper=2")
    assert below  # t3, t7 failed and t9 undecided: 3 > 2
    assert line.startswith("m: tasks_failed 3/4 > 2 (below 8/10: t3 3/10")
    assert _judge("tasks_failed=3")[0] is False
    assert _judge("tasks_failed:upper=3")[0] is False


def test_pass_hat_k_is_decided_only_when_tasks_short_of_n_cannot_change_it() -> None:
    # alpha 1, t3 0, t7 0 and t9 (8 scored) unknown: 1/4 as 0, 2/4 as 1
    assert _judge("pass_hat_k=0.2")[0] is False
    assert _judge("pass_hat_k=0.6")[0] is True
    undecided, line = _judge("pass_hat_k=0.4")
    assert undecided is None
    assert "1 with fewer than 10 scored trials counted as 0; as 1: 50%" in line


def test_the_task_metrics_scope_like_the_others_and_judge_nothing_seen() -> None:
    assert _judge("tasks_passed[category=c]=1")[0] is True
    below, line = _judge("tasks_passed[kind=scenario]=1")
    assert below is None and "no task verdicts" in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tasks_failed=0.5", "a count of tasks"),
        ("tasks_failed=-1", "a count of tasks"),
        ("tasks_failed=\u00b2", "a count of tasks"),
        ("tasks_passed=2", "within 0..1"),
    ],
)
def test_bad_task_thresholds_are_usage_errors(text: str, said: str) -> None:
    with pytest.raises(pytest.UsageError, match=said):
        Threshold.parse(text, 10)


def test_a_task_metric_with_one_trial_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, TASKS[:1])
    result = pytester.runpytest("--llm-model=oracle", "--llm-fail-under=tasks_failed=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tasks_failed judges per-task verdicts*--llm-trials above 1*"])


# --------------------------------------------------------------------------- end to end

HELLO = [Turn(tool_calls=["echo hello"]), Turn(text="Done.")]
REFUSE = [Turn(text="I would rather not.")]
COPY = [
    Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt && wc -l < /out/b.txt"]),
    Turn(text="Copied; it has 2 lines."),
]


@pytest.fixture
def planted(pytester: pytest.Pytester, server: FakeLLMServer) -> Path:
    """alpha passes its 10 trials; beta ("Say hello.") is refused by 3 of its 10."""
    path = write_dataset(pytester, TASKS[:2])
    server.script(TASKS[0]["prompt"], COPY)
    server.script_attempts(TASKS[1]["prompt"], [HELLO] * 7 + [REFUSE] * 3)
    return path


ARGS = ["--llm-model=haiku", "--llm-trials=10", "--llm-report=out"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_task_run_ten_times_gets_one_verdict_everywhere(
    pytester: pytest.Pytester, planted: Path, workers: list[str]
) -> None:
    result = pytester.runpytest(
        *workers,
        *ARGS,
        "--llm-task-pass=8/10",
        "--llm-summary=full",
        "--llm-fail-under=tasks_passed=1",
    )
    result.assert_outcomes(passed=17, failed=3)
    assert result.ret == EXIT_BELOW
    report = read_report(pytester)
    assert report["task_rule"] == "8/10"
    found = {v["task_id"]: (v["verdict"], v["shown"], v["flaky"]) for v in report["task_verdicts"]}
    assert found == {"alpha": ("pass", "10/10", False), "beta": ("fail", "7/10", True)}
    result.stdout.fnmatch_lines(
        [
            # the headline counts a task failed by the rule, not by most of its attempts
            "haiku: 17/20 items passed, *; 1 of 2 tasks below the 8/10 rule; *",
            "Task verdicts (each task needs 8/10 trials passed):",
            "  [[]bash haiku] tasks meeting 8/10: 1 of 2; failed: beta 7/10",
            "--llm-fail-under haiku: tasks_passed 1/2 (50%) < 100% (below 8/10: beta 7/10)",
        ]
    )


@pytest.mark.parametrize(
    ("rule", "gate", "status"),
    [
        ("8/10", "tasks_failed:upper=0", EXIT_BELOW),
        ("8/10", "tasks_failed=1", pytest.ExitCode.OK),
        ("0.7", "tasks_passed=1", pytest.ExitCode.OK),
        ("8/10", "pass_hat_k=0.6", EXIT_BELOW),  # pass^10: alpha 1, beta 0
        ("8/10", "pass_hat_k=0.5", pytest.ExitCode.OK),
    ],
)
def test_the_task_metrics_decide_the_exit_status(
    pytester: pytest.Pytester, planted: Path, rule: str, gate: str, status: int
) -> None:
    result = pytester.runpytest(*ARGS, f"--llm-task-pass={rule}", f"--llm-fail-under={gate}")
    assert result.ret == status
