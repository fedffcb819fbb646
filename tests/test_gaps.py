"""The gap report (`--llm-gaps`, `llmtool gaps`): failed tool calls classified from the
messages bashkit (and real bash) really print, grouped, ranked, marked as likely tool gaps,
written inert, the same under xdist, and replayed on the current bashkit.

Every message classified here is produced in the test by running bashkit (the plugin's own
sandbox) or bash; none is typed in by hand. Replay is shown two ways, both honest:

- `tests/data/bashkit-eval-recorded.json` is one result, unedited but for the conversation
  dropped, of upstream's own harness (everruns/bashkit at b7097abb,
  `crates/bashkit-eval/results/eval-openai-gpt-5.2-2026-02-07-052037.json`, result 25,
  `complex_diff_report`; MIT). gpt-5.2 ran it on the bashkit of February 2026, whose awk
  could not take a field as `gsub`'s target ("awk: invalid assignment target") and which has
  no python3. Replayed on today's bashkit, the awk calls succeed: a gap fixed by a real
  bashkit release; python3 is still missing.
- A report.json written by a real run of ours, whose task lacked a file the solution reads,
  replayed after the dataset gained that file: the call fails for a reason that no longer
  holds, while `zcat` still fails.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import write_dataset
from markdown_it import MarkdownIt

from pytest_llmtool.cli import main
from pytest_llmtool.gaps import (
    Attempt,
    GapReport,
    Replayed,
    build_gaps,
    classify,
    compare,
)
from pytest_llmtool.records import ToolCallResult
from pytest_llmtool.sandbox.vfs import VfsSandbox

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "bashkit-eval-recorded.json"


def run_bashkit(*commands: str, files: dict[str, str] | None = None) -> list[ToolCallResult]:
    """The calls run in order in one fresh sandbox, as a task's calls run."""
    sandbox = VfsSandbox(files or {})

    async def run() -> list[ToolCallResult]:
        return [await sandbox.run(command) for command in commands]

    return asyncio.run(run())


# --- the classifier, on real messages ------------------------------------------------------------

# (command, class, subject): the subject is what bashkit 0.20's message makes of it.
BASHKIT = [
    ("zcat /data/x.gz", "missing_command", "zcat"),
    ("apt-get install -y jq", "missing_command", "apt-get"),
    ("ls -Z /", "unknown_option", "ls --context"),  # "option(s) not yet implemented in bashkit"
    ("zip -q out.zip /etc/hostname", "unknown_option", "zip -q"),
    ("grep --frob x /dev/null", "unknown_option", "grep --frob"),
    ("stat --frob /", "unknown_option", "stat --frob"),  # clap: "unexpected argument"
    ("declare -Q x", "unknown_option", "declare -Q"),
    ("find / -frob", "unknown_option", "find -frob"),
    ("shuf --random-source=/dev/null", "unknown_option", "shuf --random-source"),
    ("set -o frob", "unknown_option", "set -o frob"),
    ("echo $(", "parse_error", "bash: unterminated command substitution"),
    ("fi", "parse_error", "bash: syntax error near unexpected token `fi'"),
    ("if true; then echo", "parse_error", "bash: unexpected end of file"),
    ("echo $((1+))", "parse_error", "bash: arithmetic: operand expected"),
    ("awk '{print $1' /dev/null", "parse_error", "awk: unexpected newline or end of string"),
    ("sed 's/a/' /dev/null", "parse_error", "sed: unterminated `s' command"),
    ("jq 'bad(' <<< '{}'", "parse_error", "jq: error: expected closing parenthesis"),
    ("curl -s http://example.com", "unsupported_feature", "curl: network access not configured"),
    (
        "enable -n echo",
        "unsupported_feature",
        "enable: -n: disabling or loading builtins is not supported",
    ),
    ("iconv -f foo -t utf-8 /dev/null", "unsupported_feature", "iconv: unsupported encoding 'foo'"),
    ("cat /data/missing.txt", "other", "cat: …: No such file or directory"),
    (
        "while true; do :; done",
        "other",
        "resource limit exceeded: maximum command count exceeded (10000)",
    ),
]


@pytest.mark.parametrize(("command", "gap_class", "subject"), BASHKIT, ids=[c for c, *_ in BASHKIT])
def test_bashkit_messages_are_classified(command: str, gap_class: str, subject: str) -> None:
    (call,) = run_bashkit(command)
    assert call.exit_code != 0
    found = classify(call.commands, call.stderr, call.exit_code, call.stdout)
    assert (found.gap_class, found.subject) == (gap_class, subject)
    assert found.message and found.message in " ".join(call.stderr.split())


