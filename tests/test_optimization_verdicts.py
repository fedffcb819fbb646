"""Optimization verdicts (issue 35, item 1): a pass needs the speedup's whole 95% interval above
`min_speedup`, so the do-nothing agent's noise never passes; no interval is no pass; and the
benchmark phases of items never overlap, serially or under xdist."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from helpers import attempt_metrics, read_report, schema_errors, task, write_project, write_task

from pytest_llmtool.kinds.optimization import metrics, report
from pytest_llmtool.kinds.optimization.run import LOCK_NAME, headline, host_lock, lock_directory
from pytest_llmtool.records import (
    GateResult,
    OptimizationResult,
    PytestSummary,
    SpeedupInterval,
)

EXAMPLES = Path(__file__).parent.parent / "examples" / "optimization"


@pytest.fixture
def private_lock(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A benchmark lock of the test's own (in-process and in xdist workers): other runs on
    the machine do not hold the test up."""
    private = pytester.mkdir("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("TMPDIR", str(private))
    return private / f"pytest-llmtool-{os.getuid()}" / LOCK_NAME


def _result(speedup: float | None, ci: tuple[float, float] | None) -> OptimizationResult:
    interval = None
    if ci is not None:
        interval = SpeedupInterval(
            estimate=speedup or 1.0, low=ci[0], high=ci[1], n=3, method="combined-log-t"
        )
    metrics = attempt_metrics(
        pytest_summary=PytestSummary(passed=3), task_speedup=speedup, task_speedup_ci=interval
    )
    return OptimizationResult(
        nodeid="opt.yaml::faster[nop]",
        model="nop",
        task_id="faster",
        category="toy",
        agent="nop:nop",
        min_speedup=1.5,
        metrics=metrics,
        artifacts="",
        duration_ms=1,
    )


def test_a_point_speedup_above_min_speedup_with_its_lower_bound_below_is_no_pass() -> None:
    noise = _result(1.79, (0.66, 3.85))  # what the nop printed as a PASS
    assert noise.metrics.success and not noise.passed
    assert noise.model_dump(mode="json")["passed"] is False  # report.json says the same
    assert headline(noise) == (
        "speedup 1.79x [0.66, 3.85]: its 95% interval's lower bound is not above 1.50x"
    )
    _, rows = report.result_rows([noise])
    assert rows[0][-1] == "FAIL"
    clear = _result(2.5, (1.6, 3.9))
    assert clear.passed and clear.model_dump(mode="json")["passed"] is True
    assert report.result_rows([clear])[1][0][-1] == "PASS"


def test_an_agent_that_changed_nothing_never_passes_whatever_its_noise_reads() -> None:
    """At min_speedup 1 the interval rule alone lets an untouched copy's noise through about
    once in 40: the nop's result says it changed nothing, and that is never a pass."""
    lucky = _result(2.5, (1.6, 3.9)).model_copy(update={"unchanged": True})
    assert lucky.metrics.success and not lucky.passed
    assert lucky.model_dump(mode="json")["passed"] is False
    assert headline(lucky).endswith(
        "the agent changed no file of the project: that is noise, not a pass"
    )
    assert report.result_rows([lucky])[1][0][-1] == "FAIL"


def test_a_speedup_without_an_interval_is_no_pass_and_says_why() -> None:
    unknown = _result(4.0, None)  # one round, or rounds without spread
    assert unknown.metrics.success and not unknown.passed
    assert "has no 95% interval" in headline(unknown)
    assert "not a pass" in headline(unknown)
    assert report.result_rows([unknown])[1][0][-1] == "FAIL"


def test_rounds_without_spread_give_a_task_no_interval() -> None:
    # every round 4x: a point, not an interval, which would pass any min_speedup below 4x
    assert metrics.task_speedup_interval([([1.0, 1.0], [0.25, 0.25])]) is None
    noisy = metrics.task_speedup_interval([([1.0, 1.1], [0.25, 0.26])])
    assert noisy is not None and noisy.low < 4.0 < noisy.high
    # one steady benchmark beside a noisy one: the task still has an interval
    both = metrics.task_speedup_interval([([1.0, 1.0], [0.25, 0.25]), ([1.0, 1.1], [0.25, 0.26])])
    assert both is not None and both.low < both.high


def test_the_interval_and_the_point_must_both_clear_min_speedup() -> None:
    # the interval estimate (paired rounds) and the ratio of medians can differ a little
    assert not _result(1.45, (1.55, 2.0)).passed
    assert headline(_result(1.45, (1.55, 2.0))).endswith("not above 1.50x")


def test_the_legend_and_the_html_say_the_rule() -> None:
    legend = " ".join(report.LEGEND)
    assert "95% interval lies above the task's min_speedup" in legend
    assert "no interval: not a pass" in legend
    html = "".join(report.html_details(_result(1.79, (0.66, 3.85))))
    assert "a pass needs its 95% interval above 1.5x)" in html and "outcome FAIL" in html


def test_a_broken_trajectory_assertion_fails_a_clear_speedup_and_the_legend_says_so() -> None:
    """Issue 38's guardrails on top of the rule: they can fail a pass, never make one."""
    forbidden = GateResult(
        gate_type="trajectory",
        identifier=r"trajectory(forbidden:\bcp\s)",
        passed=False,
        message="call 1 (bash): cp fast/rows.py pkg/rows.py",
    )
    broken = _result(4.0, (3.0, 5.0)).model_copy(update={"trajectory": [forbidden]})
    assert broken.metrics.success and not broken.passed
    assert report.result_rows([broken])[1][0][-1] == "FAIL"
    assert "broke none of the task's trajectory assertions (whatever the speedup)" in " ".join(
        report.LEGEND
    )
    html = "".join(report.html_details(broken))
    assert "a pass needs its 95% interval above 1.5x and every trajectory assertion held" in html
    kept = [forbidden.model_copy(update={"passed": True})]
    assert broken.model_copy(update={"trajectory": kept}).passed
    noise = _result(1.79, (0.66, 3.85)).model_copy(update={"trajectory": kept})
    assert not noise.passed  # every assertion held: the interval still decides


# Times by copy and run: the nop copy always 1.0 s; the agent's untouched copy once 0.25 s and
# then 1.0 s. Medians 1.0 / 0.625 give a point speedup of 1.6x, above 1.5x, from one fast run.
NOISY = """\
n=$(ls -d "$LLMTOOL_RESULTS"/../bench-* | wc -l)
case "$LLMTOOL_RESULTS" in
  *reference*) t=1.0 ;;
  *) if [ "$n" = 1 ]; then t=0.25; else t=1.0; fi ;;
esac
echo "{\\"pkg.work\\": [$t]}" > "$LLMTOOL_RESULTS/times.json"
"""
# Every agent run 4x faster than every nop run: a speedup with no spread, so no interval.
STEADY = """\
case "$LLMTOOL_RESULTS" in *reference*) t=1.0 ;; *) t=0.25 ;; esac
echo "{\\"pkg.work\\": [$t]}" > "$LLMTOOL_RESULTS/times.json"
"""

# Every run of every copy 1.0 s: no speedup, a failure under any rule.
UNCHANGED = """echo '{"pkg.work": [1.0]}' > "$LLMTOOL_RESULTS/times.json"\n"""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (NOISY, "*speedup 1.60x [[]*]: its 95% interval's lower bound is not above 1.50x*"),
        (STEADY, "*speedup 4.00x has no 95% interval*not a pass (1.50x)*"),
    ],
)
def test_a_nop_whose_noise_clears_min_speedup_fails(
    pytester: pytest.Pytester, private_lock: Path, command: str, said: str
) -> None:
    write_project(pytester.path)
    bench = {"command": command, "format": "plain", "output": "times.json", "rounds": 2}
    write_task(pytester.path, task(benchmarks=bench, min_speedup=1.5))
    result = pytester.runpytest("--llm-model=nop", "--llm-report=out", "--html=report.html")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([said])
    (attempt,) = read_report(pytester)["optimization_results"]
    assert attempt["metrics"]["success"] and attempt["passed"] is False
    assert schema_errors(read_report(pytester), closed=True) == []
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "### faster_work [nop:nop]: FAIL" in markdown
    assert "outcome FAIL" in (pytester.path / "report.html").read_text()


