"""Plugin behaviour, driven through pytester: collection, outcomes, summary and reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import TASKS, read_report, write_dataset


def _scores(report: dict[str, Any]) -> dict[str, tuple[float, float]]:
    return {
        f"{r['task_id']}[{r['model']}]": (r["score"]["score"], r["score"]["max_score"])
        for r in report["results"]
    }


def test_collects_one_item_per_task_and_model(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--collect-only", "-q", "--llm-model=oracle,nop")
    result.stdout.fnmatch_lines(
        [
            "data.jsonl::alpha[[]oracle]",
            "data.jsonl::alpha[[]nop]",
            "data.jsonl::beta[[]oracle]",
            "data.jsonl::beta[[]nop]",
            "data.jsonl::gamma[[]oracle]",
            "data.jsonl::gamma[[]nop]",
            "data.jsonl::delta[[]oracle]",
            "data.jsonl::delta[[]nop]",
            "*8 tests collected*",
        ]
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_oracle_scores_exactly(
    pytester: pytest.Pytester, dataset: Path, workers: list[str]
) -> None:
    result = pytester.runpytest(*workers, "--llm-report=out")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    report = read_report(pytester)
    assert _scores(report) == {
        "alpha[oracle]": (4.0, 4.0),
        "beta[oracle]": (2.5, 2.5),
        "gamma[oracle]": (1.0, 2.0),
    }
    summary = report["by_model"]["oracle"]
    assert summary["total_tasks"] == 3
    assert summary["total_passed"] == 2
    assert summary["total_score"] == 7.5
    assert summary["total_max_score"] == 8.5
    assert summary["overall_rate"] == pytest.approx(7.5 / 8.5)
    # alpha: 2 calls, beta: 1, gamma: 1; turns are calls + the final stop turn.
    assert summary["total_tool_calls"] == 4
    assert summary["tool_calls_ok"] == 4
    assert summary["total_turns"] == 7
    assert summary["natural_stops"] == 3
    # (the intervals beside the rates are tested in test_intervals.py)
    categories = {
        name: {k: v for k, v in c.items() if not k.endswith("_ci")}
        for name, c in summary["by_category"].items()
    }
    assert categories == {
        "files": {"tasks": 1, "passed": 1, "score": 4.0, "max_score": 4.0, "rate": 1.0},
        "text": {"tasks": 2, "passed": 1, "score": 3.5, "max_score": 4.5, "rate": 3.5 / 4.5},
    }
    assert report["summary"] == summary


def test_nop_scores_exactly(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-model=nop", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=3)
    report = read_report(pytester)
    assert _scores(report) == {
        "alpha[nop]": (0.0, 4.0),
        "beta[nop]": (1.5, 2.5),
        "gamma[nop]": (0.0, 2.0),
        "delta[nop]": (1.0, 1.0),
    }
    summary = report["by_model"]["nop"]
    assert (summary["total_tool_calls"], summary["total_turns"]) == (0, 4)
    assert summary["tool_call_success_rate"] == 0.0


def test_serial_and_xdist_give_the_same_summary(pytester: pytest.Pytester, dataset: Path) -> None:
    def summaries(*args: str) -> dict[str, Any]:
        pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", *args)
        report = read_report(pytester)
        timing = {"total_duration_ms", "avg_duration_ms"}
        return {
            model: {k: v for k, v in s.items() if k not in timing}
            for model, s in [("all", report["summary"]), *report["by_model"].items()]
        }

    assert summaries() == summaries("-n", "2")


def test_failure_message_lists_failed_checks_then_a_table(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("-k", "gamma")
    result.stdout.fnmatch_lines(
        [
            "*_ task gamma[[]oracle] _*",
            "1/2 checks failed: file_contains:/in/c.txt:zzz",
            "turns: 2, tool calls: 1 (0 with non-zero exit), natural stop: yes",
            "",
            "PASS  exit_code:0                  expected 0, got 0",
            "FAIL  file_contains:/in/c.txt:zzz  'zzz' not found in /in/c.txt",
        ]
    )


def test_report_json_carries_the_documented_fields(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-report=out")
    report = read_report(pytester)
    assert set(report) == {
        "schema_version",
        "metadata",
        "summary",
        "by_model",
        "results",
        "tool_modes",
        "errors",
        "scenarios",
        "scenario_summary",
        "optimization_results",
        "optimization",
        "harbor_results",
        "harbor",
        "harbor_variants",
        "trials",
        "task_rule",
        "task_verdicts",
        "early_stop",
        "judge_when",
        "judge_calls_saved",
        "extensions",
        "budget",
        "comparisons",
        "diagnostics",
        "baseline",
        "gate",
        "stopped",
        "partial",
        "setups",
    }
    # What the name resolved to: an offline agent has no endpoint and no parameters.
    assert report["metadata"]["models"] == [
        {
            "name": "oracle",
            "provider": "offline",
            "model_id": "oracle",
            "endpoint": None,
            "params": None,
            "resolved": True,
            "protocol": None,
            "client": None,
            "headers": [],
            "api_key_env": None,
            "reasoning": None,
            "digest": None,
            "agent": None,
            "agent_version": None,
        }
    ]
    alpha = next(r for r in report["results"] if r["task_id"] == "alpha")
    assert alpha["model"] == "oracle"
    assert alpha["category"] == "files"
    assert alpha["nodeid"] == "data.jsonl::alpha[oracle]"
    assert alpha["scripting"] is None  # a bash task; scripting-tool ones: test_scripting.py
    assert [c["check"] for c in alpha["score"]["results"]] == [
        "exit_code:0",
        "file_exists:/out/b.txt",
        "stdout_contains:2",
    ]
    trace = alpha["trace"]
    for field in (
        "messages",
        "tool_calls",
        "tool_call_count",
        "turns",
        "last_tool_response",
        "natural_stop",
        "total_input_tokens",
        "total_output_tokens",
        "duration_ms",
        "llm_calls",
        "base_context",
        "context_growth_avg",
    ):
        assert field in trace, field
    assert trace["tool_calls"][1] == {
        "commands": "wc -l < /out/b.txt",
        "stdout": "2\n",
        "stderr": "",
        "exit_code": 0,
    }
    assert trace["last_tool_response"] == trace["tool_calls"][1]
    assert [c["tool_calls_made"] for c in trace["llm_calls"]] == [1, 1, 0]
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Summary" in markdown
    assert "## By Category" in markdown
    assert "### gamma [oracle]: FAIL" in markdown
    assert "| FAIL | `file_contains:/in/c.txt:zzz` | 1 | 'zzz' not found in /in/c.txt |" in markdown


def test_bad_lines_error_with_file_and_line_and_the_rest_runs(pytester: pytest.Pytester) -> None:
    lines: list[Any] = [
        "# a comment, then a blank line",
        "",
        TASKS[1],
        "{not json",
        {**TASKS[0], "expectations": [{"check": "no_such_check:1"}]},
        {**TASKS[2], "id": "beta"},
        {**TASKS[0], "expectations": [{"check": "stdout_regex:(unclosed"}]},
        {k: v for k, v in TASKS[0].items() if k != "prompt"},
        TASKS[0],
    ]
    write_dataset(pytester, lines)
    result = pytester.runpytest("--llm-report=out", "-rE")
    result.assert_outcomes(passed=2, errors=5)
    result.stdout.fnmatch_lines_random(
        [
            "*data.jsonl:4: not valid JSON*",
            "*data.jsonl:5: expectations.0.check: unknown check type 'no_such_check'*",
            "*data.jsonl:6: duplicate task id 'beta' (first defined on line 3)*",
            "*data.jsonl:7: expectations.0.check: stdout_regex pattern '(unclosed' does not "
            "compile*",
            "*data.jsonl:8: prompt: Field required*",
        ]
    )
    report = read_report(pytester)
    assert report["summary"]["errors"] == 5
    assert report["summary"]["total_tasks"] == 2
    assert list(report["by_model"]) == ["oracle"]
    assert report["by_model"]["oracle"]["errors"] == 0
    assert {e["nodeid"] for e in report["errors"]} == {
        f"data.jsonl::line{n}" for n in (4, 5, 6, 7, 8)
    }


def test_keyword_and_category_marker_selection(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--strict-markers", "-m", "text", "--llm-model=oracle,nop")
    result.assert_outcomes(passed=1, failed=3)
    result = pytester.runpytest("-k", "alpha and nop", "--llm-model=oracle,nop")
    result.assert_outcomes(failed=1)
    result = pytester.runpytest("-m", "llm(category='files')", "--llm-model=nop")
    result.assert_outcomes(failed=1)


def test_last_failed_reruns_only_the_failures(pytester: pytest.Pytester, dataset: Path) -> None:
    """Regression test: pytest 9.2 mismatches structured node ids of custom items on --lf."""
    pytester.runpytest("--llm-model=oracle,nop").assert_outcomes(passed=3, failed=4, skipped=1)
    result = pytester.runpytest("--lf", "--llm-model=oracle,nop")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*run-last-failure: rerun previous 4 failures*"])
    result.stdout.no_fnmatch_line("*not in selected tests*")


def test_scripting_tool_tasks_run_scripted_by_default(pytester: pytest.Pytester) -> None:
    tool = {"name": "get", "description": "d", "schema": {}, "tags": [], "category": "c"}
    solution = {"scripted": "get", "baseline": [{"tool": "get"}]}
    tooled = {**TASKS[1], "tools": [{**tool, "mock": "hello"}], "solution": solution}
    write_dataset(pytester, [tooled, TASKS[0]])
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*::beta[[]oracle-scripted[]] PASSED*", "*::alpha[[]oracle[]] PASSED*"]
    )


def test_other_jsonl_files_are_not_collected(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", results='{"task_id": "x", "passed": true}\n')
    pytester.makefile(".jsonl", events="not json at all\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_dataset_patterns_name_datasets(pytester: pytest.Pytester, dataset: Path) -> None:
    # A file the patterns name is a dataset with no complete task (its lines are errors); one
    # they do not name only by a complete task (data.jsonl).
    write_dataset(pytester, ['{"id": "x", "prompt": "p"}'], name="eval_more")
    write_dataset(pytester, ['{"id": "x", "prompt": "p"}'], name="other")
    result = pytester.runpytest("--collect-only", "-q", "--llm-datasets=eval_*.jsonl")
    result.stdout.fnmatch_lines(["data.jsonl::alpha[[]oracle]", "eval_more.jsonl::line1"])
    result.stdout.fnmatch_lines(["*5 tests collected*"])
    assert "other.jsonl" not in result.stdout.str()


def test_unknown_model_is_a_one_line_usage_error(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-model=oracle,gpt-99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --llm-model: unknown model 'gpt-99'; known models: oracle, nop, haiku, *"
            "anthropic:<model-id>, openai:<model-id>, openai-responses:<model-id>, "
            "gemini:<model-id>"
        ]
    )
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("value", ["0", "ten"])
def test_bad_max_turns_is_a_usage_error(
    pytester: pytest.Pytester, dataset: Path, value: str
) -> None:
    result = pytester.runpytest(f"--llm-max-turns={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-max-turns: expected an integer >= 1, got *"])


def test_turn_limit_cuts_the_run_off(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.runpytest("-k", "alpha", "--llm-max-turns=1", "--llm-report=out")
    (alpha,) = read_report(pytester)["results"]
    assert alpha["trace"]["turns"] == 1
    assert alpha["trace"]["natural_stop"] is False
    assert alpha["trace"]["tool_call_count"] == 1


def test_ini_keys_and_command_line_precedence(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeini("[pytest]\nllm_model = nop\nllm_report = from-ini\n")
    pytester.runpytest().assert_outcomes(passed=1, failed=3)
    assert read_report(pytester, "from-ini")["metadata"]["models"][0]["name"] == "nop"
    pytester.runpytest("--llm-model=oracle").assert_outcomes(passed=2, failed=1, skipped=1)


def test_infrastructure_errors_are_counted_apart(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeconftest(
        """
        import pytest
        from pytest_llmtool.sandbox import SandboxError
        from pytest_llmtool.sandbox import vfs

        @pytest.fixture(autouse=True, scope="session")
        def _unused():
            yield

        def pytest_configure(config):
            original = vfs.VfsSandbox.run
            async def run(self, commands):
                if "wc -l" in commands:
                    raise SandboxError("simulated crash")
                return await original(self, commands)
            vfs.VfsSandbox.run = run
            config._llmtool_original_run = original

        def pytest_unconfigure(config):
            vfs.VfsSandbox.run = config._llmtool_original_run
        """
    )
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1, skipped=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*infrastructure error: SandboxError: simulated crash*", "Errors (not scored)*1"]
    )
    report = read_report(pytester)
    assert report["summary"]["errors"] == 1
    assert report["summary"]["total_tasks"] == 2
    assert [e["task_id"] for e in report["errors"]] == ["alpha"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_user_properties_reach_junit_xml(
    pytester: pytest.Pytester, dataset: Path, workers: list[str]
) -> None:
    # Under xdist the controller makes an item's reports share their values (compact.py).
    pytester.runpytest(*workers, "-k", "beta", "--junitxml=out.xml", "-o", "junit_family=xunit1")
    xml = (pytester.path / "out.xml").read_text()
    for prop in (
        'name="model" value="oracle"',
        'name="category" value="text"',
        'name="passed" value="True"',
        'name="score" value="2.5"',
        'name="turns" value="2"',
        'name="natural_stop" value="True"',
    ):
        assert prop in xml


def test_an_items_reports_share_its_keywords_and_properties(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # pytest keeps every report to the end; each copied its item's keywords and properties.
    recorded = pytester.inline_run("--llm-model=oracle", "-p", "no:cacheprovider")
    reports = [r for r in recorded.getreports("pytest_runtest_logreport") if r.user_properties]
    by_item: dict[str, list[pytest.TestReport]] = {}
    for report in reports:
        by_item.setdefault(report.nodeid, []).append(report)
    assert len(by_item) == 3 and all(len(r) == 3 for r in by_item.values())  # setup to teardown
    for setup, call, teardown in by_item.values():
        assert setup.user_properties is call.user_properties is teardown.user_properties
        assert setup.keywords is call.keywords is teardown.keywords
    # A pair that recurs across items is one tuple; the values are the item's own.
    models = [dict(r[0].user_properties)["model"] for r in by_item.values()]
    pairs = [r[0].user_properties[0] for r in by_item.values()]
    assert models == ["oracle"] * 3 and pairs[0] is pairs[1] is pairs[2]
    turns = {nodeid: dict(r[0].user_properties)["turns"] for nodeid, r in by_item.items()}
    assert len(set(turns.values())) > 1  # each item still has its own figures


def test_a_task_is_let_go_once_its_items_have_run(pytester: pytest.Pytester, dataset: Path) -> None:
    # pytest keeps every item to the end; a task held by them all was a large run's biggest
    # cost. Two models share each task: it goes when both have run, and the reports still
    # name its category.
    pytester.makeconftest(
        """
        import gc, weakref
        from pytest_llmtool.run.items import LlmItem

        tasks = []
        seen = {}

        def pytest_collection_finish(session):
            works = {id(i.work): i.work for i in session.items if isinstance(i, LlmItem)}
            tasks.extend(weakref.ref(w) for w in works.values())

        def pytest_runtest_logfinish(nodeid):
            gc.collect()
            seen[nodeid] = sum(t() is not None for t in tasks)

        def pytest_terminal_summary(terminalreporter):
            terminalreporter.write_line(f"alive: {list(seen.values())} of {len(tasks)}")
        """
    )
    result = pytester.runpytest_subprocess(
        "--llm-model=oracle,nop", "-p", "no:randomly", "--llm-report=out"
    )
    # Items run task by task, each under oracle then nop: a task lives until its nop item ran.
    result.stdout.fnmatch_lines(["alive: [4, 3, 3, 2, 2, 1, 1, 0] of 4"])
    report = read_report(pytester)
    categories = {(r["task_id"], r["category"]) for r in report["results"]}
    assert categories == {
        ("alpha", "files"),
        ("beta", "text"),
        ("gamma", "text"),
        ("delta", "misc"),
    }


def test_the_window_keeps_the_next_items_started_and_no_more(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # Each item starts only what the window newly reaches; the window must still cover the
    # next `--llm-concurrency` items at every step, and nothing past them.
    pytester.makeconftest(
        """
        from pytest_llmtool.run.items import LlmItem

        def pytest_runtest_call(item):
            items = item.session.items
            at = items.index(item)
            started = [n for n, it in enumerate(items) if it._started]
            window = items[: at + 3]  # a task skipped at collection is never started
            expected = [n for n, it in enumerate(window) if not it.get_closest_marker("skip")]
            assert started == expected, (at, started)
        """
    )
    result = pytester.runpytest(
        "--llm-model=oracle,nop", "-k", "oracle", "--llm-concurrency=3", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=2, failed=1, skipped=1)  # gamma fails a check of its own
    assert "AssertionError: (" not in result.stdout.str()


def test_the_reports_kept_to_the_end_are_frozen_before_the_report_is_built(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # The passes over the results set off collections; the run's reports need not be walked.
    pytester.makeconftest(
        """
        import gc
        from pytest_llmtool.report import Writer

        seen = {}

        def pytest_runtest_logreport(report):
            seen["last report"] = gc.get_freeze_count()

        class Probe(Writer):
            def files(self, report, kinds, directory):
                seen["writing"] = gc.get_freeze_count()
                return []

            def terminal(self, report, kinds):
                return [f"frozen: {seen['last report']} then {seen['writing']}"]

        def pytest_llmtool_writers(config):
            return [Probe()]
        """
    )
    result = pytester.runpytest_subprocess("--llm-model=oracle")
    line = next(x for x in result.outlines if x.startswith("frozen: "))
    before, after = (int(n) for n in line.removeprefix("frozen: ").split(" then "))
    assert after > before


def test_a_run_that_ends_its_process_leaves_what_it_froze_frozen(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # CPython's collections at exit would walk it all; a program that calls pytest.main and
    # goes on gets it back.
    pytester.makeconftest(
        """
        import atexit, gc
        atexit.register(lambda: print("at exit frozen:", gc.get_freeze_count()))
        """
    )
    result = pytester.runpytest_subprocess("--llm-model=oracle")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    line = next(x for x in result.outlines if x.startswith("at exit frozen: "))
    assert int(line.removeprefix("at exit frozen: ")) > 0
    program = (
        "import gc, pytest\n"
        "pytest.main(['-q', '-p', 'no:cacheprovider', '--llm-model=oracle', 'data.jsonl'])\n"
        "print('after main frozen:', gc.get_freeze_count())\n"
    )
    ran = pytester.run(sys.executable, "-c", program)
    assert "after main frozen: 0" in ran.outlines


def test_the_pytest_script_is_pytest_s_command_line_too(pytester: pytest.Pytester) -> None:
    script = Path(sys.executable).with_name("pytest")
    if not script.exists():
        pytest.skip(f"no pytest script beside {sys.executable}")
    pytester.makeconftest(
        """
        from pytest_llmtool.run.heap import pytest_is_the_program

        def pytest_report_header():
            return f"the program: {pytest_is_the_program()}"
        """
    )
    pytester.makepyfile("def test_plain():\n    pass\n")
    assert "the program: True" in pytester.run(script).outlines
    assert "the program: True" in pytester.run(sys.executable, "-m", "pytest").outlines
    program = "import pytest; pytest.main([])"
    assert "the program: False" in pytester.run(sys.executable, "-c", program).outlines


def test_the_next_run_of_the_process_gives_back_what_the_last_left_frozen(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from pytest_llmtool.run import heap

    monkeypatch.setattr(heap, "pytest_is_the_program", lambda: True)
    ran = pytester.inline_run("--llm-model=oracle", "data.jsonl")
    ran.assertoutcome(passed=2, failed=1, skipped=1)
    assert gc.get_freeze_count() > 0
    plain = pytester.makepyfile("def test_plain():\n    pass\n")
    pytester.inline_run(plain).assertoutcome(passed=1)  # the plugin stays asleep
    assert gc.get_freeze_count() == 0
    # A run that ends on a usage error while waking freezes nothing.
    pytester.inline_run("--llm-model=oracle", "--llm-concurrency=0", "data.jsonl")
    assert gc.get_freeze_count() == 0
    # Not pytest's command line: given back as the run ends, as before.
    monkeypatch.setattr(heap, "pytest_is_the_program", lambda: False)
    ran = pytester.inline_run("--llm-model=oracle", "data.jsonl")
    ran.assertoutcome(passed=2, failed=1, skipped=1)
    assert gc.get_freeze_count() == 0


def test_what_an_earlier_run_left_frozen_is_collected_before_the_next_run_freezes(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import weakref

    from pytest_llmtool.run import heap

    class Node:
        other: Any = None

    monkeypatch.setattr(heap, "pytest_is_the_program", lambda: True)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only a collection frees it
    gone = weakref.ref(a)
    pytester.inline_run("--llm-model=oracle", "data.jsonl")
    del a, b
    gc.collect()
    assert gone() is not None  # frozen by the run, and left so
    pytester.inline_run("--llm-model=oracle", "data.jsonl")  # waking freezes again
    assert gone() is None
    heap.thaw_left()


def test_collection_pauses_the_collector_and_takes_what_it_left_unreachable() -> None:
    import gc
    import weakref

    from pytest_llmtool.run.heap import paused

    class Node:
        other: Any = None

    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only a collection frees it
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None
    assert gc.isenabled() and gone() is None
    # A collector the user turned off stays off.
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_shared_property_pairs_keep_values_that_are_equal_but_written_apart() -> None:
    from pytest_llmtool.run.compact import ReportSharing

    sharing = ReportSharing()
    first = sharing.pairs([("a", 1), ("b", True), ("c", 1.0), ("d", 0.0), ("e", float("nan"))])
    again = sharing.pairs([("a", True), ("b", 1), ("c", 1), ("d", -0.0), ("e", float("nan"))])
    assert [repr(v) for _, v in again] == ["True", "1", "1", "-0.0", "nan"]
    same = sharing.pairs([("a", 1), ("b", True), ("c", 1.0), ("d", 0.0), ("f", {"x": 1})])
    assert all(x is y for x, y in zip(first[:4], same[:4], strict=True))


def test_summary_section_only_when_there_are_llm_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*llmtool eval summary*")


def test_terminal_summary_tables(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-summary=full", "--llm-model=oracle,nop")
    result.stdout.fnmatch_lines(
        [
            "*= llmtool eval summary =*",
            "Metric*oracle*nop",
            "Bash tasks passed*2/3*1/4",
            "Tool calls (ok/err)*4 (4/0)*0 (0/0)",
            "",
            "Category*oracle*nop",
            # one figure per label: the overall rate, and the tasks passed apart
            "files*overall 100% *, passed 1/1*overall 0% *, passed 0/1",
            "misc*-*overall 100% *, passed 1/1",
            "text*overall 78% *, passed 1/2*overall 33% *, passed 0/2",
        ]
    )


def test_interrupted_run_still_writes_its_report(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.makeconftest(
        """
        def pytest_runtest_setup(item):
            if item.name.startswith("gamma"):
                raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest("--llm-report=out", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = read_report(pytester)
    assert {r["task_id"] for r in report["results"]} == {"alpha", "beta"}
    assert report["metadata"]["exit_status"] == int(pytest.ExitCode.INTERRUPTED)


def test_runs_without_xdist_installed(pytester: pytest.Pytester, dataset: Path) -> None:
    pytester.runpytest("-p", "no:xdist").assert_outcomes(passed=2, failed=1, skipped=1)


BLOCK_XDIST = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("xdist", "execnet"):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NotInstalled())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_the_plugin_runs_without_pytest_xdist_installed(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest-xdist is optional (the `dev` extra): a plain install must load and run. Only
    # this plugin is loaded, as in an environment where xdist and execnet are absent.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    script = pytester.makepyfile(block_xdist=BLOCK_XDIST)
    result = pytester.run(
        sys.executable,
        str(script),
        "-p",
        "pytest_llmtool.plugin",
        "-p",
        "no:cacheprovider",
        "data.jsonl",
        "--llm-max-cost=1",
    )
    assert result.ret == 1, result.stdout.str()  # gamma fails on purpose
    result.stdout.fnmatch_lines(["*1 failed, 2 passed, 1 skipped*"])