def test_bashkit_hints_ride_with_missing_commands() -> None:
    (call,) = run_bashkit("pip install requests")
    found = classify(call.commands, call.stderr, call.exit_code)
    assert found.key == "missing command: pip"
    assert found.hint == "Package managers are not available in the sandbox."


def test_errors_sent_to_stdout_are_read_there_and_silence_is_keyed_by_command() -> None:
    merged, silent = run_bashkit("zcat /data/x.gz 2>&1", "grep -q needle /dev/null")
    assert merged.stderr == "" and "command not found" in merged.stdout
    found = classify(merged.commands, merged.stderr, merged.exit_code, merged.stdout)
    assert found.key == "missing command: zcat"
    quiet = classify(silent.commands, silent.stderr, silent.exit_code, silent.stdout)
    assert (quiet.key, quiet.silent) == ("other: grep: exit 1 without a message", True)


# (command, class, subject) as bash 5 and GNU tools word them: a scenario's agent runs real bash.
REAL_BASH = [
    ("zcatx /tmp/x", "missing_command", "zcatx"),
    ("ls --frobnicate", "unknown_option", "ls --frobnicate"),
    ("ls -y", "unknown_option", "ls -y"),
    ("fi", "parse_error", "bash: syntax error near unexpected token `fi'"),
    ("echo 'open", "parse_error", "bash: unexpected EOF while looking for matching `''"),
    ("echo $((1+))", "parse_error", "bash: arithmetic: operand expected"),
    ("declare -Q x", "unknown_option", "declare -Q"),
    ("./no-such-script.sh", "other", "…: No such file or directory"),
    ("git frob", "missing_command", "git frob"),
    (
        f'{sys.executable} -c \'import argparse; p = argparse.ArgumentParser(prog="todo"); '
        'p.add_subparsers().add_parser("add"); p.parse_args()\' frob',
        "missing_command",
        "todo frob",
    ),
    (
        f'{sys.executable} -c \'import argparse; argparse.ArgumentParser(prog="todo")'
        ".parse_args()' --frob",
        "unknown_option",
        "todo --frob",
    ),
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("command", "gap_class", "subject"), REAL_BASH, ids=range(len(REAL_BASH)))
def test_real_bash_messages_are_classified(
    command: str, gap_class: str, subject: str, tmp_path: Path
) -> None:
    if command.startswith("git ") and shutil.which("git") is None:
        pytest.skip("needs git")
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode != 0
    found = classify(command, done.stderr, done.returncode)
    assert (found.gap_class, found.subject) == (gap_class, subject)


# --- grouping, ranking, likely tool gaps ----------------------------------------------------------


def attempt(task: str, model: str, passed: bool, calls: Sequence[ToolCallResult]) -> Attempt:
    return Attempt(f"data.jsonl::{task}", model, passed, calls, (f"{task}[{model}]", 0))


def test_gaps_are_grouped_and_ranked_by_tasks_then_calls() -> None:
    report = build_gaps(
        [
            attempt("a", "m1", False, run_bashkit("zcat /a.gz", *["cat /nope"] * 3)),
            attempt("b", "m1", False, run_bashkit("zcat /b.gz", "ls -Z /", "echo ok")),
            attempt("c", "m1", True, run_bashkit("echo ok")),
        ],
        ["m1"],
    )
    assert (report.tool_calls, report.failed_calls) == (8, 6)
    assert report.by_class == {
        "parse_error": 0,
        "missing_command": 2,
        "unknown_option": 1,
        "unsupported_feature": 0,
        "other": 3,
    }
    # Two tasks beat three calls in one task; ties go by calls, then key.
    assert [(g.key, g.calls, g.task_count) for g in report.gaps] == [
        ("missing command: zcat", 2, 2),
        ("other: cat: …: No such file or directory", 3, 1),
        ("unknown option: ls --context", 1, 1),
    ]
    zcat = report.gaps[0]
    assert zcat.tasks == ["data.jsonl::a", "data.jsonl::b"]
    assert zcat.models == {"m1": 2}
    assert (zcat.example.command, zcat.example.task, zcat.example.exit_code) == (
        "zcat /a.gz",
        "data.jsonl::a",
        127,
    )
    assert "zcat: command not found" in zcat.example.message
    assert report.likely_tool_gaps == []  # one model cannot tell a tool gap from a weak model


