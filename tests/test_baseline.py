"""`--llm-baseline` and `--llm-fail-on-regression`: the paired comparison by hand, then the gate
end to end on the 47 example tasks (the oracle passes all of them; a task whose solution is
replaced by `true` fails, which stands in for a model that got worse at it)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TASKS, read_report, write_dataset

from pytest_llmtool.history.gate import EXIT_REGRESSION, EXIT_UNDECIDED, Threshold
from pytest_llmtool.stats.baseline import compare, compare_model, verdict
from pytest_llmtool.stats.outcomes import Outcome

EXAMPLES = Path(__file__).parents[1] / "examples" / "bash_tasks.jsonl"

# --------------------------------------------------------------------------- by hand


def _rows(passed: list[bool | None], model: str = "m", trial: int = 0) -> list[Outcome]:
    return [
        Outcome(
            kind="bash",
            nodeid=f"d.jsonl::t{n}[{model}]",
            task=f"d.jsonl::t{n}[{model}]",
            task_id=f"t{n}",
            model=model,
            trial=trial,
            category="c",
            passed=p,
            rate=None if p is None else float(p),
        )
        for n, p in enumerate(passed)
    ]


def test_a_drop_within_noise_is_no_detectable_change() -> None:
    # 10 tasks, all passed before; now t0, t1, t2 fail.
    change = compare_model(_rows([False] * 3 + [True] * 7), _rows([True] * 10), "m")
    # McNemar's score test: 3 pass -> fail, 0 fail -> pass: z = -sqrt 3, p = .08326; the
    # interval is Tango's, the one that test inverts, so it holds 0 too.
    interval = change.pass_rate_change
    assert interval is not None
    assert (interval.estimate, interval.n, interval.method) == (-0.3, 10, "tango")
    assert interval.low < 0 < interval.high
    assert change.mcnemar_p == pytest.approx(0.0832645, abs=1e-6)
    assert change.worse == ["d.jsonl::t0[m]", "d.jsonl::t1[m]", "d.jsonl::t2[m]"]
    assert change.better == []
    # Detectable: Connor's n(d, psi = max(.3, d)) = 10 solved for d: psi = d = .6158,
    # (1.96·sqrt .6158 + .841621·sqrt(.6158 - .3792))^2 / .3792 = 10.
    assert change.detectable_change == pytest.approx(0.6158377, abs=1e-6)
    assert (change.baseline_pass_rate, change.current_pass_rate) == (1.0, 0.7)
    assert not change.regressed
    # psi = .3, d = .3: (1.96·sqrt .3 + .841621·sqrt(.3 - .09))^2 / .09 = 23.7
    assert change.verdict == (
        "no detectable change: McNemar p = 0.083 with 10 shared tasks; about 24 would detect -30 pp"
    )


def test_a_real_drop_is_a_regression() -> None:
    # 30 tasks, all passed before; now 8 fail: z = -sqrt 8, p = .004678.
    change = compare_model(_rows([False] * 8 + [True] * 22), _rows([True] * 30), "m")
    interval = change.pass_rate_change
    assert interval is not None
    assert interval.high < 0 and interval.low > -1
    assert change.mcnemar_p == pytest.approx(0.0046777, abs=1e-6)
    assert change.regressed
    assert change.verdict == "regression: -27 pp, McNemar p = 0.0047 with 30 shared tasks"


def test_flips_both_ways_are_noise_even_when_the_estimate_fell() -> None:
    # t0..t2 went pass -> fail, t3 fail -> pass, over 47 tasks: net -2.
    before = _rows([True] * 3 + [False] + [True] * 43)
    after = _rows([False] * 3 + [True] + [True] * 43)
    change = compare_model(after, before, "m")
    # McNemar 3 vs 1: z = -2/sqrt 4 = -1, p = .3173.
    assert change.mcnemar_p == pytest.approx(0.3173105, abs=1e-6)
    interval = change.pass_rate_change
    assert interval is not None
    assert interval.low < 0 < interval.high
    assert not change.regressed
    assert (len(change.worse), len(change.better)) == (3, 1)


def test_added_removed_and_errored_tasks_are_left_out() -> None:
    # Now: t0 pass, t1 errored, t2 pass (new). Before: t0 pass, t1 pass, t3 fail (gone).
    now = [_rows([True])[0], _rows([True, None])[1], _rows([True, None, True])[2]]
    before = _rows([True, True, None, False])
    before = [before[0], before[1], before[3]]
    change = compare_model(now, before, "m")
    assert change.tasks == 1  # only t0 is scored in both
    assert change.added == ["d.jsonl::t2[m]"]
    assert change.removed == ["d.jsonl::t3[m]"]
    # One shared task: no spread to measure, nothing detectable, never a regression.
    assert change.detectable_change is None
    assert not change.regressed


def test_trials_are_averaged_per_task_and_skip_mcnemar() -> None:
    # Two attempts per task. Before: both tasks 2/2. Now: t0 1/2, t1 0/2.
    now = _rows([True, False], trial=0) + _rows([False, False], trial=1)
    before = _rows([True, True], trial=0) + _rows([True, True], trial=1)
    change = compare_model(now, before, "m")
    # Task means: t0 0.5 - 1 = -0.5, t1 0 - 1 = -1: mean -0.75, sd 0.35355, SE 0.25,
    # t(1) = 12.706205: [-3.9266, 2.4266] is what a rate change cannot be (the issue's
    # "-60.0% [-128.0%, +8.0%]"): cut to [-1, 1]. The paired t test: t = -3, p = .2048.
    interval = change.pass_rate_change
    assert interval is not None
    assert interval.method == "paired-t"
    assert (interval.estimate, interval.low, interval.high) == (-0.75, -1.0, 1.0)
    assert change.mcnemar_p == pytest.approx(0.2048328, abs=1e-6)
    assert not change.regressed
    # (t95(n - 1) + .841621) · .35355 / sqrt(n) <= .75 first at n = 4: (3.182 + .842) ·
    # .17678 = .711, while n = 3 gives (4.303 + .842) · .20412 = 1.050.
    assert change.verdict == (
        "no detectable change: paired t p = 0.2 with 2 shared tasks; about 4 would detect -75 pp"
    )


def test_models_missing_from_the_baseline_are_named() -> None:
    comparison = compare(
        _rows([True]) + _rows([True], model="x"), _rows([True]), ["m", "x"], "last", "run 1"
    )
    assert [c.model for c in comparison.models] == ["m"]
    assert comparison.unmatched == ["x"]
    assert verdict(comparison) == (
        "no detectable change for m on 1 shared task (McNemar p = 1; too few to detect any "
        "change); x: not in the baseline"
    )


# --------------------------------------------------------------------------- end to end


def _examples(pytester: pytest.Pytester, broken: frozenset[int] = frozenset()) -> None:
    """The 47 example tasks; those numbered in `broken` get a solution that does nothing."""
    lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    for n in broken:
        lines[n]["solution"] = ["true"]
    write_dataset(pytester, lines, name="tasks")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_noise_passes_the_gate_with_failing_tasks(pytester: pytest.Pytester) -> None:
    _examples(pytester, broken=frozenset({0, 1, 2}))
    _run(pytester).assert_outcomes(passed=44, failed=3)
    # Three tasks fixed, three others broken: flips both ways.
    _examples(pytester, broken=frozenset({3, 4, 5}))
    result = _run(pytester, "--llm-baseline=last", "--llm-fail-on-regression", "-n", "2")
    result.assert_outcomes(passed=44, failed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*= llmtool baseline =*",
            "baseline: last (history run 1)",
            "oracle*47*94%*94%*+0 pp [[]-*, +*[]]*1*3*3*no detectable change: McNemar p = 1*",
            "llmtool gate held: no detectable change for oracle on 47 shared tasks "
            "(McNemar p = 1; changes under ±16 pp cannot be seen) (exit status 0)",
            "*3 failed, 44 passed*",
        ],
        consecutive=False,
    )


def test_a_real_drop_fails_the_gate_with_its_own_exit_status(pytester: pytest.Pytester) -> None:
    _examples(pytester)
    _run(pytester, "--llm-report=before").assert_outcomes(passed=47)
    _examples(pytester, broken=frozenset(range(12)))
    result = _run(
        pytester,
        "--llm-baseline=before/report.json",
        "--llm-fail-on-regression",
        "--llm-report=out",
    )
    assert result.ret == EXIT_REGRESSION == 6
    # The reason is the last section, after pytest's short summary; then the stats line.
    tail = result.stdout.lines[-3:]
    assert tail[0].startswith("oracle worse (pass -> fail): tasks.jsonl::")
    assert tail[1].startswith(
        "llmtool gate failed: oracle regressed -26 pp [-40, -15] on 47 shared tasks "
        "(McNemar p = 0.00053)"
    )
    assert tail[1].endswith("(exit status 6)")
    assert "12 failed, 35 passed" in tail[2]
    report = read_report(pytester)
    assert report["metadata"]["exit_status"] == 6
    baseline = report["baseline"]
    assert baseline["ref"].endswith("before/report.json")
    assert (baseline["regressed"], baseline["gate"]) == (True, True)
    (change,) = baseline["models"]
    assert (change["tasks"], len(change["worse"]), change["better"]) == (47, 12, [])
    # McNemar 12 vs 0: z = -sqrt 12, p = .000532.
    assert change["mcnemar_p"] == pytest.approx(0.00053200, rel=1e-4)
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Baseline" in markdown
    assert "**Verdict:** oracle regressed -26 pp \\[-40, -15\\] on 47 shared tasks" in markdown


def test_without_the_gate_the_comparison_is_shown_and_pytest_decides(
    pytester: pytest.Pytester,
) -> None:
    _examples(pytester)
    _run(pytester)
    _examples(pytester, broken=frozenset(range(12)))
    result = _run(pytester, "--llm-baseline=1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["baseline: 1 (history run 1)", "oracle*REGRESSION: -26 pp*"])
    result.stdout.no_fnmatch_line("llmtool gate*")


def test_last_skips_runs_of_other_models_and_a_first_run_fails_unless_allowed(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    args = ("--llm-baseline=last", "--llm-fail-on-regression", "--llm-report=out")
    first = _run(pytester, *args)
    # No earlier run: nothing was compared, which the gate does not pass for a pass.
    assert first.ret == EXIT_UNDECIDED == 7
    first.stdout.fnmatch_lines(
        [
            "--llm-baseline=last: no earlier complete run with these models and this dataset",
            "llmtool gate undecided: nothing compared: *--llm-allow-missing-baseline passes a "
            "first run"
            "* (exit status 7)",
        ]
    )
    history_path = pytester.path / ".llmtool" / "history.db"
    history_path.unlink()
    # A first run in CI, allowed: passes though gamma fails.
    allowed = _run(pytester, *args, "--llm-allow-missing-baseline")
    assert allowed.ret == pytest.ExitCode.OK
    _run(pytester, "--llm-model=nop")  # run 2: other models
    third = _run(pytester, *args)
    third.stdout.fnmatch_lines(["baseline: last (history run 1)"])
    assert read_report(pytester)["baseline"]["run_id"] == 1


def _stop_after(pytester: pytest.Pytester, items: int) -> None:
    """A conftest that interrupts the run (as Ctrl-C would) when item `items + 1` starts."""
    pytester.makeconftest(
        f"""
        started = []
        def pytest_runtest_setup(item):
            started.append(item)
            if len(started) > {items}:
                raise KeyboardInterrupt
        """
    )


def test_last_passes_over_a_partial_run_and_the_gate_fails_a_planted_regression(
    pytester: pytest.Pytester,
) -> None:
    _examples(pytester)
    _run(pytester).assert_outcomes(passed=47)  # run 1: complete
    _stop_after(pytester, 4)
    stopped = pytester.runpytest("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert stopped.ret == pytest.ExitCode.INTERRUPTED  # run 2: 4 of 47
    (pytester.path / "conftest.py").unlink()
    _examples(pytester, broken=frozenset(range(12)))
    result = _run(pytester, "--llm-baseline=last", "--llm-fail-on-regression", "--llm-report=out")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "baseline: last (history run 1)",
            "passed over run 2: partial, 4 of 47 items ran (interrupted)",
            "llmtool gate failed: oracle regressed *(exit status 6)",
        ],
        consecutive=False,
    )
    baseline = read_report(pytester)["baseline"]
    assert baseline["passed_over"] == ["run 2: partial, 4 of 47 items ran (interrupted)"]
    assert baseline["models"][0]["tasks"] == 47


def test_last_passes_over_a_run_of_another_dataset(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    _examples(pytester)
    _run(pytester, "tasks.jsonl").assert_outcomes(passed=47)  # run 1
    _run(pytester, "data.jsonl")  # run 2: another dataset
    _examples(pytester, broken=frozenset(range(12)))
    result = _run(pytester, "tasks.jsonl", "--llm-baseline=last", "--llm-fail-on-regression")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(
        [
            "baseline: last (history run 1)",
            "passed over run 2: another dataset (task ids or content differ)",
        ],
        consecutive=False,
    )
    # A changed task (not its reference solution) is another dataset too.
    tasks = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    tasks[0]["prompt"] += " Please."
    write_dataset(pytester, tasks, name="tasks")
    changed = _run(pytester, "tasks.jsonl", "--llm-baseline=last", "--llm-fail-on-regression")
    assert changed.ret == EXIT_UNDECIDED
    changed.stdout.fnmatch_lines(["passed over run 1: another dataset*"], consecutive=False)


def _corrupt(db: Path) -> None:
    db.write_bytes(b"this is not a database" * 200)


def _newer(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_version SET version = 99")


@pytest.mark.parametrize(
    ("damage", "said"), [(_corrupt, "*not a database*"), (_newer, "*version 99 history*")]
)
def test_an_unreadable_history_fails_the_gate(
    pytester: pytest.Pytester, damage: Callable[[Path], None], said: str
) -> None:
    _examples(pytester)
    _run(pytester).assert_outcomes(passed=47)
    damage(pytester.path / ".llmtool" / "history.db")
    _examples(pytester, broken=frozenset(range(30)))
    result = _run(
        pytester, "--llm-baseline=last", "--llm-fail-on-regression", "--llm-allow-missing-baseline"
    )
    # Never "no earlier run", even where a missing baseline would pass.
    assert result.ret == EXIT_UNDECIDED
    result.stdout.fnmatch_lines(
        [
            "llmtool gate undecided: nothing compared: the run history cannot be read: "
            f"{said}(exit status 7)"
        ]
    )


def test_a_baseline_sharing_no_task_fails_the_gate(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    _run(pytester, "data.jsonl", "--llm-report=other")
    _examples(pytester)
    result = _run(
        pytester, "tasks.jsonl", "--llm-baseline=other/report.json", "--llm-fail-on-regression"
    )
    assert result.ret == EXIT_UNDECIDED
    result.stdout.fnmatch_lines(
        [
            "llmtool gate undecided: nothing compared: no shared scored tasks with the baseline "
            "for oracle*"
        ]
    )


def test_fewer_shared_tasks_than_the_run_has_are_stated(pytester: pytest.Pytester) -> None:
    tasks = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    write_dataset(pytester, tasks[:10], name="tasks")
    _run(pytester, "--llm-report=before")
    write_dataset(pytester, tasks, name="tasks")
    result = _run(pytester, "--llm-baseline=before/report.json")
    result.stdout.fnmatch_lines(
        ["oracle: compared 10 of this run's 47 tasks (37 not in the baseline*"],
        consecutive=False,
    )


def test_errors_are_not_hidden_by_the_gate(pytester: pytest.Pytester) -> None:
    tasks = [*TASKS, {**TASKS[1], "id": "broken", "files": {"/x": 1}}]
    write_dataset(pytester, tasks)
    _run(pytester)
    result = _run(pytester, "--llm-baseline=last", "--llm-fail-on-regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "llmtool gate failed: 1 failures or errors besides failing tasks: the gate does not "
            "hide them*"
        ]
    )


def test_an_interrupted_run_keeps_its_exit_status(pytester: pytest.Pytester, dataset: Path) -> None:
    _run(pytester)
    pytester.makeconftest(
        """
        def pytest_runtest_setup(item):
            if item.name.startswith("gamma"):
                raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--llm-baseline=last",
        "--llm-fail-on-regression",
        no_reraise_ctrlc=True,
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--llm-fail-on-regression"], "*--llm-fail-on-regression needs --llm-baseline=REF*"),
        (["--llm-baseline=nothere.json"], "*--llm-baseline: cannot read *nothere.json*"),
        (["--llm-baseline=7"], "*--llm-baseline: no run history at *history.db*"),
        (["--llm-baseline=last", "--llm-history=off"], "*which --llm-history=off disables*"),
        # Once an INTERNALERROR (an int too large for SQLite), and a traceback.
        (["--llm-baseline=99999999999999999999999"], "*--llm-baseline: no run history at*"),
        (["--llm-baseline=²"], "*--llm-baseline: cannot read *²: *No such file*"),
    ],
)
def test_bad_baseline_options_are_usage_errors(
    pytester: pytest.Pytester, dataset: Path, args: list[str], message: str
) -> None:
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_the_gate_switch_takes_no_value_and_its_ini_key_is_checked(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # The bare flag does not swallow the path after it.
    _run(pytester).assert_outcomes(passed=2, failed=1, skipped=1)
    result = _run(pytester, "--llm-baseline=last", "--llm-fail-on-regression", "data.jsonl")
    assert result.ret == pytest.ExitCode.OK
    pytester.makeini("[pytest]\nllm_fail_on_regression = maybe\n")
    result = _run(pytester, "--llm-baseline=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini llm_fail_on_regression: expected true or false*"])


