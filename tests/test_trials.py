"""Repeated trials (`--llm-trials`): the pure aggregation, and trials end to end.

Every pass@k and pass^k below is worked out by hand from the estimators:
pass@k = 1 - C(n-c, k)/C(n, k) and pass^k = C(c, k)/C(n, k) per task (n attempts, c passed),
averaged over the tasks with at least k scored attempts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import PROMPT, TASKS, read_report, scenario, write_dataset, write_scenario

from pytest_llmtool.records import EvalReport, RunMetadata, TaskResult, TrialSummary
from pytest_llmtool.report.markdown import markdown_report
from pytest_llmtool.report.terminal import Screen, terminal_lines, trial_lines
from pytest_llmtool.stats.trials import attempt_of, trial_summaries

# --------------------------------------------------------------------------- the aggregation


def test_pass_at_k_pass_hat_k_and_flaky_by_hand() -> None:
    # 3 trials: A passes 2 of 3, B 3 of 3.
    outcomes = [("A", "m", True), ("A", "m", False), ("A", "m", True)]
    outcomes += [("B", "m", True)] * 3
    (summary,) = trial_summaries(outcomes, trials=3).values()
    assert summary.tasks == 2
    assert (summary.attempts, summary.passed) == (6, 5)
    # pass@1 = mean(2/3, 3/3); pass@2 = mean(1 - C(1,2)/C(3,2), 1) = mean(1, 1)
    assert summary.pass_at_k == pytest.approx({1: (2 / 3 + 1) / 2, 2: 1.0})
    # pass^1 = pass@1; pass^2 = mean(C(2,2)/C(3,2), C(3,2)/C(3,2)) = mean(1/3, 1)
    assert summary.pass_hat_k == pytest.approx({1: (2 / 3 + 1) / 2, 2: (1 / 3 + 1) / 2})
    assert summary.tasks_at_k == {1: 2, 2: 2}
    assert summary.flaky == ["A"]


def test_tasks_short_of_k_attempts_are_left_out_of_that_k() -> None:
    # 4 trials asked: A was scored 4 times (2 passed), B only twice (1 passed, 2 errored).
    outcomes = [("A", "m", p) for p in (True, False, True, False)]
    outcomes += [("B", "m", True), ("B", "m", False)]
    summary = trial_summaries(outcomes, trials=4)["m"]
    # ks for 4 trials: 1, 2, 4.
    # pass@1: mean(2/4, 1/2); pass@2: A 1 - C(2,2)/C(4,2) = 5/6, B 1 - C(1,2)/C(2,2) = 1;
    # pass@4: A only, n - c = 2 < 4 so 1.
    assert summary.pass_at_k == pytest.approx({1: 0.5, 2: (5 / 6 + 1) / 2, 4: 1.0})
    # pass^2: A C(2,2)/C(4,2) = 1/6, B C(1,2)/C(2,2) = 0; pass^4: A C(2,4)/C(4,4) = 0.
    assert summary.pass_hat_k == pytest.approx({1: 0.5, 2: (1 / 6 + 0) / 2, 4: 0.0})
    assert summary.tasks_at_k == {1: 2, 2: 2, 4: 1}
    assert summary.flaky == ["A", "B"]


def test_models_are_kept_apart_in_order_of_first_appearance() -> None:
    outcomes = [
        ("t", "second", False),
        ("t", "first", True),
        ("t", "second", False),
        ("t", "first", False),
        ("z", "first", True),
        ("z", "first", False),
    ]
    summaries = trial_summaries(outcomes, trials=2)
    assert list(summaries) == ["second", "first"]
    assert summaries["second"].pass_at_k == {1: 0.0, 2: 0.0}
    assert summaries["second"].flaky == []
    # both tasks 1 of 2: pass@2 = 1 - C(1,2)/C(2,2) = 1, pass^2 = C(1,2)/C(2,2) = 0
    assert summaries["first"].pass_at_k == {1: 0.5, 2: 1.0}
    assert summaries["first"].pass_hat_k == {1: 0.5, 2: 0.0}
    assert summaries["first"].flaky == ["t", "z"]


def test_no_outcomes_no_summaries() -> None:
    assert trial_summaries([], trials=3) == {}


def _result(nodeid: str, trial: int) -> TaskResult:
    return TaskResult.model_validate(
        {
            "nodeid": nodeid,
            "model": "haiku",
            "trial": trial,
            "task_id": "x",
            "category": "c",
            "score": {"task_id": "x", "results": [], "score": 0, "max_score": 0},
            "trace": {},
        }
    )


@pytest.mark.parametrize(
    ("nodeid", "trial", "task"),
    [
        ("d.jsonl::alpha[haiku-t2]", 1, "d.jsonl::alpha[haiku]"),
        ("s.yaml::notes[haiku-v1.md-t10]", 9, "s.yaml::notes[haiku-v1.md]"),
        # one trial: no suffix to take off
        ("d.jsonl::alpha[haiku]", 0, "d.jsonl::alpha[haiku]"),
        # only the item's own trial suffix goes, not a task id that looks like one
        ("d.jsonl::x-t2[haiku-t1]", 0, "d.jsonl::x-t2[haiku]"),
    ],
)
def test_attempt_of_drops_only_the_trial_suffix(nodeid: str, trial: int, task: str) -> None:
    assert attempt_of(_result(nodeid, trial)) == task


def _report(trials: int, summaries: dict[str, dict[str, TrialSummary]]) -> EvalReport:
    meta = RunMetadata(
        plugin="0",
        pytest="0",
        python="3",
        models=[],
        max_turns=10,
        trials=trials,
        started="s",
        finished="f",
        exit_status=1,
    )
    return EvalReport(metadata=meta, trials=summaries)


def test_terminal_and_markdown_show_the_trials_and_keep_names_inert() -> None:
    hostile = "d.jsonl::<img src=x onerror=alert(1)>`|[haiku]"
    outcomes = [(hostile, "haiku", True), (hostile, "haiku", False), ("ok", "haiku", True)]
    report = _report(2, {"bash": trial_summaries(outcomes, trials=2)})
    lines = trial_lines(report)
    assert lines[0] == "Trials (2 attempts per task):"
    assert lines[0] in terminal_lines(report, [], Screen("full"))
    assert lines[1].split() == [
        "Kind",
        "Model",
        "Tasks",
        "Passed",
        "pass@1",
        "pass@2",
        "pass^2",
        "Flaky",
    ]
    # "ok" was scored once: it counts for pass@1 only. pass@1 = mean(1/2, 1);
    # pass@2 over the flaky task alone = 1 - C(1,2)/C(2,2) = 1, pass^2 = C(1,2)/C(2,2) = 0.
    # pass@1's interval over 2 tasks (a t interval would run past 0 and 1) is Wilson's with
    # continuity correction at the effective size, at least one: [1%, 98%]; pass@2's, one
    # task at 1, is that for 1/1: [5%, 100%], never the point [100%, 100%].
    assert lines[2].split() == [
        "bash",
        "haiku",
        "2",
        "2/3",
        "75%",
        "[1\u201398%]*",
        "100%",
        "[5\u2013100%]*",
        "0%",
        "1",
    ]
    assert any("count 1 of 2 tasks" in line for line in lines)
    assert lines[-1] == f"  [bash haiku] {hostile}"

    markdown = markdown_report(report, [])
    assert "## Trials" in markdown
    assert (
        "| bash | haiku | 2 | 2/3 | 75% \\[1\u201398%\\]\\* "
        "| 100% \\[5\u2013100%\\]\\* | 0% | 1 |" in markdown
    )
    # the name appears once, in a code span (never HTML) that its backtick cannot close
    assert markdown.count("<img") == 1
    assert "- bash, haiku: ``d.jsonl::<img src=x onerror=alert(1)>`\\|[haiku]``" in markdown


def test_one_trial_has_no_trials_section() -> None:
    report = _report(1, {})
    assert not any("Trials" in line for line in terminal_lines(report, [], Screen("full")))
    assert "## Trials" not in markdown_report(report, [])


# --------------------------------------------------------------------------- end to end


SERIAL_AND_XDIST = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])


def _trials(report: dict[str, Any]) -> dict[str, Any]:
    """`report.json`'s trials without the intervals (test_intervals.py tests those)."""
    return {
        kind: {
            model: {k: v for k, v in s.items() if not k.endswith("_ci")}
            for model, s in by_model.items()
        }
        for kind, by_model in report["trials"].items()
    }


