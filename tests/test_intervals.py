"""95% intervals beside every rate: the formulas (`intervals.py`) against numbers worked out by
hand, and where the summaries, trials and writers put them.

Wilson with continuity correction (Newcombe's method 4), z = 1.96, n tasks, p the rate:
low = (2np + z² - 1 - z·sqrt(z² - 2 - 1/n + 4p(n(1-p) + 1))) / (2(n + z²)),
high = (2np + z² + 1 + z·sqrt(z² + 2 - 1/n + 4p(n(1-p) - 1))) / (2(n + z²)).
A mean of per-task values (or a ratio of sums) with standard error SE on n - 1 df takes the
same interval at the effective size p(1-p)/SE² · (1.96/t95(n-1))², at most the count of
outcomes behind it; with no spread that count itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import read_report, write_guidance_comparison

from pytest_llmtool import stats
from pytest_llmtool.kinds.bash.summary import build_summary, healthy_profile
from pytest_llmtool.records import (
    AgentTrace,
    CategorySummary,
    EvalSummary,
    Interval,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolCallResult,
)
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.trials import trial_summaries


def test_one_attempt_per_task_is_wilson_with_continuity_correction() -> None:
    # 2 of 3: 2np + z² - 1 = 6.8415; sqrt(3.8415 - 2 - 1/3 + 4·(2/3)·2) = 2.61563;
    # low = (6.8415 - 1.96·2.61563) / 13.683 = .12533; high: sqrt(3.8415 + 2 - 1/3 + 0) =
    # 2.34745, (8.8415 + 4.60100) / 13.683 = .98243 (plain Wilson's .2077 claimed too much).
    found = intervals.pass_rate({"a": [True], "b": [True], "c": [False]})
    assert found is not None
    assert (found.estimate, found.n, found.method, found.small) == (2 / 3, 3, "wilson-cc", True)
    assert (found.low, found.high) == pytest.approx((0.12533, 0.98235), abs=1e-4)


def test_several_attempts_cluster_by_task() -> None:
    # Per-task means 1, .5, .5, .5, 1, .5, .5, .5: mean .625, sd .23146, SE .081832;
    # effective size .234375 / .0066965 · (1.959964 / 2.364624)² = 35.0 · .68703 = 24.05,
    # more than the 8 tasks (the independent units), so capped there: Wilson-cc(5, 8).
    halves = {f"t{i}": [True, False] for i in range(6)}
    attempts = {"whole1": [True, True], "whole2": [True, True], **halves}
    found = intervals.pass_rate(attempts)
    assert found is not None
    assert (found.estimate, found.n, found.method) == (0.625, 8, "clustered-wilson-cc")
    same = stats.wilson_cc(5, 8, 8)
    assert same is not None
    assert (found.low, found.high) == pytest.approx((same.low, same.high))


def test_a_ratio_of_sums_has_an_interval_inside_0_1() -> None:
    # The oracle's weighted rate on the shared TASKS: (4, 4), (2.5, 2.5), (1, 2).
    # R = 7.5/8.5 = .882353; SE of the ratio estimator = .136141 (a t interval would be
    # [.296586, 1.468], past 1); effective size .103806 / .018534 · (1.959964/4.302653)²
    # = 1.1622, so Wilson-cc(1.0255, 1.1622).
    found = intervals.ratio({"alpha": [(4, 4)], "beta": [(2.5, 2.5)], "gamma": [(1, 2)]})
    assert found is not None
    assert found.estimate == pytest.approx(7.5 / 8.5)
    assert (found.n, found.method) == (3, "wilson-cc")
    size = (7.5 / 8.5) * (1 / 8.5) / 0.136141**2 * (stats.Z95 / 4.302653) ** 2
    same = stats.wilson_cc(7.5 / 8.5 * size, size, 3)
    assert same is not None
    assert (found.low, found.high) == pytest.approx((same.low, same.high), abs=1e-4)
    assert 0 < found.low < found.high < 1


def test_no_spread_is_never_a_point() -> None:
    # Every task at 100%: a t interval would be [1, 1]; nothing varies, so the size is the
    # 3 tasks: Wilson-cc(3, 3), low = (6 + 2.8415 - 1.96·sqrt(1.8415 - 1/3 + 4)) / 13.683.
    found = intervals.ratio({"a": [(2, 2)], "b": [(1, 1)], "c": [(3, 3), (1, 1)]})
    assert found is not None
    assert (found.estimate, found.high) == (1.0, 1.0)
    assert found.low == pytest.approx(0.30993, abs=1e-4)
    none = intervals.mean([0.0, 0.0])
    assert none is not None and (none.low, none.estimate) == (0.0, 0.0)
    assert none.high == pytest.approx(0.80213, abs=1e-4)
    alike = intervals.mean([0.4, 0.4, 0.4])
    assert alike is not None and alike.low < 0.4 < alike.high


def test_tasks_without_a_denominator_are_left_out_and_nothing_is_none() -> None:
    found = intervals.ratio({"calls": [(1, 2)], "none": [(0, 0)]})
    assert found is not None and found.n == 1
    # one task: never the point [.5, .5], a wide interval flagged small
    assert found.low < 0.1 and found.high > 0.9 and found.small
    assert intervals.ratio({"none": [(0, 0)]}) is None
    assert intervals.pass_rate({}) is None


def test_shown_compactly_with_a_star_when_small() -> None:
    small = Interval(estimate=0.8, low=0.67, high=0.89, n=10, method="wilson-cc")
    assert intervals.show(small) == "80% [67\u201389%]*"
    large = small.model_copy(update={"n": 50})
    assert intervals.show(large) == "80% [67\u201389%]"
    assert intervals.show(large, 0.81) == "81% [67\u201389%]"
    assert intervals.show(None, 0.5) == "50%"
    diff = Interval(estimate=0.12, low=-0.031, high=0.2, n=40, method="paired-t")
    assert intervals.show_difference(diff) == "+12 pp [-3, +20]"


# --------------------------------------------------------------------------- the summaries


def _task(
    task: str, passed: bool, score: float, max_score: float, calls: list[int], trial: int = 0
) -> TaskResult:
    checks = [ScoreResult(check="c", passed=passed, detail="", weight=max_score)]
    suffix = f"-t{trial + 1}" if trial else ""
    return TaskResult(
        nodeid=f"d.jsonl::{task}[m{suffix}]",
        model="m",
        trial=trial,
        task_id=task,
        category="cat",
        score=TaskScore(task_id=task, results=checks, score=score, max_score=max_score),
        trace=AgentTrace(
            tool_calls=[
                ToolCallResult(commands="x", stdout="", stderr="", exit_code=c) for c in calls
            ],
            turns=len(calls) + 1,
            natural_stop=True,
        ),
    )


def test_build_summary_puts_an_interval_beside_every_rate() -> None:
    results = [
        _task("a", True, 1, 1, [0, 0]),
        _task("b", False, 0, 1, [0, 1]),
        _task("c", True, 1, 1, [0]),
    ]
    s = build_summary(results)
    assert s.pass_rate_ci is not None and s.pass_rate_ci.method == "wilson-cc"
    assert (s.pass_rate_ci.estimate, s.pass_rate_ci.n) == (2 / 3, 3)
    # weighted rate: rates 1, 0, 1 with equal weights, mean 2/3, n 3: SE 1/3 gives an
    # effective size of 2 · (1.96/4.302653)² = .415, at least 1: Wilson-cc(2/3, 1).
    assert s.overall_rate_ci is not None and s.overall_rate_ci.method == "wilson-cc"
    assert s.overall_rate_ci.estimate == pytest.approx(s.overall_rate)
    one = stats.wilson_cc(2 / 3, 1, 3)
    assert one is not None
    assert (s.overall_rate_ci.low, s.overall_rate_ci.high) == pytest.approx((one.low, one.high))
    # tool calls, per task: 2/2, 1/2, 1/1: R = 4/5 (the printed 80%); residuals 2 - 1.6 = .4,
    # 1 - 1.6 = -.6, 1 - .8 = .2; Σ² = .56; SE = sqrt(.56/6)/(5/3) = .18330; effective size
    # .16 / .033599 · .207508 = .98815, at least 1: Wilson-cc(.8, 1) = [.02073, .97098]
    # (the t interval was [.01132, 1.58869] cut at 1).
    ci = s.tool_call_success_ci
    assert ci is not None and ci.estimate == pytest.approx(0.8) == s.tool_call_success_rate
    assert (ci.low, ci.high) == pytest.approx((0.02073, 0.97098), abs=1e-4)
    category = s.by_category["cat"]
    assert category.rate_ci == s.overall_rate_ci
    assert category.pass_rate_ci == s.pass_rate_ci


def test_build_summary_clusters_the_attempts_of_a_task() -> None:
    # a: 2 attempts both pass; b: pass and fail. Per-task pass means 1, .5: mean .75.
    results = [
        _task("a", True, 1, 1, [0], trial=0),
        _task("a", True, 1, 1, [0], trial=1),
        _task("b", True, 1, 1, [0], trial=0),
        _task("b", False, 0, 1, [1], trial=1),
    ]
    s = build_summary(results)
    assert s.pass_rate_ci is not None and s.overall_rate_ci is not None
    assert (s.pass_rate_ci.method, s.pass_rate_ci.n) == ("clustered-wilson-cc", 2)
    assert s.pass_rate_ci.estimate == 0.75
    assert (s.overall_rate_ci.method, s.overall_rate_ci.n) == ("clustered-wilson-cc", 2)


def test_healthy_profile_criterion_by_criterion() -> None:
    s = EvalSummary(
        total_tasks=4,
        overall_rate=0.95,
        total_tool_calls=10,
        tool_call_success_rate=0.8,  # not above 80%
        avg_turns_per_task=4.9,
        natural_stops=2,  # 2 of 4 is not most
        by_category={"a": CategorySummary(rate=0.7), "b": CategorySummary(rate=1.0)},
    )
    assert [(c.criterion, c.value, c.met) for c in healthy_profile(s)] == [
        ("overall rate > 90%", "95%", True),
        ("tool call success > 80%", "80%", False),
        ("avg turns < 5", "4.9", True),
        ("no category below 70%", "lowest a 70%", True),
        ("natural stop on most tasks", "2/4", False),
    ]
    assert healthy_profile(EvalSummary()) == []


def test_pass_at_k_intervals_over_tasks() -> None:
    # 3 attempts: A 2 of 3, B 3 of 3, C 1 of 3.
    # pass@1 per task 2/3, 1, 1/3: mean 2/3, SE (1/3)/sqrt(3) = .19245: effective size
    # (2/9) / .037037 · .207508 = 1.245. pass@2 per task: A 1 - C(1,2)/C(3,2) = 1, B 1,
    # C 1 - C(2,2)/C(3,2) = 2/3: mean 8/9, SE .19245/sqrt(3) = .11111: effective size
    # (8/81) / .012346 · .207508 = 1.660. Both inside (0, 1), neither cut nor a point
    # (the t intervals were [0, 1] and [.41082, 1.367] cut at 1).
    outcomes = [("A", "m", p) for p in (True, True, False)]
    outcomes += [("B", "m", True)] * 3 + [("C", "m", p) for p in (True, False, False)]
    s = trial_summaries(outcomes, trials=3)["m"]
    one, two = s.pass_at_k_ci[1], s.pass_at_k_ci[2]
    assert (one.estimate, one.method) == (pytest.approx(2 / 3), "clustered-wilson-cc")
    expected = stats.wilson_cc(2 / 3 * 1.2450, 1.2450, 3)
    assert expected is not None
    assert (one.low, one.high) == pytest.approx((expected.low, expected.high), abs=1e-3)
    assert two.estimate == pytest.approx(s.pass_at_k[2]) == pytest.approx(8 / 9)
    expected = stats.wilson_cc(8 / 9 * 1.6600, 1.6600, 3)
    assert expected is not None
    assert (two.low, two.high) == pytest.approx((expected.low, expected.high), abs=1e-3)
    assert set(s.pass_hat_k_ci) == {1, 2}


# --------------------------------------------------------------------------- end to end


def test_report_and_terminal_carry_the_intervals(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    summary = read_report(pytester)["by_model"]["oracle"]
    # alpha, beta pass, gamma fails: Wilson-cc 2/3 (see above); the weighted rate as above.
    assert summary["pass_rate_ci"]["method"] == "wilson-cc"
    assert summary["pass_rate_ci"]["low"] == pytest.approx(0.12533, abs=1e-4)
    assert summary["overall_rate_ci"]["high"] < 1
    assert summary["overall_rate_ci"]["small"] is True
    # the figures before intervals are unchanged
    assert summary["pass_rate"] == 2 / 3 and summary["overall_rate"] == 7.5 / 8.5
    result.stdout.fnmatch_lines(
        [
            "Bash pass rate*67% [[]13\u201398%[]][*]",
            "Overall rate*88% [[]5\u201396%[]]*",
            "[*] n < 30: wide interval",
            "Health checks (seed 000's healthy profile):",
            "  [[]oracle[]] 4/5 criteria met; not met: overall rate > 90% (88%)",
        ]
    )
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "| Bash pass rate | 67% \\[13\u201398%\\]\\* |" in markdown
    assert "\\* n &lt; 30: wide interval" in markdown
    assert "## Healthy Profile" in markdown


def test_scenario_pass_and_gate_rates_carry_intervals(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_guidance_comparison(project)
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    s = read_report(pytester)["scenario_summary"]["oracle"]
    # passes 1 of 2 items: Wilson-cc; gates 3/4 and 4/4: R = 7/8, residuals -.5, .5, SE =
    # sqrt(.5/2)/4 = .125; effective size .109375 / .015625 · (1.96/12.7062)² = .1666, at
    # least 1: Wilson-cc(.875, 1) = [.03169, .95071] (the t interval was all of [0, 1]).
    assert (s["pass_rate_ci"]["method"], s["pass_rate_ci"]["estimate"]) == ("wilson-cc", 0.5)
    gates = s["gate_pass_rate_ci"]
    assert (gates["estimate"], gates["n"]) == (0.875, 2)
    assert (gates["low"], gates["high"]) == pytest.approx((0.03169, 0.95071), abs=1e-4)
    result.stdout.fnmatch_lines(["Model*Passed*Pass rate*Gates*Gate pass rate", "oracle*1/2*"])


def test_a_rate_against_its_threshold_is_a_whole_percent_unless_rounding_ties_them() -> None:
    """The fail-under line shows a rate as every other output does (`60%`), and only where
    whole percents would read `75% < 75%` as many decimals as tell the two apart."""
    assert intervals.against(0.6, 0.9) == ("60%", "90%")
    assert intervals.against(0.746, 0.75) == ("74.6%", "75.0%")
    assert intervals.against(0.7496, 0.75) == ("74.96%", "75.00%")
    assert intervals.against(0.75, 0.75) == ("75%", "75%")