def test_a_task_every_model_fails_on_the_same_gap_is_a_likely_tool_gap() -> None:
    attempts = [
        # t1: both fail, both hit zcat: a likely tool gap.
        attempt("t1", "m1", False, run_bashkit("zcat /x.gz")),
        attempt("t1", "m2", False, run_bashkit("ls -Z /", "zcat /x.gz")),
        # t2: both fail, on different gaps.
        attempt("t2", "m1", False, run_bashkit("zcat /x.gz")),
        attempt("t2", "m2", False, run_bashkit("cat /nope")),
        # t3: m2 passes despite the gap.
        attempt("t3", "m1", False, run_bashkit("zcat /x.gz")),
        attempt("t3", "m2", True, run_bashkit("zcat /x.gz", "echo done")),
        # t4: both fail silently: no message, no gap to blame.
        attempt("t4", "m1", False, run_bashkit("false")),
        attempt("t4", "m2", False, run_bashkit("false")),
    ]
    report = build_gaps(attempts, ["m1", "m2"])
    assert [(e.task, e.models, e.gaps) for e in report.likely_tool_gaps] == [
        ("data.jsonl::t1", ["m1", "m2"], ["missing command: zcat"])
    ]
    marked = {g.key: g.likely_tool_gap_tasks for g in report.gaps if g.likely_tool_gap}
    assert marked == {"missing command: zcat": ["data.jsonl::t1"]}
    # Each model alone marks nothing.
    assert build_gaps([a for a in attempts if a.model == "m1"]).likely_tool_gaps == []


def test_then_and_now_per_gap() -> None:
    """The same calls, recorded without /data/in.txt and replayed with it: the cat gap is
    fixed, zcat remains; a script that failed on the missing file now gets further and fails
    on zcat (changed), which is a new gap for that call."""
    script = "cat /data/in.txt && zcat /data/in.gz"
    commands = ("cat /data/in.txt", "zcat /data/in.gz", script)
    then = run_bashkit(*commands)
    now = run_bashkit(*commands, files={"/data/in.txt": "a\n"})
    gaps, calls, failed_then, failed_now = compare([Replayed(attempt("t", "m", False, then), now)])
    assert (calls, failed_then, failed_now) == (3, 3, 2)
    assert [(g.key, g.then, g.now, g.then_ok_now, g.then_other_now, g.status) for g in gaps] == [
        ("missing command: zcat", 1, 2, 0, 0, "remaining"),
        ("other: cat: …: No such file or directory", 2, 0, 1, 1, "changed"),
    ]
    fixed_only, *_ = compare([Replayed(attempt("t", "m", False, then[:1]), now[:1])])
    assert [(g.key, g.status) for g in fixed_only] == [
        ("other: cat: …: No such file or directory", "fixed")
    ]


# --- the writer, through pytest ----------------------------------------------------------------

UNZIP = {
    "id": "unzip",
    "category": "files",
    "prompt": "Print the text in /data/x.gz.",
    "files": {"/data/x.txt": "hello\n"},
    "expectations": [{"check": "stdout_contains:hello"}],
    "solution": ["zcat /data/x.gz"],
}
LISTING = {
    "id": "listing",
    "category": "files",
    "prompt": "List /data with its security contexts.",
    "files": {"/data/x.txt": "hello\n"},
    "expectations": [{"check": "exit_code:0"}],
    "solution": ["ls -Z /data"],
}
FINE = {
    "id": "fine",
    "category": "text",
    "prompt": "Say hi.",
    "expectations": [{"check": "stdout_contains:hi"}],
    "solution": ["echo hi"],
}
HOSTILE_COMMAND = "<img src=x onerror=alert(1)>|[a](javascript:alert(2))`x`"
HOSTILE = {
    "id": "hostile",
    "category": "text",
    "prompt": "Run it.",
    "expectations": [{"check": "exit_code:0"}],
    "solution": [f"'{HOSTILE_COMMAND}' now"],
}


def read_gaps(pytester: pytest.Pytester, directory: str = "gaps") -> GapReport:
    path = pytester.path / directory / "gaps.json"
    return GapReport.model_validate_json(path.read_text(encoding="utf-8"))


