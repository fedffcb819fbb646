"""Optimization tasks end to end: a tiny project, its oracle and nop, measured and scored."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report, schema_errors, task, write_project, write_task


@pytest.fixture
def opt(pytester: pytest.Pytester) -> Path:
    write_project(pytester.path)
    return pytester.path


def test_oracle_is_faster_and_nop_is_unchanged(pytester: pytest.Pytester, opt: Path) -> None:
    write_task(opt, task())
    result = pytester.runpytest(
        "--llm-summary=full", "--llm-model=oracle,nop", "--llm-report=out", "-rA"
    )
    by_agent = {r["agent"]: r for r in read_report(pytester)["optimization_results"]}
    assert [by_agent[a]["unchanged"] for a in ("oracle:oracle", "nop:nop")] == [False, True]
    oracle, nop = by_agent["oracle:oracle"]["metrics"], by_agent["nop:nop"]["metrics"]
    assert oracle["success"] and not oracle["fallback_to_baseline"]
    assert oracle["task_speedup"] > 1.5
    assert oracle["num_valid_benchmarks"] == oracle["num_benchmarks"] == 1
    assert nop["success"] and not nop["fallback_to_baseline"]
    ci = nop["task_speedup_ci"]
    # near 1x, not exactly: run order and caches bias timings by a few percent
    assert ci["n"] == 2 and ci["low"] <= nop["task_speedup"] <= ci["high"]
    assert 0.5 < nop["task_speedup"] < 1.5 and ci["high"] < oracle["task_speedup"]
    assert nop["agent_advantage"] < 0  # the oracle is faster than doing nothing
    result.stdout.fnmatch_lines(["*PASSED*faster_work?oracle?*"])
    summary = read_report(pytester)["optimization"]["by_agent"]
    assert set(summary) == {"oracle:oracle", "nop:nop"}
    assert summary["oracle:oracle"]["mean_success_rate"] == 1.0
    result.stdout.fnmatch_lines(["*Optimization tasks*", "*oracle:oracle*PASS*"])
    assert schema_errors(read_report(pytester), closed=True) == []
    assert "## Optimization by Agent" in (pytester.path / "out" / "report.md").read_text()


def test_an_agent_that_breaks_the_tests_is_reverted(
    pytester: pytest.Pytester, opt: Path, server: FakeLLMServer
) -> None:
    write_task(opt, task())
    prompt = task()["optimization"]["prompt"]
    server.script(prompt, [Turn(tool_calls=["cp broken/rows.py pkg/rows.py"]), Turn(text="ok")])
    result = pytester.runpytest("--llm-model=haiku", "--llm-report=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*reverted to baseline: 1 tests failed*"])
    (run,) = read_report(pytester)["optimization_results"]
    metrics = run["metrics"]
    assert run["agent"] == "builtin:haiku"
    assert metrics["fallback_to_baseline"] and metrics["pytest_failed"]
    assert metrics["task_speedup"] == 1.0
    assert metrics["trajectory_length"] == 2


def test_an_oracle_that_fails_its_tests_is_a_broken_task(
    pytester: pytest.Pytester, opt: Path
) -> None:
    write_task(opt, task(solution={"commands": ["cp broken/rows.py pkg/rows.py"]}))
    result = pytester.runpytest("--llm-model=oracle,nop")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*the task is broken: the reference solution fails its tests (1 failed, 0 errors)*"]
    )


def test_a_benchmark_command_that_fails_is_an_error(pytester: pytest.Pytester, opt: Path) -> None:
    bench = {"command": "exit 3", "format": "plain", "output": "times.json", "rounds": 2}
    write_task(opt, task(benchmarks=bench))
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*benchmark command in the nop copy (exit 3) wrote no times.json*"]
    )


def test_a_zero_time_is_an_error_naming_the_benchmark(pytester: pytest.Pytester, opt: Path) -> None:
    command = """echo '{"pkg.work": [0.0, 1.0]}' > $LLMTOOL_RESULTS/times.json"""
    bench = {"command": command, "format": "plain", "output": "times.json", "rounds": 2}
    write_task(opt, task(benchmarks=bench))
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*benchmark 'pkg.work': time 0.0 is not a positive number*"])


def test_bad_task_files_say_where(pytester: pytest.Pytester, opt: Path) -> None:
    bad = task(project="../elsewhere", benchmarks={"command": "x"})
    write_task(opt, bad, name="bad.optimization")  # named as a task: an error, not left alone
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*bad.optimization.yaml: optimization.benchmarks: 'format' is a required property*"]
    )


SUMMARY_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest tests -q -p no:cacheprovider"


def test_summary_tests_and_two_trials(pytester: pytest.Pytester, opt: Path) -> None:
    tests = {"command": SUMMARY_CMD, "format": "summary"}
    write_task(opt, task(tests=tests))
    result = pytester.runpytest(
        "--llm-summary=full", "--llm-model=oracle,nop", "--llm-trials=2", "--llm-report=out"
    )
    report = read_report(pytester)
    runs = report["optimization_results"]
    assert sorted((r["agent"], r["trial"]) for r in runs) == [
        ("nop:nop", 0),
        ("nop:nop", 1),
        ("oracle:oracle", 0),
        ("oracle:oracle", 1),
    ]
    for r in runs:  # the counts come from pytest's summary line on stdout
        summary = r["metrics"]["pytest_summary"]
        assert (summary["passed"], summary["failed"], summary["errors"]) == (1, 0, 0)
        assert r["metrics"]["success"] and not r["metrics"]["fallback_to_baseline"]
    by_agent = report["optimization"]["by_agent"]
    for agent in ("oracle:oracle", "nop:nop"):
        s = by_agent[agent]
        assert (s["tasks"], s["attempts"]) == (1, 2)
        assert s["mean_success_rate"] == 1.0 == s["accuracy"]
        assert (s["num_benchmarks"], s["num_valid_benchmarks"]) == (2, 2)  # summed over attempts
        assert s["pass_at_k"] == {"2": 1.0}  # FC-Eval's ks for 2 attempts: 2 alone, no 1
        # one task: no interval of the geometric mean over tasks, rather than a point
        assert s["mean_speedup_ci"] is None
    assert by_agent["oracle:oracle"]["mean_speedup"] > 1.5
    assert schema_errors(report, closed=True) == []
    # One task: the mean speedup shows with no interval (and so no small-sample note).
    result.stdout.fnmatch_lines(["*Mean speedup ?95% CI?*", "oracle:oracle*2*x*100%*100%*"])


SNAPSHOT = {"command": "python -c 'from pkg.rows import work; print(work(5))'"}


def _deterministic(report: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """What a rerun must reproduce: everything but the timings, by (task, agent)."""
    found = {}
    for r in report["optimization_results"]:
        m = r["metrics"]
        found[r["task_id"], r["agent"]] = (
            r["nodeid"],
            r["oracle_pytest"],
            m["success"],
            m["fallback_to_baseline"],
            m["pytest_failed"],
            m["snapshot_failed"],
            m["pytest_summary"],
            m["snapshot_summary"],
            m["num_benchmarks"],
            m["num_valid_benchmarks"],
            [(b["name"], b["valid"]) for b in m["per_benchmark_speedups"]],
        )
    return found


def test_serial_and_two_workers_give_the_same_figures(pytester: pytest.Pytester, opt: Path) -> None:
    for name in ("faster_a", "faster_b"):
        write_task(opt, task(name=name, min_speedup=1.5, snapshot=SNAPSHOT), name=name)
    reports, outcomes = {}, {}
    for directory, workers in (("serial", []), ("xdist", ["-n", "2"])):
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "--llm-model=oracle,nop",
            f"--llm-report={directory}",
            f"--junitxml={directory}.xml",
            *workers,
        )
        result.assert_outcomes(passed=2, failed=2)  # oracle above 1.5x, nop not
        reports[directory] = read_report(pytester, directory)
        cases = ElementTree.parse(pytester.path / f"{directory}.xml").iter("testcase")
        outcomes[directory] = sorted(
            ("FAILED" if case.find("failure") is not None else "PASSED", case.get("name", ""))
            for case in cases
        )
    serial, xdist = (_deterministic(reports[d]) for d in ("serial", "xdist"))
    assert serial == xdist
    assert (
        outcomes["serial"]
        == outcomes["xdist"]
        == [
            ("FAILED", "faster_a[nop]"),
            ("FAILED", "faster_b[nop]"),
            ("PASSED", "faster_a[oracle]"),
            ("PASSED", "faster_b[oracle]"),
        ]
    )
    assert set(serial) == {
        (t, a) for t in ("faster_a", "faster_b") for a in ("oracle:oracle", "nop:nop")
    }
    for report in reports.values():
        for r in report["optimization_results"]:
            m = r["metrics"]
            assert m["snapshot_summary"]["status"] == "passed"
            if r["agent"] == "oracle:oracle":
                assert m["task_speedup"] > 1.5
            else:  # timings are noisy: a 95% interval misses 1.0 one time in 20 per item
                assert 0.5 < m["task_speedup"] < 1.5
        by_agent = report["optimization"]["by_agent"]
        assert {a: (s["tasks"], s["attempts"]) for a, s in by_agent.items()} == {
            "oracle:oracle": (2, 2),
            "nop:nop": (2, 2),
        }
        assert by_agent["oracle:oracle"]["mean_speedup"] > 1.5
        nop, nop_ci = by_agent["nop:nop"]["mean_speedup"], by_agent["nop:nop"]["mean_speedup_ci"]
        # a doing-nothing agent sits near 1x; its interval need not hold 1.0 exactly, since
        # run order and caches bias a few percent, but it stays far below the oracle
        assert nop_ci["method"] == "log-t" and 0 < nop_ci["low"] <= nop_ci["estimate"]
        assert nop_ci["estimate"] <= nop_ci["high"] and 0.5 < nop < 1.5
        assert nop_ci["high"] < by_agent["oracle:oracle"]["mean_speedup"]
