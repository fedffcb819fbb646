"""Expectation checks: parse them when a dataset loads, score them after a run.

Semantics are bashkit-eval's: type and argument split at the first colon, file checks split
the argument again at the next colon; `exit_code` sees the last call (-1 with none), stdout
checks pass when any call matches, `stderr_empty` needs every call clean, file checks read
the sandbox after the run. Ours: `trajectory:<assertion>:<argument>` checks the calls the
agent made (`pytest_llmtool/trajectory/`). Nothing here knows about pytest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_llmtool.records import AgentTrace, ScoreResult, TaskScore
from pytest_llmtool.sandbox import FileView
from pytest_llmtool.trajectory.assertions import TrajectoryAssertion, fail_closed
from pytest_llmtool.trajectory.assertions import parse_check as parse_trajectory
from pytest_llmtool.trajectory.calls import calls_of

# Check types whose argument is `/path:text`, and those that take a regex somewhere.
_FILE_TEXT = {"file_contains", "file_not_contains", "file_line_regex", "file_equals", "symlink"}
_REGEX = {"stdout_regex", "file_line_regex"}
_INT_ARG = {"exit_code", "tool_calls_min", "tool_calls_max"}
_PATH_ONLY = {"file_exists", "dir_exists"}
CHECK_TYPES = frozenset(
    {"stdout_contains", "stderr_empty", "llm_judge", "trajectory"}
    | _FILE_TEXT
    | _REGEX
    | _INT_ARG
    | _PATH_ONLY
)


@dataclass(frozen=True)
class Check:
    """A parsed check string; `path`/`text` are set for file checks, `text` for the rest,
    `trajectory` for a `trajectory:` check."""

    spec: str
    kind: str
    text: str
    path: str = ""
    trajectory: TrajectoryAssertion | None = None


def is_guardrail(check: Check) -> bool:
    """A check whose failure fails the item whatever else it did, and skips the judge: a
    `trajectory:forbidden:` check."""
    return check.trajectory is not None and check.trajectory.guardrail


def parse_check(spec: str) -> Check:
    """Parse and validate one check string; raise ValueError saying what is wrong."""
    kind, _, arg = spec.partition(":")
    if kind not in CHECK_TYPES:
        known = ", ".join(sorted(CHECK_TYPES))
        raise ValueError(f"unknown check type {kind!r} (known: {known})")
    if kind in _INT_ARG:
        try:
            int(arg)
        except ValueError:
            raise ValueError(f"{kind} needs an integer, got {arg!r}") from None
        return Check(spec, kind, arg)
    if kind == "trajectory":
        return Check(spec, kind, arg, trajectory=parse_trajectory(arg))
    if kind in _PATH_ONLY:
        if not arg:
            raise ValueError(f"{kind} needs a path: {kind}:/path")
        return Check(spec, kind, "", path=arg)
    if kind in _FILE_TEXT:
        path, sep, text = arg.partition(":")
        if not path or not sep:
            raise ValueError(f"{kind} needs a path and a value: {kind}:/path:value")
        check = Check(spec, kind, text, path=path)
    else:
        check = Check(spec, kind, arg)
    if kind in _REGEX:
        try:
            re.compile(check.text)
        except re.error as exc:
            raise ValueError(f"{kind} pattern {check.text!r} does not compile: {exc}") from None
    return check


def score_task(
    task_id: str, expectations: list[tuple[Check, float]], trace: AgentTrace, files: FileView
) -> TaskScore:
    results = [evaluate_check(check, weight, trace, files) for check, weight in expectations]
    return TaskScore.of(task_id, results)


def evaluate_check(check: Check, weight: float, trace: AgentTrace, files: FileView) -> ScoreResult:
    if check.kind == "llm_judge":
        return ScoreResult(
            check=check.spec, passed=True, detail="no judge model set (weight 0)", weight=0.0
        )
    passed, detail = _EVALUATORS[check.kind](check, trace, files)
    return ScoreResult(check=check.spec, passed=passed, detail=detail, weight=weight)


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _exit_code(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    expected = int(check.text)
    last = trace.last_tool_response
    if last is None:
        return expected == -1, f"expected {expected}, got -1: the agent made no tool call"
    return last.exit_code == expected, f"expected {expected}, got {last.exit_code}"


def _stdout_contains(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    if any(check.text in c.stdout for c in trace.tool_calls):
        return True, "found"
    return False, f"{check.text!r} not found in any tool output"


def _stdout_regex(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    pattern = re.compile(check.text)
    if any(pattern.search(c.stdout) for c in trace.tool_calls):
        return True, "matched"
    return False, f"pattern {check.text!r} not matched"


def _stderr_empty(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    dirty = next((c.stderr for c in trace.tool_calls if c.stderr), None)
    if dirty is None:
        return True, "all stderr empty"
    return False, f"stderr: {_shorten(dirty).rstrip()}"


def _file_exists(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    if files.exists(check.path):
        return True, "exists"
    return False, "not found"


def _dir_exists(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    if files.is_dir(check.path):
        return True, "directory exists"
    return False, "directory not found"


def _file_contains(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    content = files.read_text(check.path)
    if content is None:
        return False, f"cannot read {check.path}"
    if check.text in content:
        return True, "found in file"
    return False, f"{check.text!r} not found in {check.path}"


def _file_not_contains(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    content = files.read_text(check.path)
    if content is None:
        return False, f"cannot read {check.path}"
    if check.text in content:
        return False, f"{check.text!r} still present in {check.path}"
    return True, "absent from file"


def _file_line_regex(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    content = files.read_text(check.path)
    if content is None:
        return False, f"cannot read {check.path}"
    pattern = re.compile(check.text)
    # Lines as Rust's `str::lines` cuts them: no empty line after a final newline, none in
    # an empty file, and a `\r\n` file reads the same as a `\n` one.
    lines = content.removesuffix("\n").split("\n") if content else []
    if any(pattern.search(line.removesuffix("\r")) for line in lines):
        return True, "matched file line"
    return False, f"pattern {check.text!r} not matched by any line in {check.path}"


def _file_equals(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    content = files.read_text(check.path)
    if content is None:
        return False, f"cannot read {check.path}"
    actual, expected = content.rstrip("\n"), check.text.rstrip("\n")
    if actual == expected:
        return True, "file matches"
    got, want = actual.split("\n"), expected.split("\n")
    line = next(
        (i for i, (a, e) in enumerate(zip(got, want, strict=False)) if a != e),
        min(len(got), len(want)),
    )

    def show(lines: list[str]) -> str:
        return repr(_shorten(lines[line], 120)) if line < len(lines) else "<end of file>"

    return False, f"{check.path} differs at line {line + 1}: expected {show(want)}, got {show(got)}"


def _resolve(link: str, target: str) -> str:
    """Fold `.`/`..` of a link target relative to the link's folder, as `readlink -m`."""
    parts: list[str] = []
    if not target.startswith("/"):
        parts.extend(p for p in link.rsplit("/", 1)[0].split("/") if p)
    for segment in target.split("/"):
        if segment == "..":
            if parts:
                parts.pop()
        elif segment not in ("", "."):
            parts.append(segment)
    return "/" + "/".join(parts)