def test_llm_gaps_writes_the_report_of_the_run(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [UNZIP, LISTING, FINE, HOSTILE])
    result = pytester.runpytest("--llm-model=oracle", "--llm-gaps=gaps")
    result.assert_outcomes(passed=1, failed=3)
    gaps = read_gaps(pytester)
    assert (gaps.tool_calls, gaps.failed_calls, gaps.models) == (4, 3, ["oracle"])
    assert {g.key: g.tasks for g in gaps.gaps} == {
        f"missing command: {HOSTILE_COMMAND}": ["data.jsonl::hostile"],
        "missing command: zcat": ["data.jsonl::unzip"],
        "unknown option: ls --context": ["data.jsonl::listing"],
    }
    result.stdout.fnmatch_lines(
        ["gaps: 3 of 4 tool calls failed, 3 gaps; top: *gaps/gaps.json, *gaps/gaps.md"]
    )
    markdown = (pytester.path / "gaps" / "gaps.md").read_text(encoding="utf-8")
    assert "alert(1)" in markdown  # there, as text
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    assert "<img" not in html and "<a " not in html
    outside_code = re.sub(r"(`+).*?\1", "", markdown)
    assert "<" not in outside_code


def test_llm_gaps_from_needs_llm_gaps(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [FINE])
    result = pytester.runpytest("--llm-gaps-from=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-gaps-from needs --llm-gaps=DIR*"])


