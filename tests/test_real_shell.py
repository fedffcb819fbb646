"""Bash tasks in a real shell (`--llm-bash=container[:IMAGE]`), and the gap report's
attribution of each bashkit failure (`--llm-bash=bashkit,container`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from containers import need_docker, requires_docker
from helpers import read_report, write_dataset

from pytest_llmtool.gaps import Attribution, GapReport
from pytest_llmtool.gaps.writer import markdown, terminal_line
from pytest_llmtool.kinds.bash.real_shell import GENERATE_SYSTEM, image_context, shell_tool
from pytest_llmtool.sandbox.container.engine import OWNER_LABEL
from pytest_llmtool.sandbox.container.owners import owner

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bashkit-eval-2026-10"

# The October dataset's reference solutions that fail in bashkit 0.20 (the oracle, run there
# first) and why; each passes in the real shell.
FAIL_IN_BASHKIT = {
    # Setup runs `git init`/`git commit`: the Python package's bashkit has no git.
    **dict.fromkeys(
        [
            "repo_clone_fix_failing_test",
            "repo_symlink_release_switch",
            "repo_path_bin_tool_fix",
            "repo_parallel_shards_background",
            "repo_report_sort_regression",
            "repo_jq_config_validation",
            "repo_release_branch_bump",
            "repo_parallel_runner_masks_failure",
            "hard_multi_bug_inventory",
            "hard_quoting_collect",
            "hard_pipefail_masking",
            "hard_rename_refactor",
            "hard_makefile_deps",
            "hard_trap_publish",
        ],
        "git: command not found (setup)",
    ),
    # Monty, bashkit's Python, lacks standard modules or refuses them.
    "rt_py_large_log": "Monty: str method missing in setup (AttributeError)",
    "rt_py_encodings": "Monty: no module base64 (setup)",
    "rt_py_sales_rollup": "Monty: module re disabled",
    "rt_py_jsonl_flatten": "Monty: no module csv",
    "rt_py_sessionize": "Monty: module re disabled",
    "rt_sqlite_hr_report": "Monty: no module csv",
    "rt_py_sqlite_stats": "Monty: no module sqlite3",
    "rt_state_csvq_tool": "Monty: no module argparse",
    "rt_pipeline_mail_domains": "Monty: no module collections",
    "rt_state_ledger_ingest": "Monty: module re disabled",
    "rt_py_toml_render": "Monty: no module tomllib",
}


def passed(result: dict[str, Any]) -> bool:
    return all(check["passed"] for check in result["score"]["results"])


def ours() -> list[str]:
    """This process's containers still present (pytester runs in it): none may outlive a
    run. Other sessions' containers on the same daemon are not ours."""
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={OWNER_LABEL}={owner()}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.split()


# --- without containers -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["zsh", "container:", "container,container:x", "docker"])
def test_an_unknown_shell_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    write_dataset(pytester, [{"id": "t", "category": "c", "prompt": "p", "expectations": []}])
    result = pytester.runpytest(f"--llm-bash={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-bash: expected bashkit, container, container:IMAGE*"])


def test_the_real_shell_claims_no_virtual_filesystem() -> None:
    tool, system = shell_tool()
    for text in (tool.description, system, GENERATE_SYSTEM):
        assert "virtual" not in text.lower() and "bashkit" not in text.lower()
    assert tool.input_schema["required"] == ["commands"]  # bashkit's schema, as the loop uses


def test_the_image_names_its_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMTOOL_BASE_IMAGE", raising=False)
    first = (image_context(tmp_path) / "Dockerfile").read_text()
    monkeypatch.setenv("LLMTOOL_BASE_IMAGE", "mirror/debian:12")
    second = (image_context(tmp_path) / "Dockerfile").read_text()
    assert "FROM local/debian:bookworm\n" in first and "FROM mirror/debian:12\n" in second


def test_a_scripting_tool_task_is_skipped_in_a_container_alone(pytester: pytest.Pytester) -> None:
    mock = {"param": "key", "responses": {"a": "alpha"}, "default": "unknown"}
    tool = {"name": "lookup", "description": "d", "schema": {"type": "object"}, "mock": mock}
    write_dataset(
        pytester,
        [
            {
                "id": "t",
                "category": "c",
                "prompt": "Look up a.",
                "tools": [tool],
                "expectations": [{"check": "stdout_contains:alpha"}],
            }
        ],
    )
    result = pytester.runpytest("--llm-bash=container", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*mock tools are bashkit builtins*--llm-bash=bashkit*"])


def test_a_bashkit_run_is_not_resumed_in_a_container(pytester: pytest.Pytester) -> None:
    write_dataset(
        pytester,
        [{"id": "t", "category": "c", "prompt": "p", "expectations": [], "solution": ["true"]}],
    )
    pytester.runpytest("--llm-model=oracle").assert_outcomes(passed=1)
    result = pytester.runpytest("--llm-model=oracle", "--llm-bash=container", "--llm-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*another run's journal (--llm-bash was None, is ?'container'?)*"])