def test_one_round_is_refused_naming_the_file(
    pytester: pytest.Pytester, private_lock: Path
) -> None:
    write_project(pytester.path)
    bench = {"command": "true", "format": "plain", "output": "times.json", "rounds": 1}
    write_task(pytester.path, task(benchmarks=bench), name="one.optimization")
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*one.optimization.yaml*rounds*1 is less than the minimum of 2*"])


def test_the_example_task_fails_for_the_nop(pytester: pytest.Pytester, private_lock: Path) -> None:
    shutil.copytree(EXAMPLES, pytester.path / "optimization")
    example = pytester.path / "optimization" / "faster_parse_rows.yaml"
    result = pytester.runpytest(str(example), "--llm-model=nop", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (attempt,) = read_report(pytester)["optimization_results"]
    ci = attempt["metrics"]["task_speedup_ci"]
    assert attempt["metrics"]["success"] and attempt["passed"] is False
    assert attempt["unchanged"] is True
    assert ci is None or ci["low"] <= attempt["min_speedup"]
    result.stdout.fnmatch_lines(["FAILED *faster_parse_rows.yaml::faster_parse_rows?nop? - *"])


# Loaded by the pytester run and each xdist worker: every benchmark run appends its start and
# end, with its task, to phases.log (O_APPEND: whole lines, in the order they happened).
RECORDER = """\
import os
from pathlib import Path

from pytest_llmtool.kinds.optimization import run

LOG = Path(__file__).with_name("phases.log")
_original = run.benchmark_once


def _note(line):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


async def _recorded(task, copy):
    _note(f"start {task.name}")
    try:
        return await _original(task, copy)
    finally:
        _note(f"end {task.name}")


def pytest_configure(config):
    run.benchmark_once = _recorded


def pytest_unconfigure(config):
    run.benchmark_once = _original
"""


def _phases(log: Path) -> list[str]:
    """The tasks in the order their benchmark phases ran, after checking that no two runs
    overlapped (each start is followed by its own end)."""
    events = [line.split() for line in log.read_text().splitlines()]
    assert len(events) % 2 == 0
    for (start, a), (end, b) in zip(events[::2], events[1::2], strict=True):
        assert (start, end, a) == ("start", "end", b), events
    order = [name for _, name in events[::2]]
    return [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]


@pytest.mark.parametrize("spread", [["--llm-concurrency=4"], ["-n", "2"]])
def test_benchmark_phases_of_items_never_overlap(
    pytester: pytest.Pytester, private_lock: Path, spread: list[str]
) -> None:
    write_project(pytester.path)
    pytester.makeconftest(RECORDER)
    bench = {"command": UNCHANGED, "format": "plain", "output": "times.json", "rounds": 3}
    names = ["faster_a", "faster_b", "faster_c"]
    for name in names:
        write_task(pytester.path, task(name=name, benchmarks=bench), name=name)
    result = pytester.runpytest("--llm-model=nop", *spread)
    result.assert_outcomes(failed=3)
    phases = _phases(pytester.path / "phases.log")
    # each item's phase is one block: 3 copies x 3 rounds, no other item's run in between
    assert sorted(phases) == names, phases
    assert private_lock.is_file()


def test_an_item_waiting_for_the_lock_can_be_cancelled_at_once(tmp_path: Path) -> None:
    """Ctrl-C while another run measures: the waiting item stops, leaving no thread blocked
    in `flock` (which would hold up the exit until the other run's measurement ended)."""
    held = os.open(lock_directory(tmp_path) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    threads = threading.active_count()
    loop = asyncio.new_event_loop()
    try:

        async def take() -> None:
            async with host_lock(tmp_path):
                raise AssertionError("the lock is held elsewhere")

        waiting = loop.create_task(take())
        for _ in range(5):  # into the wait
            loop.run_until_complete(asyncio.sleep(0))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            loop.run_until_complete(waiting)
        assert threading.active_count() == threads
    finally:
        os.close(held)
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
