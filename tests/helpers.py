"""Data and plain functions the test modules share; the fixtures are in `conftest.py`.

Imported explicitly (`from helpers import ...`): test modules never import each other.
"""

from __future__ import annotations

import functools
import json
import textwrap
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from pytest_llmtool.records import SCHEMA_PATH, AgentTaskMetrics, PytestSummary, RunMetadata
from pytest_llmtool.sandbox.isolated import BwrapUnavailable, require_bwrap

# The API key the `server` fixture puts in the environment: no output may ever show it.
SERVER_KEY = "sk-test-DO-NOT-LEAK-4f9c2a"

# Four tasks whose scores under each agent are worked out by hand:
#   oracle: alpha 4/4 pass, beta 2.5/2.5 pass, gamma 1/2 fail, delta skipped (no solution)
#   nop:    alpha 0/4 fail, beta 1.5/2.5 fail, gamma 0/2 fail, delta 1/1 pass
TASKS: list[dict[str, Any]] = [
    {
        "id": "alpha",
        "category": "files",
        "description": "copy a file and count its lines",
        "prompt": "Copy /in/a.txt to /out/b.txt and print its line count.",
        "files": {"/in/a.txt": "x\ny\n"},
        "expectations": [
            {"check": "exit_code:0"},
            {"check": "file_exists:/out/b.txt", "weight": 2},
            {"check": "stdout_contains:2"},
        ],
        "solution": ["mkdir -p /out && cp /in/a.txt /out/b.txt", "wc -l < /out/b.txt"],
    },
    {
        "id": "beta",
        "category": "text",
        "description": "greet",
        "prompt": "Say hello.",
        "expectations": [
            {"check": "stdout_contains:hello"},
            {"check": "stderr_empty", "weight": 0.5},
            {"check": "tool_calls_max:5"},
        ],
        "solution": "echo hello",
    },
    {
        "id": "gamma",
        "category": "text",
        "description": "a task the reference gets half right",
        "prompt": "Show /in/c.txt.",
        "files": {"/in/c.txt": "abc"},
        "expectations": [{"check": "exit_code:0"}, {"check": "file_contains:/in/c.txt:zzz"}],
        "solution": ["cat /in/c.txt"],
    },
    {
        "id": "delta",
        "category": "misc",
        "description": "no solution: the oracle skips it, nop passes it",
        "prompt": "Do nothing.",
        "expectations": [{"check": "exit_code:-1"}],
    },
]


def write_dataset(pytester: pytest.Pytester, lines: list[Any], name: str = "data") -> Path:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    return pytester.makefile(".jsonl", **{name: text + "\n"})


@functools.cache
def _validator(closed: bool) -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return Draft202012Validator(_closed(schema) if closed else schema)


def _closed(schema: Any) -> Any:
    """The schema with no room for keys it does not name (objects with `properties` only):
    a report that validates against it is wholly described by the schema."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: _closed(v) for k, v in schema.items()}
    if "properties" in closed:
        closed.setdefault("additionalProperties", False)
    return closed


def schema_errors(report: Any, closed: bool = False) -> list[str]:
    """Where `report` breaks the shipped `report.schema.json`, one line per problem."""
    errors = _validator(closed).iter_errors(report)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def read_report(pytester: pytest.Pytester, directory: str = "out") -> dict[str, Any]:
    """`report.json` of the last run, checked against the shipped schema on the way."""
    data: dict[str, Any] = json.loads((pytester.path / directory / "report.json").read_text())
    assert not schema_errors(data), schema_errors(data)[:5]
    return data


NOTE_TOOL = """\
#!/bin/bash
# A tiny note tool: one note per line in ./notes.txt.
case "$1" in
  add) shift; echo "$*" >> notes.txt; echo "added: $*";;
  list)
    if [ "$2" = "--json" ]; then
      printf '['; sep=""
      [ -f notes.txt ] && while read -r line; do
        printf '%s"%s"' "$sep" "$line"; sep=","
      done < notes.txt
      printf ']\\n'
    else
      cat notes.txt 2>/dev/null
    fi;;
  --help|help) echo "usage: note add TEXT | note list [--json]";;
  *) echo "note: unknown command '$1'" >&2; exit 2;;
esac
"""

RUBRIC = """\
criteria:
  - id: correctness
    weight: 0.6
    description: The notes hold what was asked.
  - id: efficiency
    weight: 0.4
    description: No wasted commands.
"""

PROMPT = "Add the notes 'milk' and 'eggs'."


def scenario(**overrides: Any) -> dict[str, Any]:
    """A scenario for the `project` fixture's note tool; the oracle passes it."""
    data: dict[str, Any] = {
        "name": "add_notes",
        "description": "Add two notes",
        "tags": ["smoke"],
        "template_folder": "template",
        "target": {"binary": "bin/note", "command_pattern": "note\\s+(\\S+)"},
        "task": {"prompt": PROMPT},
        "evaluation": {
            "gates": [
                {
                    "type": "command_json_path",
                    "command": "note list --json",
                    "path": "$",
                    "assertion": "len == 2",
                },
                {"type": "file_contains", "path": "notes.txt", "substring": "eggs"},
                {"type": "no_transcript_errors"},
            ]
        },
        "solution": ["note --help", "note add milk", "note add eggs"],
    }
    data.update(overrides)
    return data