def _symlink(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    actual = files.read_link(check.path)
    if actual is None:
        return False, f"{check.path} is not a symlink"
    same = _resolve(check.path, actual) == _resolve(check.path, check.text)
    return same, f"{check.path} -> {actual}"


def _trajectory(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    assert check.trajectory is not None
    return fail_closed(check.trajectory, calls_of(trace), trace.turns)


def _tool_calls_min(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    n = trace.tool_call_count
    return n >= int(check.text), f"{n} tool calls (min {check.text})"


def _tool_calls_max(check: Check, trace: AgentTrace, files: FileView) -> tuple[bool, str]:
    n = trace.tool_call_count
    return n <= int(check.text), f"{n} tool calls (max {check.text})"


_EVALUATORS = {
    "exit_code": _exit_code,
    "stdout_contains": _stdout_contains,
    "stdout_regex": _stdout_regex,
    "stderr_empty": _stderr_empty,
    "file_exists": _file_exists,
    "dir_exists": _dir_exists,
    "file_contains": _file_contains,
    "file_not_contains": _file_not_contains,
    "file_line_regex": _file_line_regex,
    "file_equals": _file_equals,
    "symlink": _symlink,
    "tool_calls_min": _tool_calls_min,
    "tool_calls_max": _tool_calls_max,
    "trajectory": _trajectory,
}
