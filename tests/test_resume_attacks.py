"""Issue 34, third attack: `--llm-resume` kept the old verdict of a task edited since (a
check that can no longer pass stayed PASS), and a journal on a full disk killed the run
(INTERNALERROR, a second traceback from `close()`, no summary, report or history).

A result is now kept only when the fingerprint journaled with it (`run/digests.py`: the task
as loaded, the files and folders it reads, the model as resolved) is this run's; and the
journal's `OSError`s are said once while the run goes on. The disk is made full for real:
`/dev/full` answers every write with ENOSPC, put where the journal (or a report) writes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import TASKS, read_report, scenario, task, write_dataset, write_project, write_scenario
from helpers import write_task as write_optimization

from pytest_llmtool.kinds.optimization.kind import OptimizationKind
from pytest_llmtool.kinds.optimization.load import load_task
from pytest_llmtool.kinds.scenario.kind import ScenarioKind
from pytest_llmtool.kinds.scenario.load import Scenario, load_scenario
from pytest_llmtool.records import ModelParams
from pytest_llmtool.run.digests import TaskDigests, model_digests
from pytest_llmtool.run.journal import JournalWriter, read_journal
from pytest_llmtool.run.resume import changed

FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
NO_SPACE = os.strerror(28)  # ENOSPC: "No space left on device"


def journal_of(pytester: pytest.Pytester) -> Path:
    return pytester.path / "out" / "results.jsonl"


def results_in(path: Path) -> list[str]:
    return [e.nodeid for e in read_journal(path).entries if e.type != "setup"]


def edit_task(pytester: pytest.Pytester, task_id: str, **changes: Any) -> None:
    """Rewrite `data.jsonl` with one task changed."""
    tasks = [{**t, **changes} if t["id"] == task_id else t for t in TASKS]
    write_dataset(pytester, tasks)


# Defect 3: a resume keeps verdicts of tasks that changed.


@XDIST
def test_a_check_edited_to_one_that_cannot_pass_is_run_again(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str]
) -> None:
    args = ["-k", "alpha or beta", "--llm-report=out"]
    assert pytester.runpytest(*args).ret == pytest.ExitCode.OK
    alpha = TASKS[0]
    edit_task(pytester, "alpha", expectations=[{"check": "stdout_contains:no such output"}])

    result = pytester.runpytest(*xdist, *args, "--llm-resume")
    # Before: "resumed 2 items ... 0 run now", exit 0, alpha still PASS.
    result.assert_outcomes(failed=1, deselected=0 if xdist else 3)
    result.stdout.fnmatch_lines(
        [
            "llmtool: resumed 1 item from * (1 passed, 0 failed), 1 rerun because its task "
            "or model changed; 0 run now"
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = read_report(pytester)
    passed = {
        r["task_id"]: all(c["passed"] for c in r["score"]["results"]) for r in report["results"]
    }
    assert passed == {"alpha": False, "beta": True}
    # The new journal holds alpha's new result, once, and its new fingerprint.
    journal = read_journal(journal_of(pytester))
    results = [e for e in journal.entries if e.type == "bash"]
    assert sorted(e.nodeid for e in results) == [
        "data.jsonl::alpha[oracle]",
        "data.jsonl::beta[oracle]",
    ]
    assert all(e.fingerprint for e in results)
    # Undoing the edit brings the old fingerprint back: nothing is stale, nothing reruns.
    edit_task(pytester, "alpha", expectations=alpha["expectations"])
    result = pytester.runpytest(*args, "--llm-resume")
    result.stdout.fnmatch_lines(["llmtool: resumed 1 item from * (1 passed, 0 failed), 1 rerun*"])
    result = pytester.runpytest(*args, "--llm-resume")
    result.stdout.fnmatch_lines(["llmtool: resumed 2 items from * (2 passed, 0 failed); 0 run now"])


@pytest.mark.parametrize(
    ("changes", "passes"),
    [
        ({"prompt": "Copy the file, then count."}, True),
        ({"files": {"/in/a.txt": "only one line\n"}}, False),
        ({"solution": ["mkdir -p /out && cp /in/a.txt /out/b.txt", "echo 7"]}, False),
        ({"setup": "rm -f /in/a.txt"}, False),
    ],
    ids=["prompt", "files", "solution", "setup"],
)
def test_any_edit_of_the_task_runs_it_again(
    pytester: pytest.Pytester, dataset: Path, changes: dict[str, Any], passes: bool
) -> None:
    args = ["-k", "alpha", "--llm-report=out"]
    pytester.runpytest(*args).assert_outcomes(passed=1, deselected=3)
    edit_task(pytester, "alpha", **changes)
    result = pytester.runpytest(*args, "--llm-resume")
    result.assert_outcomes(passed=int(passes), failed=int(not passes), deselected=3)
    result.stdout.fnmatch_lines(["*, 1 rerun because its task or model changed; 0 run now"])


def test_an_edit_elsewhere_in_the_dataset_keeps_the_other_results(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    edit_task(pytester, "gamma", description="reworded")
    result = pytester.runpytest("--llm-report=out", "--llm-resume")
    result.assert_outcomes(failed=1, skipped=1, deselected=2)
    result.stdout.fnmatch_lines(
        ["llmtool: resumed 2 items from * (2 passed, 0 failed), 1 rerun because *; 1 run now"]
    )


def test_a_changed_sampling_parameter_runs_every_item_again(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    """The model as the run resolves it is part of a result: its answers at another
    temperature are not the journal's."""
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    result = pytester.runpytest("--llm-report=out", "--llm-resume", "--llm-temperature=0.5")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "llmtool: resumed 0 items from * (0 passed, 0 failed), 3 rerun because their task "
            "or model changed; 1 run now"
        ]
    )
    assert read_report(pytester)["metadata"]["resumed"] == 0


