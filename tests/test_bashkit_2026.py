"""Today's bashkit-eval (October 2026): new task fields, setup and verify, solutions files,
generate mode, and the upstream dataset itself under oracle and nop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report, write_dataset

from pytest_llmtool.kinds.bash.phases import extract_script

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bashkit-eval-2026-10"
CHECK_OUT = [{"check": "file_contains:/out/done.txt:ok"}]


def task(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "t",
        "category": "c",
        "prompt": "Write ok to /out/done.txt.",
        "expectations": CHECK_OUT,
        "solution": ["mkdir -p /out && echo ok > /out/done.txt"],
    }
    return {**base, **fields}


# --- the fields ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "batch"}, "mode: Input should be 'agent', 'runtime' or 'generate'"),
        ({"difficulty": "easy"}, "difficulty: Input should be 'basic', 'repo' or 'hard'"),
        ({"max_turns": 0}, "max_turns: Input should be greater than or equal to 1"),
        ({"setup": 3}, "setup: Input should be a valid string"),
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
        (
            {"mode": "generate", "solution": ["a", "b"]},
            "a generate task's reference is one script",
        ),
    ],
)
def test_new_fields_are_validated_strictly(
    pytester: pytest.Pytester, fields: dict[str, Any], message: str
) -> None:
    write_dataset(pytester, [task(**fields), task(id="fine")])
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*data.jsonl:1: *{message}*"])


def test_mode_and_difficulty_are_markers(pytester: pytest.Pytester) -> None:
    write_dataset(
        pytester,
        [task(id="a", difficulty="hard"), task(id="b", mode="runtime"), task(id="c")],
    )
    result = pytester.runpytest("--llm-model=oracle", "-m", "llm(difficulty='hard')")
    result.assert_outcomes(passed=1, deselected=2)
    result = pytester.runpytest("--llm-model=oracle", "-m", "llm(mode='runtime')", "-v")
    result.stdout.fnmatch_lines(["*::b?oracle? PASSED*"])


def test_a_task_runs_with_its_own_turn_budget(pytester: pytest.Pytester) -> None:
    steps = [f"echo {i}" for i in range(5)] + ["mkdir -p /out && echo ok > /out/done.txt"]
    write_dataset(pytester, [task(max_turns=3, solution=steps)])
    pytester.runpytest("--llm-model=oracle", "--llm-report=out").assert_outcomes(failed=1)
    (result,) = read_report(pytester)["results"]
    assert result["trace"]["turns"] == 3 and not result["trace"]["natural_stop"]


# --- setup and verify ----------------------------------------------------------------------


def test_setup_runs_before_the_agent_and_both_agents_start_from_it(
    pytester: pytest.Pytester,
) -> None:
    setup = "mkdir -p /srv && echo seeded > /srv/state"
    check = [{"check": "file_contains:/srv/state:seeded"}, {"check": "exit_code:0"}]
    write_dataset(pytester, [task(setup=setup, expectations=check, solution=["cat /srv/state"])])
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)  # nop fails exit_code only: no tool call
    by_model = {r["model"]: r for r in read_report(pytester)["results"]}
    assert by_model["oracle"]["trace"]["tool_calls"][0]["stdout"] == "seeded\n"
    assert by_model["nop"]["score"]["results"][0]["passed"]  # the file was there for nop too


def test_a_failing_setup_is_an_infrastructure_error_showing_its_stderr(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(
        pytester,
        [
            task(id="broken", setup="echo fine\nfalse\necho never"),
            task(id="lacks", setup="git init -q /repo"),
            task(id="fine"),
        ],
    )
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*task broken?oracle?*",
            "infrastructure error: SandboxError: the task's setup failed (exit 1)",
            "*task lacks?oracle?*",
            "*setup failed (exit 127): it needs `git`, which this bashkit sandbox does not have",
            "bash: line 3: git: command not found",
        ]
    )


def test_verify_runs_in_a_fresh_shell_whatever_the_model_left(pytester: pytest.Pytester) -> None:
    # The agent sets -e, defines functions shadowing commands, moves away, exports a
    # variable and forges verify.out; verify sees none of it and its output is the real one.
    forge = (
        "set -e; cat() { echo FORGED; }; bash() { echo FORGED; }; cd /tmp; export WHO=model; "
        "mkdir -p /.eval && echo FORGED > /.eval/verify.out; mkdir -p /out; echo ok > /out/done.txt"
    )
    verify = 'cat /out/done.txt; pwd; echo "who=${WHO:-nobody}"; false; echo after'
    check = [{"check": "file_equals:/.eval/verify.out:ok\n/home/eval\nwho=nobody\nafter\n"}]
    write_dataset(pytester, [task(verify=verify, expectations=check, solution=[forge])])
    result = pytester.runpytest("--llm-model=oracle", "-rA")
    result.assert_outcomes(passed=1)


# --- solutions files ---------------------------------------------------------------------


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_solutions_beside_a_dataset_give_the_oracle_its_steps(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [task(id="a", solution=None), task(id="b", solution=None)])
    write_lines(
        pytester.path / "solutions.jsonl",
        [{"id": "a", "steps": ["mkdir -p /out", "echo ok > /out/done.txt"]}],
    )
    result = pytester.runpytest("--llm-model=oracle", "-v")
    result.assert_outcomes(passed=1, skipped=1)  # b has no reference: skipped, as before
    result.stdout.fnmatch_lines(["*data.jsonl::a?oracle? PASSED*"])


def test_conflicting_and_orphan_solutions_are_errors_naming_both_places(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, [task(id="a"), task(id="b", solution=None)])
    write_lines(
        pytester.path / "solutions.jsonl",
        [
            {"id": "a", "steps": ["echo different"]},
            {"id": "b", "steps": ["mkdir -p /out && echo ok > /out/done.txt"]},
            {"id": "ghost", "steps": ["true"]},
        ],
    )
    write_lines(
        pytester.path / "more-solutions.jsonl",
        [{"id": "b", "steps": ["mkdir -p /out && echo ok > /out/done.txt"]}],  # the same: fine
    )
    result = pytester.runpytest("--llm-model=oracle")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*data.jsonl:1: two different reference solutions for 'a': "
            "inline at data.jsonl:1 and solutions.jsonl:1*",
            "*solutions.jsonl:3: no task of this folder has the id 'ghost'*",
        ]
    )


def test_an_explicit_solutions_file(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [task(solution=None)])
    elsewhere = pytester.mkdir("refs") / "mine.jsonl"
    write_lines(elsewhere, [{"id": "t", "steps": ["mkdir -p /out && echo ok > /out/done.txt"]}])
    pytester.runpytest("data.jsonl", "--llm-model=oracle", f"--llm-solutions={elsewhere}")
    result = pytester.runpytest("data.jsonl", "--llm-model=oracle", f"--llm-solutions={elsewhere}")
    result.assert_outcomes(passed=1)


# --- generate mode -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "script", "how"),
    [
        ("Here:\n```python\nprint(1)\n```\n```Bash\necho hi\n```\n", "echo hi\n", "fenced"),
        ("```\necho untagged\n```\n```sh\necho sh\n```", "echo sh\n", "fenced"),
        ("```\necho untagged\n```", "echo untagged\n", "fenced"),
        (
            "```bash\necho a\n  ```not a fence\necho b",
            "echo a\n  ```not a fence\necho b\n",
            "fenced",
        ),
        ("  echo raw  \n", "echo raw", "raw"),
        ("```python\nprint(1)\n```", None, None),
        ("", None, None),
    ],
)
def test_the_script_is_extracted_by_upstreams_rule(
    reply: str, script: str | None, how: str | None
) -> None:
    assert extract_script(reply) == (script, how)


def gen_task(**fields: Any) -> dict[str, Any]:
    return task(mode="generate", prompt="Write a script that writes ok to /out/done.txt.", **fields)


def test_generate_under_oracle_and_nop(pytester: pytest.Pytester) -> None:
    write_dataset(pytester, [gen_task()])
    result = pytester.runpytest("--llm-summary=full", "--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    by_model = {r["model"]: r for r in read_report(pytester)["results"]}
    oracle, nop = by_model["oracle"]["generate"], by_model["nop"]["generate"]
    assert oracle["script_found"] and oracle["extracted"] == "fenced"
    assert oracle["exit_code"] == 0 and not oracle["timed_out"]
    assert nop["extracted"] == "raw"  # its words are run as a script, and fail the checks
    summary = read_report(pytester)["by_model"]["oracle"]
    assert summary["generate"]["passed"] == 1 and summary["by_mode"]["generate"]["tasks"] == 1
    result.stdout.fnmatch_lines(["Generate*Script found*First script passed*"])


@pytest.mark.parametrize(
    "model", ["anthropic:claude-haiku-4-5", "openai:gpt-5.2", "openai-responses:gpt-5"]
)
def test_generate_and_turn_budget_through_the_real_clients(
    pytester: pytest.Pytester, server: FakeLLMServer, model: str
) -> None:
    script = "mkdir -p /out\necho ok > /out/done.txt"
    server.script(gen_task()["prompt"], [Turn(text=f"Sure.\n```bash\n{script}\n```\nDone.")])
    looping = "Loop, please."
    server.script(looping, [Turn(tool_calls=[f"echo {i}"]) for i in range(5)])
    write_dataset(pytester, [gen_task(id="g"), task(id="loop", prompt=looping, max_turns=2)])
    result = pytester.runpytest(f"--llm-model={model}", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    by_id = {r["task_id"]: r for r in read_report(pytester)["results"]}
    assert by_id["g"]["generate"]["script_bytes"] == len(script) + 1
    assert by_id["loop"]["trace"]["turns"] == 2
    first = next(r.body for r in server.requests if "Write a script" in json.dumps(r.body))
    assert "tools" not in first  # no tools offered (Chat Completions rejects an empty list)


# --- the upstream dataset ------------------------------------------------------------------


@pytest.fixture
def upstream(pytester: pytest.Pytester) -> Path:
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is not present")
    for path in DATA.glob("*.jsonl"):
        (pytester.path / path.name).write_bytes(path.read_bytes())
    return pytester.path


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_october_dataset_runs_as_upstreams_ci_would(
    pytester: pytest.Pytester, upstream: Path, workers: list[str]
) -> None:
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", *workers)
    assert "not permitted" not in result.stdout.str()
    report = read_report(pytester)
    oracle = [r for r in report["results"] if r["model"] == "oracle"]
    nop = [r for r in report["results"] if r["model"] == "nop"]
    errors = report["errors"]
    # 121 items a model: 88 + 15 + the hard and repo files' 10 + 8 again.
    assert len(nop) + sum(1 for e in errors if e["model"] == "nop") == 121
    assert not any(all(c["passed"] for c in r["score"]["results"]) for r in nop)
    # Every error is a setup the bashkit sandbox cannot run, never a model failure.
    assert all("the task's setup failed" in e["message"] for e in errors)
    # The oracle passes every agent and generate task whose reference the sandbox can run;
    # what fails is the runtime mode, where bashkit's Python lacks modules (see the note).
    failed = {r["task_id"] for r in oracle if not all(c["passed"] for c in r["score"]["results"])}
    assert all(r["mode"] == "runtime" for r in oracle if r["task_id"] in failed)
    assert sum(1 for r in oracle if r["mode"] == "generate") == 15
    assert len(oracle) - len(failed) >= 24
