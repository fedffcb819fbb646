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

from pytest_llmtool.cli import main
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


def test_a_tasks_own_script_saying_not_supported_is_not_the_sandbox_refusing() -> None:
    script = classify("./convert.sh in.csv", "./convert.sh: format not supported", 1)
    assert script.gap_class == "unsupported_feature" and script.refusal is None


def test_bashkits_python_imports_no_module_beyond_its_own() -> None:
    """By design, not by omission: no package, not even a module file beside the script, and
    no pip to install one. So a third-party import failing there is the sandbox's refusal."""
    written = run_bashkit("cd /tmp && echo 'X = 1' > mine.py && python3 -c 'import mine'")
    assert "ModuleNotFoundError: No module named 'mine'" in written.stderr
    assert "Package managers are not available" in run_bashkit("pip install pyyaml").stderr


def test_a_third_party_module_is_a_tool_gap_in_bashkit_only() -> None:
    call = run_bashkit("python3 -c 'import yaml; print(yaml.safe_load(\"a: 1\"))'")
    (gap,) = _report([call]).gaps
    assert (gap.key, gap.tool_gap) == (
        "unsupported feature: python3: module yaml not available",
        "bashkit python3: module yaml not available",
    )
    # A scenario's tool or a real shell runs a real Python: the package is just not installed.
    for sandbox in (None, "container"):
        (gap,) = _report([call], sandbox=sandbox).gaps
        assert (gap.key, gap.tool_gap) == (
            "unsupported feature: python3: module yaml not available",
            None,
        )


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


def test_llmtool_gaps_names_the_refusals_on_the_terminal(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml = {
        **REFUSED,
        "id": "read_config",
        "prompt": "Print /data/c.yaml's port with Python's yaml.",
        "files": {"/data/c.yaml": "port: 8080\n"},
        "expectations": [{"check": "stdout_contains:8080"}],
        "solution": ["python3 -c 'import yaml; print(yaml.safe_load(open(\"/data/c.yaml\")))'"],
    }
    write_dataset(pytester, [REFUSED, yaml, {**REFUSED, "id": "missing", "solution": ["nc -l 1"]}])
    pytester.runpytest("--llm-model=oracle", "--llm-report=out").assert_outcomes(failed=3)
    capsys.readouterr()
    assert main(["gaps", "out", "--out", "g", "--no-replay"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gaps: 3 of 3 tool calls failed, 3 gaps; top: ")
    assert (
        "; the sandbox's own refusals (tool gaps): unsupported feature: python3: module re "
        "disabled, unsupported feature: python3: module yaml not available -> "
    ) in lines[0]
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["Gap", "Calls", "Tasks", "Likely", "tool", "gap"]
    rows = {line.partition("  ")[0]: line for line in table[1:]}
    assert rows["unsupported feature: python3: module re disabled"].endswith(
        "  1      1  bashkit python3: module re disabled"
    )
    assert rows["unsupported feature: python3: module yaml not available"].endswith(
        "  1      1  bashkit python3: module yaml not available"
    )
    assert rows["missing command: nc"].endswith("  1      1")
