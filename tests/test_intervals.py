"""95% intervals beside every rate: the formulas (`intervals.py`) against numbers worked out by
hand, and where the summaries, trials and writers put them.

Wilson: centre = (p + z²/2n) / (1 + z²/n), half = z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n), z =
1.96. t: mean ± t95(n-1)·sd/sqrt(n). Ratio of sums R = Σnum/Σden: SE = sqrt(Σ(num_i -
R·den_i)² / (n(n-1))) / mean(den), then ± t95(n-1)·SE. Rates are cut to [0, 1].
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import read_report, write_guidance_comparison

from pytest_llmtool import intervals, stats
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
from pytest_llmtool.trials import trial_summaries


def test_one_attempt_per_task_is_wilson() -> None:
    # 2 of 3: p = 2/3, z² = 3.8415; denominator = 1 + 3.8415/3 = 2.2805;
    # centre = (0.6667 + 3.8415/6) / 2.2805 = 0.5731;
    # half = 1.96 · sqrt(0.2222/3 + 3.8415/36) / 2.2805 = 1.96 · 0.42518 / 2.2805 = 0.3654.
    found = intervals.pass_rate({"a": [True], "b": [True], "c": [False]})
    assert found is not None
    assert (found.estimate, found.n, found.method, found.small) == (2 / 3, 3, "wilson", True)
    assert (found.low, found.high) == pytest.approx((0.2077, 0.9385), abs=1e-4)


def test_several_attempts_cluster_by_task() -> None:
    # Per-task means 1, .5, .5, .5, 1, .5, .5, .5: mean .625; squared deviations 2·.140625 +
    # 6·.015625 = .375; sd = sqrt(.375/7) = .23146; SE = sd/sqrt(8) = .081832;
    # half = t95(7) · SE = 2.364624 · .081832 = .19350.
    halves = {f"t{i}": [True, False] for i in range(6)}
    attempts = {"whole1": [True, True], "whole2": [True, True], **halves}
    found = intervals.pass_rate(attempts)
    assert found is not None
    assert (found.estimate, found.n, found.method) == (0.625, 8, "clustered-t")
    assert (found.low, found.high) == pytest.approx((0.625 - 0.19350, 0.625 + 0.19350), abs=1e-4)


def test_a_ratio_of_sums_has_the_ratio_estimators_interval() -> None:
    # The oracle's weighted rate on the shared TASKS: (4, 4), (2.5, 2.5), (1, 2).
    # R = 7.5/8.5 = .882353; residuals 4 - 4R = .470588, 2.5 - 2.5R = .294118, 1 - 2R = -.764706;
    # Σ² = .892734; SE = sqrt(.892734 / 6) / (8.5/3) = .385732 / 2.833333 = .136141;
    # half = t95(2) · SE = 4.302653 · .136141 = .585767: [.296586, 1.468] cut to [.296586, 1].
    found = intervals.ratio({"alpha": [(4, 4)], "beta": [(2.5, 2.5)], "gamma": [(1, 2)]})
    assert found is not None
    assert found.estimate == pytest.approx(7.5 / 8.5)
    assert (found.low, found.high, found.n, found.method) == (
        pytest.approx(0.296586, abs=1e-5),
        1.0,
        3,
        "t",
    )


def test_equal_weights_make_the_ratio_interval_the_t_interval_of_the_rates() -> None:
    # rates .4, .5, .6 with max score 2 each: mean .5, sd .1, half = t95(2) · .1 / sqrt(3)
    # = 4.302653 · .057735 = .24841.
    found = intervals.ratio({"a": [(0.8, 2)], "b": [(1.0, 2)], "c": [(1.2, 2)]})
    assert found is not None
    assert (found.estimate, found.low, found.high) == pytest.approx(
        (0.5, 0.25159, 0.74841), abs=1e-5
    )
    same = intervals.mean([0.4, 0.5, 0.6])
    assert same is not None
    assert (same.low, same.high, same.method) == (
        pytest.approx(found.low),
        pytest.approx(found.high),
        "t",
    )


def test_no_spread_at_a_bound_falls_back_to_wilson() -> None:
    # Every task at 100%: a t interval would be [1, 1]; Wilson for 3/3 is [.4385, 1]
    # (centre = (1 + 3.8415/6) / 2.2805 = .7193, half = 1.96·sqrt(3.8415/36)/2.2805 = .2808).
    found = intervals.ratio({"a": [(2, 2)], "b": [(1, 1)], "c": [(3, 3), (1, 1)]})
    assert found is not None
    assert (found.estimate, found.method, found.high) == (1.0, "wilson", 1.0)
    assert found.low == pytest.approx(0.4385, abs=1e-4)
    wilson = stats.wilson(0, 2)
    assert wilson is not None
    assert intervals.mean([0.0, 0.0]) == Interval.of(wilson, "wilson")


def test_tasks_without_a_denominator_are_left_out_and_nothing_is_none() -> None:
    found = intervals.ratio({"calls": [(1, 2)], "none": [(0, 0)]})
    assert found is not None and found.n == 1
    assert (found.low, found.high) == (0.5, 0.5)  # one task: the point, flagged small
    assert intervals.ratio({"none": [(0, 0)]}) is None
    assert intervals.pass_rate({}) is None


def test_shown_compactly_with_a_star_when_small() -> None:
    small = Interval(estimate=0.8, low=0.67, high=0.89, n=10, method="wilson")
    assert intervals.show(small) == "80% [67\u201389%]*"
    large = small.model_copy(update={"n": 50})
    assert intervals.show(large) == "80% [67\u201389%]"
    assert intervals.show(large, 0.81) == "81% [67\u201389%]"
    assert intervals.show(None, 0.5) == "50%"
    diff = Interval(estimate=0.12, low=-0.031, high=0.2, n=40, method="t")
    assert intervals.show_difference(diff) == "+12 [-3, +20]"


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
    assert s.pass_rate_ci is not None and s.pass_rate_ci.method == "wilson"
    assert (s.pass_rate_ci.estimate, s.pass_rate_ci.n) == (2 / 3, 3)
    # weighted rate: rates 1, 0, 1 with equal weights: the t interval, mean 2/3, n 3
    assert s.overall_rate_ci is not None and s.overall_rate_ci.method == "t"
    assert s.overall_rate_ci.estimate == pytest.approx(s.overall_rate)
    # tool calls, per task: 2/2, 1/2, 1/1: R = 4/5 (the printed 80%); residuals 2 - 1.6 = .4,
    # 1 - 1.6 = -.6, 1 - .8 = .2; Σ² = .56; SE = sqrt(.56/6)/(5/3) = .18330;
    # half = 4.302653 · .18330 = .78868: cut to [.01132, 1].
    ci = s.tool_call_success_ci
    assert ci is not None and ci.estimate == pytest.approx(0.8) == s.tool_call_success_rate
    assert (ci.low, ci.high) == (pytest.approx(0.8 - 0.78868, abs=1e-4), 1.0)
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
    assert (s.pass_rate_ci.method, s.pass_rate_ci.n) == ("clustered-t", 2)
    assert s.pass_rate_ci.estimate == 0.75
    assert (s.overall_rate_ci.method, s.overall_rate_ci.n) == ("clustered-t", 2)


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
    # pass@1 per task 2/3, 1, 1/3: mean 2/3, sd 1/3, half = 4.302653 · (1/3)/sqrt(3) = .82805:
    # cut to [0, 1]. pass@2 per task: A 1 - C(1,2)/C(3,2) = 1, B 1, C 1 - C(2,2)/C(3,2) = 2/3:
    # mean 8/9, sd = sqrt((2·(1/9)² + (2/9)²)/2) = .19245, half = 4.302653 · .19245/sqrt(3)
    # = .47807: [.41082, 1].
    outcomes = [("A", "m", p) for p in (True, True, False)]
    outcomes += [("B", "m", True)] * 3 + [("C", "m", p) for p in (True, False, False)]
    s = trial_summaries(outcomes, trials=3)["m"]
    one, two = s.pass_at_k_ci[1], s.pass_at_k_ci[2]
    assert (one.estimate, one.low, one.high, one.method) == (
        pytest.approx(2 / 3),
        0.0,
        1.0,
        "clustered-t",
    )
    assert two.estimate == pytest.approx(s.pass_at_k[2]) == pytest.approx(8 / 9)
    assert (two.low, two.high) == (pytest.approx(0.41082, abs=1e-4), 1.0)
    assert set(s.pass_hat_k_ci) == {1, 2}


# --------------------------------------------------------------------------- end to end


def test_report_and_terminal_carry_the_intervals(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-report=out")
    summary = read_report(pytester)["by_model"]["oracle"]
    # alpha, beta pass, gamma fails: Wilson 2/3 (see above); the weighted rate as above.
    assert summary["pass_rate_ci"]["method"] == "wilson"
    assert summary["pass_rate_ci"]["low"] == pytest.approx(0.2077, abs=1e-4)
    assert summary["overall_rate_ci"]["low"] == pytest.approx(0.296586, abs=1e-5)
    assert summary["overall_rate_ci"]["small"] is True
    # the figures before intervals are unchanged
    assert summary["pass_rate"] == 2 / 3 and summary["overall_rate"] == 7.5 / 8.5
    result.stdout.fnmatch_lines(
        [
            "Pass rate*67% [[]21\u201394%[]][*]",
            "Overall rate*88% [[]30\u2013100%[]]*",
            "[*] n < 30: wide interval",
            "Healthy profile (seed 000):",
            "  [[]oracle[]] 4/5 criteria met; not met: overall rate > 90% (88%)",
        ]
    )
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "| Pass rate | 67% \\[21\u201394%\\]* |" in markdown
    assert "\\* n &lt; 30: wide interval" in markdown
    assert "## Healthy Profile" in markdown


def test_scenario_pass_and_gate_rates_carry_intervals(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_guidance_comparison(project)
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    s = read_report(pytester)["scenario_summary"]["oracle"]
    # passes 1 of 2 items: Wilson; gates 3/4 and 4/4: R = 7/8, residuals -.5, .5, SE =
    # sqrt(.5/2)/4 = .125, half = 12.7062 · .125 = 1.588: cut to [0, 1].
    assert (s["pass_rate_ci"]["method"], s["pass_rate_ci"]["estimate"]) == ("wilson", 0.5)
    gates = s["gate_pass_rate_ci"]
    assert (gates["estimate"], gates["low"], gates["high"], gates["n"]) == (0.875, 0, 1, 2)
    result.stdout.fnmatch_lines(["Model*Passed*Pass rate*Gates*Gate pass rate", "oracle*1/2*"])