def test_the_gap_report_says_whose_each_failure_is() -> None:
    report = GapReport(
        attribution=[
            Attribution(task="d.jsonl::a", model="m", cause="bashkit", detail="all pass"),
            Attribution(task="d.jsonl::b", model="m", cause="model", detail="1/1 fail"),
        ]
    )
    line = terminal_line(report, [])
    assert "bashkit failures replayed in a container: 1 bashkit's, 1 the model's ★" in line
    text = markdown(report)
    assert "## bashkit or the model" in text and "★ model" in text and "bashkit gap" in text


# --- in containers ------------------------------------------------------------------------


@pytest.fixture
def upstream(pytester: pytest.Pytester) -> Path:
    need_docker()
    if not DATA.is_dir():
        pytest.skip(f"{DATA} is not present")
    for name in ("eval-tasks.jsonl", "solutions.jsonl", "generate-tasks.jsonl"):
        (pytester.path / name).write_bytes((DATA / name).read_bytes())
    (pytester.path / "generate-solutions.jsonl").write_bytes(
        (DATA / "generate-solutions.jsonl").read_bytes()
    )
    return pytester.path


@requires_docker
def test_the_october_references_bashkit_fails_pass_in_the_real_shell(
    pytester: pytest.Pytester, upstream: Path
) -> None:
    result = pytester.runpytest(
        "--llm-model=oracle", "--llm-bash=container", "--llm-report=out", "--llm-concurrency=4"
    )
    report = read_report(pytester)
    assert report["metadata"]["bash_shells"] == ["container"]
    assert not report["errors"], report["errors"][:2]
    by_id = {r["task_id"]: r for r in report["results"]}
    failed = {t: by_id[t]["score"] for t in FAIL_IN_BASHKIT if not passed(by_id[t])}
    assert not failed, json.dumps(failed)[:2000]
    # Every reference passes: the agent, runtime and generate tasks, setup and verify.
    assert all(passed(r) for r in report["results"]), result.stdout.str()[-3000:]
    assert sum(r["mode"] == "generate" for r in report["results"]) == 15
    container = by_id["repo_release_branch_bump"]["container"]
    assert by_id["repo_release_branch_bump"]["shell"] == "container"
    assert container["image"].startswith("llmtool/bash:") and container["image_id"].startswith(
        "sha256:"
    )
    assert container["network"] == "none"
    assert not ours()


def solved(task_id: str, steps: list[str], checks: list[str], **more: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "category": "c",
        "prompt": "p",
        "expectations": [{"check": c} for c in checks],
        "solution": steps,
        **more,
    }


@requires_docker
def test_both_shells_and_whose_each_bashkit_failure_is(pytester: pytest.Pytester) -> None:
    need_docker()
    write_dataset(
        pytester,
        [
            # CPython's csv: bashkit's Python has none, so this fails there alone.
            solved(
                "needs_csv",
                ["python3 -c 'import csv, sys; csv.writer(sys.stdout).writerow([1, 2])'"],
                ["stdout_contains:1,2", "exit_code:0"],
            ),
            # A wrong reference fails in both: the model's.
            solved("wrong", ["echo no > /tmp/x"], ["file_contains:/tmp/x:yes"]),
            # Bashkit's git log of commits, kept by the image's hook; and who and where.
            solved(
                "git_and_who",
                [
                    "mkdir -p ~/r && cd ~/r && git init -q && echo a > f && git add f"
                    " && git commit -q -m 'fix: a|b'",
                    "whoami; hostname; pwd",
                ],
                [
                    r"file_line_regex:/home/eval/r/.git/commits:^[0-9a-f]+\|sandbox\|"
                    r"sandbox@bashkit.local\|[0-9]+\|fix: a\\\|b$",
                    "stdout_contains:eval\nbashkit-eval\n/home/eval/r",
                ],
            ),
        ],
    )
    result = pytester.runpytest(
        "--llm-model=oracle",
        "--llm-bash=container,bashkit",
        "--llm-report=out",
        "--llm-gaps=gaps",
        "-v",
    )
    result.stdout.fnmatch_lines_random(
        [
            "*data.jsonl::needs_csv?oracle-bashkit? FAILED*",
            "*data.jsonl::needs_csv?oracle-container? PASSED*",
            "*data.jsonl::wrong?oracle-bashkit? FAILED*",
            "*data.jsonl::wrong?oracle-container? FAILED*",
            "*data.jsonl::git_and_who?oracle-container? PASSED*",
            "*bashkit failures replayed in a container: 2 bashkit's, 1 the model's ★*",
        ]
    )
    report = read_report(pytester)
    assert report["metadata"]["bash_shells"] == ["bashkit", "container"]
    shells = {(r["task_id"], r["shell"]): r for r in report["results"]}
    assert shells[("needs_csv", "bashkit")]["real_shell_passed"] is True
    assert shells[("wrong", "bashkit")]["real_shell_passed"] is False
    assert shells[("needs_csv", "container")]["real_shell_passed"] is None
    gaps = json.loads((pytester.path / "gaps" / "gaps.json").read_text())
    causes = {a["task"]: a["cause"] for a in gaps["attribution"]}
    assert causes == {
        "data.jsonl::needs_csv": "bashkit",
        "data.jsonl::wrong": "model",
        "data.jsonl::git_and_who": "bashkit",
    }
    assert "★ model" in (pytester.path / "gaps" / "gaps.md").read_text()
    assert not ours()
