"""The Inspect log says what the other outputs say: the answer the viewer's ANSWER column
shows, the sample's time pytest (and so pytest-html and JUnit) reports, and each tool result
as the text the model was sent.

Each log is read back with `inspect_ai.log.read_eval_log`, as `inspect view` reads it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import TASKS, read_report, write_dataset

inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed")

from inspect_ai.log import EvalLog  # noqa: E402
from inspect_ai.model import ChatMessageTool  # noqa: E402

# Records the duration pytest reports for each item's setup, where the plugin puts the time
# its run took (the call and teardown add pytest's own microseconds).
DURATIONS = """
import json

SEEN = {}


def pytest_runtest_logreport(report):
    if report.when == "setup":
        SEEN[report.nodeid] = report.duration


def pytest_sessionfinish(session):
    with open("durations.json", "w") as out:
        json.dump(SEEN, out)
"""

FAILING = {
    "id": "failing",
    "category": "text",
    "prompt": "Read /in/none.txt.",
    "expectations": [{"check": "exit_code:0"}],
    "solution": ["cat /in/none.txt"],
}


def run(pytester: pytest.Pytester) -> tuple[EvalLog, dict[str, Any], dict[str, float]]:
    write_dataset(pytester, [TASKS[0], TASKS[1], FAILING])
    pytester.makeconftest(DURATIONS)
    pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=oracle", "--llm-inspect-log=logs",
        "--llm-report=out",
    )  # fmt: skip
    (path,) = sorted((pytester.path / "logs").glob("*.eval"))
    durations = json.loads((pytester.path / "durations.json").read_text())
    return inspect_log.read_eval_log(str(path)), read_report(pytester), durations


def test_the_answer_column_shows_the_agents_last_reply(pytester: pytest.Pytester) -> None:
    log, _, _ = run(pytester)
    for sample in log.samples or []:
        assert sample.output.completion == "Done."
        assert sample.scores
        # The viewer takes the ANSWER of whichever scorer is selected.
        assert {s.answer for s in sample.scores.values()} == {"Done."}


def test_a_samples_time_is_the_duration_pytest_reports(pytester: pytest.Pytester) -> None:
    log, report, durations = run(pytester)
    run_ms = {r["nodeid"]: r["run_ms"] for r in report["results"]}
    times = {s.metadata["nodeid"]: s.total_time for s in log.samples or []}
    assert set(times) == set(durations) == set(run_ms)
    for nodeid, seconds in times.items():
        assert seconds == durations[nodeid] == run_ms[nodeid] / 1000
        # The item's whole run, which holds the agent's conversation.
        (result,) = [r for r in report["results"] if r["nodeid"] == nodeid]
        assert seconds * 1000 >= result["trace"]["duration_ms"] - 1


def test_a_tool_result_is_the_text_the_model_was_sent(pytester: pytest.Pytester) -> None:
    log, report, _ = run(pytester)
    sent = {
        r["nodeid"]: [
            block["content"]
            for message in r["trace"]["messages"]
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
        for r in report["results"]
    }
    shown = {
        s.metadata["nodeid"]: [m.text for m in s.messages if isinstance(m, ChatMessageTool)]
        for s in log.samples or []
    }
    assert shown == sent
    by_task = {nodeid.split("::")[1].split("[")[0]: texts for nodeid, texts in shown.items()}
    # A command that printed nothing: the model was told so, in these words.
    assert by_task["alpha"] == ["(no output)", "2\n"]
    (failed,) = by_task["failing"]
    assert failed.startswith("STDERR: cat: ") and failed.endswith("Exit code: 1")