def write_scenario(root: Path, data: dict[str, Any] | str, name: str = "scenario") -> Path:
    path = root / f"{name}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def write_guidance_comparison(root: Path) -> Path:
    """A scenario run with two guidance documents where only v2.md passes one more gate."""
    data = scenario(guidance=["v1.md", "v2.md"])
    gate = {"type": "file_contains", "path": "AGENTS.md", "substring": "note add"}
    data["evaluation"]["gates"].append(gate)  # only v2.md says "note add"
    return write_scenario(root, data)


# An optimization task: `pkg.work` sleeps 4 ms; the oracle copies in `fast/rows.py`.
SLOW = "import time\n\n\ndef work(n):\n    time.sleep(0.004)\n    return n * 2\n"
FAST = "def work(n):\n    return n * 2\n"
BROKEN = "def work(n):\n    return n * 3\n"
TEST = "from pkg.rows import work\n\n\ndef test_work():\n    assert work(2) == 4\n"
BENCH = textwrap.dedent(
    """\
    from pkg.rows import work


    def test_bench_work(benchmark):
        benchmark.pedantic(work, args=(3,), rounds=5, iterations=1)
    """
)
BENCH_CMD = (
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest benches -q -p no:cacheprovider "
    "-p pytest_benchmark.plugin "
    "--benchmark-json=$LLMTOOL_RESULTS/bench.json"
)
TEST_CMD = (
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest tests -q -p no:cacheprovider "
    "--junitxml=$LLMTOOL_RESULTS/junit.xml"
)


def write_project(root: Path) -> None:
    for path, content in {
        "project/pkg/__init__.py": "",
        "project/pkg/rows.py": SLOW,
        "project/tests/check_rows.py": TEST,
        "project/benches/bench_rows.py": BENCH,
        "project/benches/conftest.py": "",
        "project/pytest.ini": "[pytest]\npython_files = check_*.py bench_*.py\n",
        "project/fast/rows.py": FAST,
        "project/broken/rows.py": BROKEN,
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)


def task(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "faster_work",
        "category": "toy",
        "project": "project",
        "prompt": "Make work faster without changing its behaviour.",
        "solution": {"commands": ["cp fast/rows.py pkg/rows.py"]},
        "benchmarks": {
            "command": BENCH_CMD,
            "format": "pytest-benchmark",
            "output": "bench.json",
            "rounds": 2,
        },
        "tests": {"command": TEST_CMD, "format": "junit", "output": "junit.xml"},
    }
    body.update(overrides)
    return {"optimization": body}


def write_task(root: Path, data: dict[str, Any], name: str = "task") -> Path:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_agent(root: Path, body: str) -> Path:
    agent = root / "agent.sh"
    agent.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    agent.chmod(0o755)
    return agent


def attempt_metrics(**overrides: Any) -> AgentTaskMetrics:
    """An optimization attempt's metrics as FC-Eval scores a success: its tests and snapshot
    held, one benchmark, valid, at 1.2x; `overrides` sets any field."""
    fields: dict[str, Any] = {
        "per_benchmark_speedups": [],
        "pytest_summary": PytestSummary(passed=1),
        "pytest_failed": False,
        "snapshot_failed": False,
        "success": True,
        "fallback_to_baseline": False,
        "num_benchmarks": 1,
        "num_valid_benchmarks": 1,
        "task_speedup": 1.2,
    }
    return AgentTaskMetrics(**{**fields, **overrides})


def run_metadata() -> RunMetadata:
    """The least a run report's metadata holds, for reports built in unit tests."""
    return RunMetadata(
        plugin="0",
        pytest="9",
        python="3.11",
        models=[],
        max_turns=1,
        command_line=[],
        started="s",
        finished="f",
        exit_status=0,
    )


def _bwrap_problem() -> str | None:
    try:
        require_bwrap()
    except BwrapUnavailable as exc:
        return str(exc)
    return None


# Why bubblewrap cannot jail a command here (None where it can): tests of the jail skip saying so.
BWRAP_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap unusable here: {BWRAP_PROBLEM}"
)


class Markup(HTMLParser):
    """Every tag and attribute name of a fragment, as a browser would parse it."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)


WAIT_SECONDS = 120.0  # a bound on waits for something that normally takes a second or two


def wait_for(what: str, condition: Callable[[], object], log: Path) -> None:
    """Poll `condition` until it is truthy; fail (with the run's output) only if it never is."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}\n{log.read_text() if log.exists() else ''}")