def _outcomes(report: dict[str, Any], key: str = "results") -> dict[str, bool]:
    def passed(r: dict[str, Any]) -> bool:
        if key == "scenarios":
            return bool(r["evaluation"]["outcome"] == "pass")
        return all(c["passed"] for c in r["score"]["results"])

    return {r["nodeid"]: passed(r) for r in report[key]}


def test_trials_make_one_item_each_and_k_selects_one(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("--collect-only", "-q", "--llm-trials=3", "-k", "trial2")
    result.stdout.fnmatch_lines(
        [
            "data.jsonl::alpha[[]oracle-t2]",
            "data.jsonl::beta[[]oracle-t2]",
            "data.jsonl::gamma[[]oracle-t2]",
            "data.jsonl::delta[[]oracle-t2]",
            "*4/12 tests collected (8 deselected)*",
        ]
    )


@SERIAL_AND_XDIST
def test_offline_agents_over_trials(
    pytester: pytest.Pytester, dataset: Path, workers: list[str]
) -> None:
    result = pytester.runpytest(
        "--llm-summary=full",
        *workers,
        "--llm-model=oracle,nop",
        "--llm-trials=3",
        "--llm-report=out",
    )
    # oracle: alpha, beta pass and gamma fails, 3 times each, delta skipped; nop: delta passes.
    result.assert_outcomes(passed=9, failed=12, skipped=3)
    report = read_report(pytester)
    assert sorted((r["task_id"], r["model"], r["trial"]) for r in report["results"]) == sorted(
        (task, model, trial)
        for model, tasks in (("oracle", "abg"), ("nop", "abgd"))
        for task in ("alpha", "beta", "gamma", "delta")
        if task[0] in tasks
        for trial in range(3)
    )
    # Deterministic agents: every task's attempts agree, so pass@k = pass^k = pass@1.
    assert _trials(report) == {
        "bash": {
            "oracle": {
                "trials": 3,
                "tasks": 3,
                "attempts": 9,
                "passed": 6,
                "pass_at_k": {"1": 2 / 3, "2": 2 / 3},
                "pass_hat_k": {"1": 2 / 3, "2": 2 / 3},
                "tasks_at_k": {"1": 3, "2": 3},
                "flaky": [],
            },
            "nop": {
                "trials": 3,
                "tasks": 4,
                "attempts": 12,
                "passed": 3,
                "pass_at_k": {"1": 0.25, "2": 0.25},
                "pass_hat_k": {"1": 0.25, "2": 0.25},
                "tasks_at_k": {"1": 4, "2": 4},
                "flaky": [],
            },
        }
    }
    result.stdout.fnmatch_lines(["Trials (3 attempts per task):", "Kind*Model*pass@1*"])


def test_one_trial_leaves_the_trials_section_empty(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    assert read_report(pytester)["trials"] == {}
    assert "Trials (" not in result.stdout.str()


@SERIAL_AND_XDIST
def test_scenario_trials_with_the_offline_agents(
    pytester: pytest.Pytester, project: Path, workers: list[str]
) -> None:
    write_scenario(project, scenario())
    result = pytester.runpytest(
        *workers, "--llm-model=oracle,nop", "--llm-trials=2", "--llm-report=out"
    )
    result.assert_outcomes(passed=2, failed=2)
    report = read_report(pytester)
    assert sorted((r["model"], r["trial"]) for r in report["scenarios"]) == [
        ("nop", 0),
        ("nop", 1),
        ("oracle", 0),
        ("oracle", 1),
    ]
    trials = _trials(report)["scenario"]
    assert trials["oracle"]["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert trials["oracle"]["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert trials["nop"]["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert trials["oracle"]["flaky"] == trials["nop"]["flaky"] == []


# Task beta ("Say hello.") is answered well by the first and third conversations and refused
# by the second; alpha is always answered well.
HELLO = [Turn(tool_calls=["echo hello"]), Turn(text="Done.")]
REFUSE = [Turn(text="I would rather not.")]
COPY = [
    Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt && wc -l < /out/b.txt"]),
    Turn(text="Copied; it has 2 lines."),
]
# beta 2 of 3, alpha 3 of 3 (the brief's example): pass@1 = mean(2/3, 1);
# pass@2 = mean(1 - C(1,2)/C(3,2), 1) = 1; pass^2 = mean(C(2,2)/C(3,2), 1) = (1/3 + 1) / 2.
FLAKY_BETA = {
    "pass_at_k": {"1": (2 / 3 + 1) / 2, "2": 1.0},
    "pass_hat_k": {"1": (2 / 3 + 1) / 2, "2": (1 / 3 + 1) / 2},
    "flaky": ["data.jsonl::beta[{model}]"],
}


def _script_flaky(server: FakeLLMServer) -> None:
    server.script_attempts(TASKS[1]["prompt"], [HELLO, REFUSE, HELLO])
    server.script(TASKS[0]["prompt"], COPY)


def _conversations(server: FakeLLMServer, prompt: str) -> list[list[dict[str, Any]]]:
    """The messages (system prompt aside) of every request for `prompt` (Anthropic and Chat
    Completions)."""
    found = []
    for request in server.requests:
        messages = [m for m in request.body["messages"] if m["role"] != "system"]
        user = next(m for m in messages if m["role"] == "user")
        content = user["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        if text == prompt:
            found.append(messages)
    return found


def _approx(expected: dict[str, Any], actual: dict[str, Any]) -> None:
    for key, value in expected.items():
        assert actual[key] == (pytest.approx(value) if key != "flaky" else value), key


@SERIAL_AND_XDIST
@pytest.mark.parametrize("model", ["haiku", "gpt-5.2"])
def test_a_provider_task_whose_attempts_disagree_is_flaky(
    pytester: pytest.Pytester, server: FakeLLMServer, workers: list[str], model: str
) -> None:
    write_dataset(pytester, TASKS[:2])
    _script_flaky(server)
    result = pytester.runpytest(
        "--llm-summary=full", *workers, f"--llm-model={model}", "--llm-trials=3", "--llm-report=out"
    )
    result.assert_outcomes(passed=5, failed=1)
    report = read_report(pytester)
    summary = _trials(report)["bash"][model]
    assert (summary["tasks"], summary["attempts"], summary["passed"]) == (2, 6, 5)
    _approx({**FLAKY_BETA, "flaky": [f"data.jsonl::beta[{model}]"]}, summary)
    # Each trial is its own conversation: three start from the prompt alone, and every later
    # request carries only its own conversation's history.
    beta = _conversations(server, TASKS[1]["prompt"])
    assert sum(len(messages) == 1 for messages in beta) == 3
    assert len(beta) == 3 + 2  # two answered conversations take a second request each
    assert all(len(messages) == 3 for messages in beta if len(messages) > 1)
    result.stdout.fnmatch_lines(
        ["Flaky tasks (attempts disagree):", f"  [[]bash {model}] data.jsonl::beta[[]{model}]"]
    )
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert f"- bash, {model}: `data.jsonl::beta[{model}]`" in markdown


def test_replay_gives_each_trial_its_own_recording(
    pytester: pytest.Pytester, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(pytester, TASKS[:2])
    _script_flaky(server)
    args = ["--llm-model=haiku", "--llm-trials=3", "--llm-report=out"]
    pytester.runpytest(*args, "--llm-record=rec").assert_outcomes(passed=5, failed=1)
    recorded = read_report(pytester)
    # Which trial meets the refusal depends on which conversation starts second.
    (failed,) = [nodeid for nodeid, passed in _outcomes(recorded).items() if not passed]
    refused = int(failed.removeprefix("data.jsonl::beta[haiku-t").removesuffix("]")) - 1
    calls = Counter(
        (record["task_id"], record["trial"])
        for record in map(json.loads, map(Path.read_text, (pytester.path / "rec").rglob("*.json")))
    )
    # every call filed under its trial: two per answered conversation, one for the refusal
    assert calls == {(task, t): 2 for task in ("alpha", "beta") for t in range(3)} | {
        ("beta", refused): 1
    }

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    served = len(server.requests)
    pytester.runpytest(*args, "--llm-replay=rec").assert_outcomes(passed=5, failed=1)
    replayed = read_report(pytester)
    assert len(server.requests) == served
    # Trial t replays trial t: the refused attempt fails again, and only it.
    assert _outcomes(replayed) == _outcomes(recorded)
    assert _trials(replayed) == _trials(recorded)
    _approx(
        {**FLAKY_BETA, "flaky": ["data.jsonl::beta[haiku]"]}, _trials(replayed)["bash"]["haiku"]
    )


@SERIAL_AND_XDIST
def test_a_scenario_whose_attempts_disagree_is_flaky(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer, workers: list[str]
) -> None:
    write_scenario(project, scenario())
    both = [Turn(tool_calls=["note add milk", "note add eggs"]), Turn(text="Added.")]
    one = [Turn(tool_calls=["note add milk"]), Turn(text="Added milk.")]
    server.script_attempts(PROMPT, [both, one])
    result = pytester.runpytest(*workers, "--llm-model=haiku", "--llm-trials=2", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    assert sorted(_outcomes(report, "scenarios").values()) == [False, True]
    summary = _trials(report)["scenario"]["haiku"]
    # one scenario, 1 of 2: pass@2 = 1 - C(1,2)/C(2,2) = 1, pass^2 = C(1,2)/C(2,2) = 0
    assert summary["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert summary["pass_hat_k"] == {"1": 0.5, "2": 0.0}
    assert summary["flaky"] == ["scenario.yaml::add_notes[haiku]"]
    assert sum(len(m) == 1 for m in _conversations(server, PROMPT)) == 2


def test_an_errored_attempt_is_not_scored_and_its_task_leaves_the_larger_k(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    write_dataset(pytester, TASKS[1:2])
    server.script(TASKS[1]["prompt"], HELLO)
    server.fail_next(Fault.unauthorized())  # one attempt's first call: an infrastructure error
    result = pytester.runpytest(
        "--llm-summary=full", "--llm-model=haiku", "--llm-trials=2", "--llm-report=out"
    )
    result.assert_outcomes(passed=1, errors=1)
    summary = _trials(read_report(pytester))["bash"]["haiku"]
    assert (summary["tasks"], summary["attempts"], summary["passed"]) == (1, 1, 1)
    # beta has one scored attempt: pass@1 = 1/1; it cannot count towards k = 2.
    assert summary["pass_at_k"] == {"1": 1.0}
    assert summary["tasks_at_k"] == {"1": 1}
    result.stdout.fnmatch_lines(
        [
            "bash  haiku      1     1/1  100% [5\u2013100%]*       -       -      0",
            "  pass@2 and pass^2 of haiku (bash) count 0 of 1 tasks: *",
        ]
    )
