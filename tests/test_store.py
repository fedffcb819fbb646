"""The controller's result store: compressed JSON in, models out, one at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_metadata

from pytest_llmtool.records import AgentTrace, EvalReport, TaskResult, TaskScore
from pytest_llmtool.report import report_json
from pytest_llmtool.report.store import ResultStore


def result(n: int) -> TaskResult:
    return TaskResult(
        nodeid=f"d.jsonl::t{n}[m]",
        model="m",
        task_id=f"t{n}",
        category="c",
        score=TaskScore.of(f"t{n}", []),
        trace=AgentTrace(turns=n),
    )


def test_results_come_back_equal_in_order_and_as_often_as_read() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    originals = [result(n) for n in range(5)]
    for r in originals[:3]:
        store.append(r)
    for r in originals[3:]:  # as the controller gets them: JSON from the worker
        store.append_json(json.dumps(r.model_dump(mode="json")))
    assert len(store) == 5
    assert list(store) == originals and list(store) == originals
    assert store[4] == originals[4] and store[1:3] == originals[1:3]
    assert [json.loads(t)["task_id"] for t in store.json_texts()] == [f"t{n}" for n in range(5)]


def test_a_reader_along_sees_every_result_of_the_next_whole_pass_once() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for n in range(4):
        store.append(result(n))
    seen: list[str] = []
    done = store.read_along(lambda r: seen.append(r.task_id))
    assert not done() and seen == []  # nothing read yet
    assert [r.task_id for r in store] == ["t0", "t1", "t2", "t3"]
    assert done() and seen == ["t0", "t1", "t2", "t3"]
    list(store)  # a later pass is its own
    assert seen == ["t0", "t1", "t2", "t3"]


def test_a_pass_stopped_early_leaves_its_reader_along_undone() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for n in range(4):
        store.append(result(n))
    seen: list[str] = []
    done = store.read_along(lambda r: seen.append(r.task_id))
    assert next(iter(store)).task_id == "t0"  # a reader that stopped at the first result
    assert not done() and seen == ["t0"]  # only part: its owner must read them itself
    list(store)
    assert not done() and seen == ["t0"]  # that pass was its only one


def test_a_reader_along_that_raises_costs_the_pass_nothing_but_itself() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for n in range(3):
        store.append(result(n))
    seen: list[str] = []

    def fails(r: TaskResult) -> None:
        raise ValueError(r.task_id)

    broken = store.read_along(fails)
    done = store.read_along(lambda r: seen.append(r.task_id))
    assert [r.task_id for r in store] == ["t0", "t1", "t2"]  # the pass went on
    assert not broken() and done() and seen == ["t0", "t1", "t2"]


def test_an_empty_store_has_nothing_to_read_along() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    assert store.read_along(lambda r: None)()


def test_a_result_is_kept_smaller_than_its_json() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    r = result(1)
    store.append(r)
    assert len(store._blobs[0]) < len(r.model_dump_json())


def test_report_json_streams_stored_results_into_the_same_record() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for n in range(3):
        store.append(result(n))
    streamed = EvalReport(metadata=run_metadata())
    streamed.results = store
    in_memory = EvalReport(metadata=run_metadata(), results=[result(n) for n in range(3)])
    text = "".join(report_json(streamed))
    assert json.loads(text) == json.loads(in_memory.model_dump_json())
    assert text == "".join(report_json(in_memory))
    # One result per line, so a large report can be read with line tools.
    assert sum(line.startswith('    {"nodeid"') for line in text.splitlines()) == 3


def test_report_json_of_a_report_without_results_is_valid() -> None:
    report = EvalReport(metadata=run_metadata())
    assert json.loads("".join(report_json(report))) == json.loads(report.model_dump_json())


SHARING_PROBE = """
import json, pytest
seen = {}

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    seen.setdefault(report.nodeid, []).append(report)

def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    out = {}
    for nodeid, reports in seen.items():
        first, *rest = reports
        out[nodeid] = {
            "whens": [r.when for r in reports],
            "equal": all(
                r.user_properties == first.user_properties and r.keywords == first.keywords
                for r in rest
            ),
            "shared": all(
                r.user_properties is first.user_properties and r.keywords is first.keywords
                for r in rest
            ),
            "properties": len(first.user_properties),
        }
    with open("sharing.json", "w") as f:
        json.dump(out, f)
"""


def test_under_xdist_an_items_reports_share_their_equal_values(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.makeconftest(SHARING_PROBE)
    result = pytester.runpytest("-n", "2", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    seen = json.loads((pytester.path / "sharing.json").read_text())
    ran = {k: v for k, v in seen.items() if v["properties"]}
    assert len(ran) == 3
    for item in ran.values():
        assert item["whens"] == ["setup", "call", "teardown"]
        # Equal as sent, one copy kept.
        assert item["equal"] and item["shared"]


def test_results_that_differ_from_the_first_in_every_way_come_back_whole() -> None:
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    store.append(result(0))
    other = result(1).model_copy(update={"category": "é\u2028" * 10_000, "model": "x" * 40_000})
    store.append(other)
    assert list(store) == [result(0), other]


def test_sharing_keeps_property_values_that_are_equal_but_written_differently(
    pytester: pytest.Pytester,
) -> None:
    # 1 == True == 1.0 and 0.0 == -0.0, but JUnit writes each its own way.
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture(params=[1, True, 1.0, 0.0, -0.0])
        def value(request, record_property):
            record_property("v", request.param)  # at setup, as our items do

        def test_it(value):
            pass
        """
    )
    pytester.runpytest("-n", "2", "-p", "no:randomly", "--junitxml=out.xml").assert_outcomes(
        passed=5
    )
    xml = (pytester.path / "out.xml").read_text()
    values = sorted(xml.count(f'name="v" value="{v}"') for v in ("1", "True", "1.0", "0.0", "-0.0"))
    assert values == [1, 1, 1, 1, 1]