def test_a_baseline_from_a_copied_report(pytester: pytest.Pytester, dataset: Path) -> None:
    _run(pytester, "--llm-report=out")
    shutil.copy(pytester.path / "out" / "report.json", pytester.path / "base.json")
    result = _run(pytester, "--llm-baseline=base.json", "--llm-history=off")
    result.stdout.fnmatch_lines(["baseline: */base.json (*/base.json)", "oracle*3*no detectable*"])


# --------------------------------------------------------------------------- --llm-fail-under


def test_threshold_specs_parse_and_bad_ones_are_refused() -> None:
    plain = Threshold.parse("pass_rate=0.8")
    assert (plain.metric, plain.value, plain.upper, plain.model) == ("pass_rate", 0.8, False, None)
    scoped = Threshold.parse("weighted_rate[model=haiku,category=json,kind=bash]:upper=75%")
    assert (scoped.value, scoped.upper) == (0.75, True)
    assert (scoped.model, scoped.category, scoped.kind) == ("haiku", "json", "bash")
    for bad in ("pass_rate", "speed=0.5", "pass_rate=1.5", "pass_rate=x", "pass_rate[who=a]=0.5"):
        with pytest.raises(pytest.UsageError, match="--llm-fail-under"):
            Threshold.parse(bad)


@pytest.mark.parametrize(
    ("args", "status", "line"),
    [
        # 2 of 3 scored tasks pass: 66.7%, Wilson with continuity correction [12.5%, 98.2%].
        (["--llm-fail-under=pass_rate=0.5"], 0, "*every --llm-fail-under threshold met (1)*"),
        (
            ["--llm-fail-under=pass_rate=0.8"],
            8,
            "*below --llm-fail-under: oracle: pass_rate 67% [[]13\u201398%[]]* < 80%*",
        ),
        (["--llm-fail-under=pass_rate:upper=0.8"], 0, "*threshold met*"),
        (["--llm-fail-under=pass_rate:upper=0.99"], 8, "*pass_rate upper bound 98% < 99%*"),
        # Repeatable; one scope passes (text: beta passes, gamma fails), one fails.
        (
            [
                "--llm-fail-under=pass_rate[category=files]=1",
                "--llm-fail-under=pass_rate[category=text]=0.6",
            ],
            8,
            "*below --llm-fail-under: oracle category text: pass_rate 50%*",
        ),
        (["--llm-fail-under=pass_rate[category=none]=0.5"], 7, "*nothing to judge: oracle*"),
        (["--llm-fail-under=pass_rate[model=nop]=0.5"], 7, "*nothing to judge: nop*"),
    ],
)
def test_fail_under_judges_each_model(
    pytester: pytest.Pytester, dataset: Path, args: list[str], status: int, line: str
) -> None:
    result = _run(pytester, *args, "--llm-history=off")
    assert result.ret == status
    result.stdout.fnmatch_lines([line])


def test_a_bad_threshold_is_a_usage_error(pytester: pytest.Pytester, dataset: Path) -> None:
    result = _run(pytester, "--llm-fail-under=pass_rate=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-fail-under: 'pass_rate=2': the value must be within*"])


def test_a_baseline_of_a_newer_schema_or_a_run_id_too_large_is_refused(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    _run(pytester, "--llm-report=out")
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    (pytester.path / "future.json").write_text(json.dumps({**report, "schema_version": 999}))
    result = _run(pytester, "--llm-baseline=future.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*future.json is a schema 999 report; this pytest-llmtool*"])
    result = _run(pytester, "--llm-baseline=99999999999999999999999")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-baseline: no run 99999999999999999999999 in *"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