def test_xdist_writes_the_same_gaps_json_and_marks_the_shared_gap(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """oracle and a scripted model hit zcat on `unzip` and both fail it: a likely tool gap;
    on `listing` the model lists without contexts and passes."""
    write_dataset(pytester, [UNZIP, LISTING, FINE])

    def script() -> None:
        server.script(UNZIP["prompt"], [Turn(tool_calls=["zcat /data/x.gz"]), Turn(text="No.")])
        server.script(LISTING["prompt"], [Turn(tool_calls=["ls /data"]), Turn(text="Done.")])
        server.script(FINE["prompt"], [Turn(tool_calls=["echo hi"]), Turn(text="Done.")])

    script()
    pytester.runpytest("--llm-model=oracle,haiku", "--llm-gaps=serial")
    script()
    pytester.runpytest("--llm-model=oracle,haiku", "--llm-gaps=xdist", "-n", "2")
    serial = (pytester.path / "serial" / "gaps.json").read_text(encoding="utf-8")
    assert serial == (pytester.path / "xdist" / "gaps.json").read_text(encoding="utf-8")
    gaps = read_gaps(pytester, "serial")
    assert [(e.task, e.models, e.gaps) for e in gaps.likely_tool_gaps] == [
        ("data.jsonl::unzip", ["oracle", "haiku"], ["missing command: zcat"])
    ]
    assert gaps.gaps[0].models == {"oracle": 1, "haiku": 1}


# --- replay ------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(["gaps", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def statuses(report: Any) -> dict[str, tuple[int, int, str]]:
    return {g["key"]: (g["then"], g["now"], g["status"]) for g in report["replay"]["gaps"]}


def test_an_upstream_recorded_session_replayed_on_todays_bashkit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_cli(capsys, str(RECORDED), "--out", str(tmp_path / "g"))
    # The sandbox now has bashkit's python3 (every bash task runs with its runtimes).
    assert statuses(report) == {
        "missing command: python3": (1, 0, "fixed"),
        "parse error: awk: invalid assignment target": (2, 0, "fixed"),
    }
    replay = report["replay"]
    assert sorted(replay["fixed"]) == [
        "missing command: python3",
        "parse error: awk: invalid assignment target",
    ]
    assert (replay["attempts"], replay["calls"], replay["not_replayed"]) == (1, 5, [])
    assert replay["sources"][0]["format"] == "bashkit-eval"
    assert replay["dataset_rule"] == "the task embedded in each bashkit-eval result"
    markdown = (tmp_path / "g" / "gaps.md").read_text(encoding="utf-8")
    assert "**Fixed** (2): `parse error: awk: invalid assignment target`" in markdown
    # The recorded calls alone: classified and ranked, not run.
    recorded = run_cli(capsys, str(RECORDED), "--out", str(tmp_path / "g"), "--no-replay")
    assert recorded["replay"] is None
    assert [(g["key"], g["calls"]) for g in recorded["gaps"]] == [
        ("parse error: awk: invalid assignment target", 2),
        ("missing command: python3", 1),
    ]


COUNT = {
    "id": "count",
    "category": "files",
    "prompt": "Count the lines of /data/in.txt.",
    "expectations": [{"check": "stdout_contains:3"}],
    "solution": ["wc -l < /data/in.txt", "zcat /data/in.gz"],
}


@pytest.fixture
def recorded_run(pytester: pytest.Pytester) -> Path:
    """A real run's report.json, recorded while `count`'s dataset line lacked /data/in.txt;
    the dataset gains the file afterwards."""
    write_dataset(pytester, [COUNT, FINE])
    pytester.runpytest("--llm-model=oracle", "--llm-report=out").assert_outcomes(passed=1, failed=1)
    write_dataset(pytester, [{**COUNT, "files": {"/data/in.txt": "a\nb\nc\n"}}, FINE])
    return pytester.path / "out"


def test_a_recorded_report_replayed_after_the_dataset_gained_a_file(
    pytester: pytest.Pytester, recorded_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_cli(capsys, "out", "--out", "g")
    assert statuses(report) == {
        "missing command: zcat": (1, 1, "remaining"),
        "other: …: No such file or directory": (1, 0, "fixed"),
    }
    replay = report["replay"]
    assert replay["datasets"] == {"data.jsonl": str(pytester.path / "data.jsonl")}
    assert replay["dataset_rule"].startswith(f"the node id's path relative to {pytester.path}")
    assert replay["sources"][0]["format"] == "report.json"
    # The gap report of the recorded calls themselves sits beside the replay.
    assert [g["key"] for g in report["gaps"]] == [
        "missing command: zcat",
        "other: …: No such file or directory",
    ]


def test_dataset_given_or_not_found(
    pytester: pytest.Pytester, recorded_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = pytester.path / "moved"
    elsewhere.mkdir()
    (pytester.path / "data.jsonl").rename(elsewhere / "renamed.jsonl")
    report = run_cli(capsys, "out", "--out", "g")
    assert report["replay"]["datasets"] == {"data.jsonl": None}
    assert {n["reason"] for n in report["replay"]["not_replayed"]} == {
        "dataset data.jsonl not found"
    }
    report = run_cli(capsys, "out", "--out", "g", "--dataset", "moved/renamed.jsonl")
    assert statuses(report)["other: …: No such file or directory"] == (1, 0, "fixed")
    assert report["replay"]["dataset_rule"] == "--dataset moved/renamed.jsonl"


def test_llm_gaps_from_replays_in_a_pytest_run(
    pytester: pytest.Pytester, recorded_run: Path
) -> None:
    result = pytester.runpytest("--llm-model=oracle", "--llm-gaps=g", "--llm-gaps-from=out")
    result.assert_outcomes(passed=2)  # count reads its file now; zcat still fails, unchecked
    gaps = read_gaps(pytester, "g")
    assert [g.key for g in gaps.gaps] == ["missing command: zcat"]
    assert gaps.replay is not None
    assert gaps.replay.fixed == ["other: …: No such file or directory"]
    result.stdout.fnmatch_lines(["gaps: *; replay on bashkit *: 1 gap fixed, 1 remaining -> *"])


def test_unreadable_records_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.json").write_text('{"something": "else"}')
    for path in (tmp_path / "missing.json", tmp_path / "x.json", tmp_path):
        assert main(["gaps", str(path), "--out", str(tmp_path / "g")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmtool: ") and err.count("\n") == 1


def _deep(path: Path) -> Path:
    """JSON nested deeper than Python's parser recurses."""
    path.write_text('{"metadata": ' + "[" * 200_000 + "]" * 200_000 + "}")
    return path


def test_hostile_records_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"schema_version": 999, "metadata": {}}))
    for path, said in (
        (_deep(tmp_path / "deep.json"), "nested too deeply"),
        (future, "schema 999"),
    ):
        assert main(["gaps", str(path), "--out", str(tmp_path / "g")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmtool: ") and err.count("\n") == 1 and said in err


def test_llm_gaps_from_hostile_json_is_a_note_and_the_reports_are_written(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    _deep(pytester.path / "deep.json")
    result = pytester.runpytest("--llm-gaps=g", "--llm-gaps-from=deep.json", "--llm-report=out")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*llmtool eval summary*", "gaps: --llm-gaps-from not replayed: *nested too deeply*"],
        consecutive=False,
    )
    assert (pytester.path / "g" / "gaps.json").is_file()
    assert (pytester.path / "out" / "report.json").is_file()
