"""The gap report files the sandbox's own refusals as tool gaps, named in "Likely tool gap".

bashkit says so when it leaves something out on purpose: a Python module disabled or left
out, a builtin option "not supported", network "not configured", a package manager "not
available in the sandbox". Each message here is what a real bashkit sandbox prints for the
command (run, not typed in), and the run-level test goes through `--llm-gaps`.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import write_dataset

from pytest_llmtool.gaps import Attempt, GapReport, build_gaps, classify
from pytest_llmtool.gaps.writer import markdown
from pytest_llmtool.records import ToolCallResult
from pytest_llmtool.sandbox.vfs import VfsSandbox


def run_bashkit(command: str) -> ToolCallResult:
    """One call in a fresh bashkit sandbox, as a task's call runs."""
    return asyncio.run(VfsSandbox({}).run(command))


# (command, class, subject, the refusal as the gap names it without the sandbox)
REFUSALS = [
    (
        "python3 -c 'import re'",
        "unsupported_feature",
        "python3: module re disabled",
        "python3: module re disabled",
    ),
    (
        "python3 -c 'import subprocess'",
        "unsupported_feature",
        "python3: module subprocess not available",
        "python3: module subprocess not available",
    ),
    (
        "curl -s http://example.com",
        "unsupported_feature",
        "curl: network access not configured",
        "curl: network access not configured",
    ),
    (
        "apt-get install -y jq",
        "missing_command",
        "apt-get",
        "apt-get: Package managers are not available in the sandbox",
    ),
    (
        "gcc x.c",
        "missing_command",
        "gcc",
        "gcc: Compilers and build tools are not available in the sandbox",
    ),
    ("ls -Z /", "unknown_option", "ls --context", "ls --context: not yet implemented"),
    (
        "enable -n echo",
        "unsupported_feature",
        "enable: -n: disabling or loading builtins is not supported",
        "enable: -n: disabling or loading builtins is not supported",
    ),
]


@pytest.mark.parametrize(
    ("command", "gap_class", "subject", "refusal"), REFUSALS, ids=[c for c, *_ in REFUSALS]
)
def test_the_sandboxs_refusals_are_tool_gaps(
    command: str, gap_class: str, subject: str, refusal: str
) -> None:
    call = run_bashkit(command)
    assert call.exit_code != 0
    found = classify(call.commands, call.stderr, call.exit_code, call.stdout)
    assert (found.gap_class, found.subject, found.refusal) == (gap_class, subject, refusal)


# Refusals an older bashkit printed, as upstream's recorded runs hold them (bashkit-eval's
# results, May 2026): today's bashkit runs these commands.
RECORDED = [
    ("env -u DB_HOST ./app.sh", "env: -u option not supported", "env -u: not supported"),
    (
        "env DB_HOST=x ./app.sh",
        "env: executing commands not supported in virtual mode",
        "env: executing commands not supported in virtual mode",
    ),
    (
        "sudo cat /etc/env.conf",
        "bash: line 1: sudo: command not found. All commands run without privilege "
        "restrictions.cat: /etc/env.conf: io error: file not found",
        "sudo: All commands run without privilege restrictions",
    ),
]


@pytest.mark.parametrize(("command", "stderr", "refusal"), RECORDED, ids=[c for c, *_ in RECORDED])
def test_recorded_refusals_of_an_older_bashkit(command: str, stderr: str, refusal: str) -> None:
    assert classify(command, stderr, 1).refusal == refusal


# What is not the sandbox refusing: a command it does not know, a file that is not there, the
# task's own script saying it does not support something, a module no Python has.
NOT_REFUSALS = [
    ("nc -l 80", "missing command: nc"),
    ("cat /data/missing.txt", "other: cat: …: No such file or directory"),
]


@pytest.mark.parametrize(("command", "key"), NOT_REFUSALS, ids=[c for c, _ in NOT_REFUSALS])
def test_other_failures_are_not_refusals(command: str, key: str) -> None:
    call = run_bashkit(command)
    found = classify(call.commands, call.stderr, call.exit_code, call.stdout)
    assert (found.key, found.refusal) == (key, None)


def test_a_tasks_own_script_or_a_missing_package_is_not_the_sandbox_refusing() -> None:
    script = classify("./convert.sh in.csv", "./convert.sh: format not supported", 1)
    assert script.gap_class == "unsupported_feature" and script.refusal is None
    package = classify(
        "python3 fetch.py",
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests'",
        1,
    )
    assert package.refusal is None


def _report(calls: list[ToolCallResult], sandbox: str | None = "bashkit") -> GapReport:
    attempts = [
        Attempt(f"data.jsonl::t{i}", "m", False, [call], (f"t{i}", 0), sandbox=sandbox)
        for i, call in enumerate(calls)
    ]
    return build_gaps(attempts, ["m"])


def test_the_likely_tool_gap_column_names_the_refusal() -> None:
    calls = [run_bashkit("python3 -c 'import re'"), run_bashkit("nc -l 80")]
    report = _report(calls)
    by_key = {g.key: g for g in report.gaps}
    disabled = by_key["unsupported feature: python3: module re disabled"]
    assert disabled.tool_gap == "bashkit python3: module re disabled"
    assert by_key["missing command: nc"].tool_gap is None
    rows = [line for line in markdown(report).splitlines() if line.startswith("| ")]
    row = next(r for r in rows if "module re disabled`" in r)
    assert row.endswith("| bashkit python3: module re disabled |")
    assert next(r for r in rows if "`missing command: nc`" in r).endswith("|  |")


def test_a_scenarios_tool_refusing_is_named_without_bashkit() -> None:
    call = ToolCallResult(
        commands="notes --sync", stdout="", stderr="notes: --sync option not supported", exit_code=2
    )
    (gap,) = _report([call], sandbox=None).gaps
    assert gap.tool_gap == "notes --sync: not supported"


REFUSED = {
    "id": "word_count",
    "category": "text",
    "prompt": "Count the words in /data/x.txt with Python's re.",
    "files": {"/data/x.txt": "a b c\n"},
    "expectations": [{"check": "stdout_contains:3"}],
    "solution": [
        'python3 -c \'import re; print(len(re.findall(r"\\w+", open("/data/x.txt").read())))\''
    ],
}


def test_llm_gaps_names_the_refusal_of_a_real_run(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [REFUSED])
    result = pytester.runpytest("--llm-model=oracle", "--llm-gaps=gaps")
    result.assert_outcomes(failed=1)
    report = GapReport.model_validate_json((pytester.path / "gaps" / "gaps.json").read_text())
    (gap,) = report.gaps
    assert (gap.key, gap.tool_gap) == (
        "unsupported feature: python3: module re disabled",
        "bashkit python3: module re disabled",
    )
    assert report.by_class["other"] == 0
    assert (
        "| bashkit python3: module re disabled |"
        in (pytester.path / "gaps" / "gaps.md").read_text()
    )