@XDIST
def test_a_journal_that_records_no_fingerprints_keeps_no_verdict(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str]
) -> None:
    """A journal written before results were fingerprinted cannot tell whether its tasks
    changed: its items run again, and the terminal says why."""
    pytester.runpytest("--llm-report=out").assert_outcomes(passed=2, failed=1, skipped=1)
    path = journal_of(pytester)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text(
        "".join(json.dumps(line) + "\n" for line in lines if line.pop("fingerprint", 1))
    )
    result = pytester.runpytest(*xdist, "--llm-report=out", "--llm-resume")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "llmtool: resumed 0 items from * (0 passed, 0 failed), 3 rerun because the journal "
            "does not record what they were made of (an older journal); 1 run now"
        ]
    )


def test_a_changed_template_folder_runs_the_scenario_again(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A scenario's YAML is its task, and so is the template folder it copies."""
    gate = {"type": "file_contains", "path": "README", "substring": "a project"}
    data = scenario()
    data["evaluation"]["gates"].append(gate)
    write_scenario(project, data)
    args = ["-W", "ignore", "--llm-sandbox=none", "--llm-report=out"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    (project / "template" / "README").write_text("rewritten\n")
    result = pytester.runpytest(*args, "--llm-resume")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*, 1 rerun because its task or model changed; 0 run now"])


def test_resume_compares_what_each_finished_item_is_made_of() -> None:
    """`changed`: no fingerprint now (a run that does not journal), none journaled, or a
    different one all run again; items the journal does not hold are not its business."""

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    items: Any = [Item("a"), Item("b"), Item("new")]
    assert changed(items, {"a": "x", "b": None}) == ["a", "b"]  # neither is an LlmItem


# What goes into a fingerprint.


def test_a_folder_digest_follows_content_names_modes_and_links(tmp_path: Path) -> None:
    kind = OptimizationKind()
    write_project(tmp_path)
    loaded = load_task(write_optimization(tmp_path, task()))
    assert not isinstance(loaded, str), loaded
    assert kind.sources(loaded) == [tmp_path / "project"]

    def digest() -> str:
        return TaskDigests().digest(kind, loaded, "the task")

    first = digest()
    assert digest() == first  # made again from the same files: the same
    rows = tmp_path / "project" / "pkg" / "rows.py"
    link = tmp_path / "project" / "link"

    def relink() -> None:
        link.unlink()
        link.symlink_to("fast")

    text = rows.read_text()
    seen = {first}
    for change in (
        lambda: rows.write_text(text + "# a comment\n"),
        lambda: rows.chmod(0o755),
        lambda: (tmp_path / "project" / "pkg" / "new.py").write_text(""),
        lambda: link.symlink_to("pkg"),
        relink,
    ):
        change()
        now = digest()
        assert now not in seen
        seen.add(now)
    # The content, not the clock: a file rewritten as it was is the same task.
    rows.write_text(rows.read_text())
    assert digest() in seen


def test_a_scenarios_sources_are_its_template_rubric_guidance_and_tool(
    tmp_path: Path, project: Path
) -> None:
    data = scenario(guidance=["v1.md", "v2.md"])
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml"}
    loaded = load_scenario(write_scenario(project, data))
    assert isinstance(loaded, Scenario), loaded
    assert ScenarioKind().sources(loaded) == [
        project / "template",
        project / "rubric.yaml",
        project / "v1.md",
        project / "v2.md",
        project / "bin" / "note",
    ]
    kind, digests = ScenarioKind(), TaskDigests()
    before = digests.digest(kind, loaded, "s")
    (project / "bin" / "note").write_text("#!/bin/sh\necho changed\n")
    assert TaskDigests().digest(kind, loaded, "s") != before


def test_a_models_digest_is_what_decides_its_answers_and_holds_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from pytest_llmtool.agents.registry import ModelRef
    from pytest_llmtool.settings import Settings

    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    ref = ModelRef("haiku", "anthropic", "claude-haiku-4-5")
    base = Settings(models=(ref,), max_turns=10, report_dir=None, dataset_patterns=())

    def digest(settings: Settings) -> str:
        return model_digests(settings)["haiku"]

    first = digest(base)
    assert digest(replace(base, params=ModelParams(temperature=0.0))) != first
    assert digest(replace(base, params=ModelParams(max_tokens=100))) != first
    assert digest(replace(base, models=(ModelRef("haiku", "anthropic", "other"),))) != first
    proxied = replace(base, base_urls={"anthropic": "https://proxy.example/v1"})
    assert digest(proxied) != first
    # The URL's credentials and the API key are no part of it.
    with_password = replace(base, base_urls={"anthropic": "https://u:secret@proxy.example/v1"})
    assert digest(with_password) == digest(proxied)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-other")
    assert digest(base) == first
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://proxy.example/v1")  # as the SDK reads it
    assert digest(base) == digest(proxied)
    # Another model's base URL is not this one's.
    assert digest(replace(base, base_urls={"openai": "https://proxy.example/v1"})) == digest(base)


# Defect 4: a full disk under the journal kills the run.


def partial_of(journal: Path) -> Path:
    """Where `JournalWriter` writes a new journal before moving it over the old one."""
    return journal.with_name(f".{journal.name}.{os.getpid()}.tmp")


@needs_dev_full
def test_a_journal_that_cannot_be_written_stops_quietly_and_close_does_not_raise(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.jsonl"
    partial_of(path).symlink_to(FULL)
    writer = JournalWriter(path, {"models": ["m"]})
    assert writer.problem == f"{path}: {NO_SPACE}"
    writer.append("bash", "f::a[m]", {"n": 1})  # nothing, and no error
    writer.close()
    writer.close()
    assert not path.exists() and not partial_of(path).exists()


@needs_dev_full
def test_a_journal_whose_disk_fills_later_keeps_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    writer = JournalWriter(path, {"models": ["m"]})
    writer.append("bash", "f::a[m]", {"n": 1}, "fp")
    fill_disk_under(path)
    writer.append_json("bash", "f::b[m]", '{"n": 2}', "fp")
    writer.append("bash", "f::c[m]", {"n": 3})
    writer.close()  # before: the unflushed line failed again here
    assert writer.problem == f"{path}: {NO_SPACE}"
    assert [(e.nodeid, e.fingerprint) for e in read_journal(path).entries] == [("f::a[m]", "fp")]


def fill_disk_under(path: Path) -> None:
    """Make the file this process has open at `path` answer every write with ENOSPC: its
    descriptor now refers to `/dev/full`."""
    full = os.open(FULL, os.O_WRONLY)
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                    os.dup2(full, int(fd))
                    return
            except OSError:
                continue
        raise AssertionError(f"{path} is not open")
    finally:
        os.close(full)


FILL_AFTER_FIRST = """
import os
from pathlib import Path

import pytest

JOURNAL = Path(__file__).parent / "out" / "results.jsonl"
filled = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    # After the first result is journalled, the journal's disk is full.
    if filled or report.when != "teardown" or not JOURNAL.exists():
        return
    full = os.open("/dev/full", os.O_WRONLY)
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(JOURNAL):
                os.dup2(full, int(fd))
                filled.append(fd)
        except OSError:
            pass
    os.close(full)
"""


@needs_dev_full
@XDIST
def test_a_full_disk_under_the_journal_mid_run_loses_nothing_else(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str]
) -> None:
    """Before: INTERNALERROR at the first write after the disk filled, a second traceback
    from `close()`, and no summary, report or history. Now the run ends as it would have,
    the journal keeps what it held, and a resume from it finishes the run."""
    pytester.makeconftest(FILL_AFTER_FIRST)
    args = ["--llm-model=oracle,nop", "--llm-report=out"]
    result = pytester.runpytest(*xdist, *args)
    result.assert_outcomes(passed=3, failed=4, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    said = [line for line in result.outlines if "journal stopped" in line]
    assert said == [
        f"llmtool: journal stopped: {journal_of(pytester)}: {NO_SPACE}; the results after "
        "that are not journalled (--llm-resume will run them again)"
    ]
    result.stdout.fnmatch_lines(["*llmtool eval summary*", "history: run 1 in *"])
    assert len(read_report(pytester)["results"]) == 7
    kept = results_in(journal_of(pytester))
    assert 1 <= len(kept) < 7

    (pytester.path / "conftest.py").unlink()
    result = pytester.runpytest(*args, "--llm-resume")
    result.stdout.fnmatch_lines([f"llmtool: resumed {len(kept)} item* {8 - len(kept)} run now"])
    assert len(read_report(pytester)["results"]) == 7
    assert len(results_in(journal_of(pytester))) == 7


@needs_dev_full
@XDIST
def test_a_resumed_run_that_cannot_write_its_journal_leaves_the_old_one_whole(
    pytester: pytest.Pytester, dataset: Path, xdist: list[str]
) -> None:
    pytester.runpytest("-k", "alpha", "--llm-report=out").assert_outcomes(passed=1, deselected=3)
    before = journal_of(pytester).read_bytes()
    partial_of(journal_of(pytester)).symlink_to(FULL)
    result = pytester.runpytest(*xdist, "--llm-report=out", "--llm-resume")
    result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=0 if xdist else 1)
    result.stdout.fnmatch_lines(["llmtool: journal stopped: *results.jsonl: No space left*"])
    assert journal_of(pytester).read_bytes() == before
    assert len(read_report(pytester)["results"]) == 3


@needs_dev_full
def test_a_cache_that_cannot_be_made_stops_the_journal_not_the_run(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    """Without `--llm-report` the journal is in pytest's cache: one that cannot be made (a
    full disk, a file in its way) stops the journal, and a resume from it is a usage error."""
    cache = ["-o", f"cache_dir={FULL}/cache"]
    result = pytester.runpytest(*cache)
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines([f"llmtool: journal stopped: {FULL}: File exists; *"])
    result = pytester.runpytest(*cache, "--llm-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --llm-resume: pytest's cache, * cannot be made: *"])


@needs_dev_full
def test_a_report_that_cannot_be_written_costs_the_run_nothing_else(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    """The journal's disk is often the reports' too: `report.json` failing on it must not
    cost `report.md`, the history or the summary either."""
    (pytester.path / "out").mkdir()
    (pytester.path / "out" / ".report.json.tmp").symlink_to(FULL)
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = pytester.path / "out"
    result.stdout.fnmatch_lines(
        [
            "*llmtool eval summary*",
            "history: run 1 in *",
            f"report: {out / 'report.md'}*",
            f"report: not written: {out / 'report.json'}: {NO_SPACE}",
        ]
    )
    assert not (out / "report.json").exists() and (out / "report.md").exists()
    assert not (out / ".report.json.tmp").exists()  # no half-written copy left
