"""Harbor trials end to end: the held-out dataset (tests/data/harbor/) under the oracle and
nop, serially and under xdist; the built-in agent's calls exec'd in the container; a missing
image and a failed build as errors; and the trial's pure parts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agent_clis import requires_cli, search_path
from containers import need_docker, requires_docker
from fake_llm_server import FakeLLMServer, ToolCall, Turn
from helpers import read_report

from pytest_llmtool.kinds.harbor.agents import missing_solution, task_files
from pytest_llmtool.kinds.harbor.config import TaskConfig
from pytest_llmtool.kinds.harbor.task import HarborTask, Step
from pytest_llmtool.kinds.harbor.trial import TrialBroken, _agent_result, _joined, resolved_env
from pytest_llmtool.records import AgentInfo, AgentTrace
from pytest_llmtool.sandbox.container.engine import LABEL, OWNER_LABEL, Engine
from pytest_llmtool.sandbox.container.owners import owner

DATASET = Path(__file__).parent / "data" / "harbor"

# task -> (reward under the oracle, under nop); no-network's nop reward is 1 by design (it
# checks the container, which nop leaves as it is).
REWARDS = {
    "llmtool/hello": (1.0, 0.0),
    "llmtool/json-rewards": (1.0, 0.0),
    "llmtool/exit-nonzero": (1.0, 0.0),
    "llmtool/agent-timeout": (1.0, 0.0),
    "llmtool/multi-step": (1.0, 0.0),
    "llmtool/no-network": (1.0, 1.0),
}


def _containers(*filters: str) -> list[str]:
    engine = Engine.find()
    args = [engine.cli, "ps", "-aq", "--filter", f"label={LABEL}"]
    for f in filters:
        args += ["--filter", f]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> Path:
    need_docker()
    shutil.copytree(DATASET, pytester.path / "harbor")
    return pytester.path / "harbor"


def _by_item(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["task_id"], r["model"]): r for r in report["harbor_results"]}


def _check_dataset(report: dict[str, Any]) -> None:
    """Every task's verdict and rewards as the dataset designs them."""
    results = _by_item(report)
    assert set(results) == {(t, m) for t in REWARDS for m in ("oracle", "nop")}
    for (task, model), r in results.items():
        expected = REWARDS[task][model == "nop"]
        assert r["reward"] == expected, (task, model, r["rewards"], r["reward_error"])
        assert r["passed"] is (expected >= 1.0)
        assert r["agent"] == model
        assert r["container"]["network"] == "none"
        assert r["container"]["image_id"].startswith("sha256:")
        for phase in ("environment_setup", "agent_execution", "verifier"):
            assert r[phase]["started_at"] <= r[phase]["finished_at"], (task, phase)
    oracle = results["llmtool/json-rewards", "oracle"]
    assert oracle["reward_source"] == "reward.json"
    assert oracle["rewards"] == {"reward": 1, "lines": 3, "style": 0.5, "as_verifier_user": 1}
    assert oracle["container"]["image"] == "local/debian:bookworm"  # a prebuilt image
    assert results["llmtool/json-rewards", "nop"]["rewards"]["lines"] == 0
    assert results["llmtool/hello", "oracle"]["reward_source"] == "reward.txt"
    # test.sh exits 3 after writing reward 1: the exit status is ignored
    assert "exits 3 on purpose" in results["llmtool/exit-nonzero", "oracle"]["verifier_output"]
    # the agent ran out of time; the verifier still ran and saw what it had done
    timed_out = results["llmtool/agent-timeout", "oracle"]
    assert timed_out["agent_timed_out"] is True and timed_out["agent_exit_code"] == 124
    assert timed_out["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert results["llmtool/agent-timeout", "nop"]["agent_timed_out"] is False
    steps = results["llmtool/multi-step", "oracle"]["steps"]
    assert [(s["step_name"], s["rewards"]) for s in steps] == [
        ("first", {"reward": 1.0}),
        ("second", {"reward": 1.0}),
    ]
    # under nop the first step is below its min_reward: the second never runs
    steps = results["llmtool/multi-step", "nop"]["steps"]
    assert [(s["step_name"], s["rewards"]) for s in steps] == [("first", {"reward": 0.0})]
    network = results["llmtool/no-network", "nop"]["verifier_output"]
    assert "interfaces: lo ; routes: 0" in network


@requires_docker
def test_the_dataset_under_oracle_and_nop(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", "-rA")
    result.assert_outcomes(passed=7, failed=5)
    result.stdout.fnmatch_lines(
        [
            "*PASSED*harbor/hello/task.toml::llmtool/hello?oracle?*",
            "*FAILED*harbor/hello/task.toml::llmtool/hello?nop?*",
        ]
    )
    report = read_report(pytester)
    _check_dataset(report)
    assert set(report["harbor"]) >= {"oracle", "nop"}
    logs = Path(_by_item(report)["llmtool/hello", "oracle"]["artifacts"]) / "logs"
    assert (logs / "agent" / "oracle.txt").is_file()
    assert (logs / "verifier" / "reward.txt").read_text().strip() == "1"
    assert _containers(f"label={OWNER_LABEL}={owner()}") == []


@requires_docker
def test_the_dataset_under_xdist(pytester: pytest.Pytester, dataset: Path) -> None:
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", "-n", "2")
    result.assert_outcomes(passed=7, failed=5)
    report = read_report(pytester)
    _check_dataset(report)
    images = {r["container"]["image_id"] for r in report["harbor_results"]}
    built = images - {_by_item(report)["llmtool/json-rewards", "oracle"]["container"]["image_id"]}
    for image in built:  # the workers' containers are gone (the base image's are others' too)
        assert _containers(f"ancestor={image}") == [], image


@requires_docker
def test_the_builtin_agent_runs_its_commands_in_the_container(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer
) -> None:
    instruction = (dataset / "hello" / "instruction.md").read_text()
    command = "echo hello > /app/hello.txt && cat /app/hello.txt /etc/debian_version"
    server.script(instruction, [Turn(tool_calls=[command]), Turn(text="Done.")])
    result = pytester.runpytest(
        "--llm-model=haiku", "--llm-report=out", "harbor/hello", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    assert not Path("/app/hello.txt").exists()  # written in the container, not here
    (run,) = read_report(pytester)["harbor_results"]
    assert run["agent"] == "builtin" and run["reward"] == 1.0
    (call,) = run["trace"]["tool_calls"]
    assert call["commands"] == command and call["stdout"].startswith("hello\n12.")
    assert run["trace"]["turns"] == 2
    assert run["agent_result"]["n_output_tokens"] == run["trace"]["total_output_tokens"]
    assert _containers(f"label={OWNER_LABEL}={owner()}") == []


SABOTAGE = (
    "echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
    "mkdir -p /tests/test.sh; rm -rf /logs/verifier; ln -s /etc /logs/verifier; "
    "ln -s /etc/passwd /logs/agent/passwd; ln -s ../../../../../../../tmp/c39-escape "
    "/logs/agent/escape"
)


@requires_docker
def test_an_agent_that_sabotages_the_verifier_is_graded_not_an_error(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer
) -> None:
    """Its own reward files are removed, a directory where test.sh goes and a link in place
    of /logs/verifier are undone, and links out of /logs are not followed when it is copied
    out: the item FAILS with the reward its work earned (none), it is not an ERROR."""
    instruction = (dataset / "hello" / "instruction.md").read_text()
    server.script(instruction, [Turn(tool_calls=[SABOTAGE]), Turn(text="Done.")])
    result = pytester.runpytest("--llm-model=haiku", "--llm-report=out", "harbor/hello")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["harbor_results"]
    assert run["rewards"] == {"reward": 0.0} and run["reward_source"] == "reward.txt"
    assert not Path("/tmp/c39-escape").exists()
    assert not any(p.is_symlink() for p in Path(run["artifacts"]).rglob("*"))
    assert _containers(f"label={OWNER_LABEL}={owner()}") == []


def _task(root: Path, toml: str, dockerfile: str | None = None) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("Do nothing.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (root / "environment").mkdir()
        (root / "environment" / "Dockerfile").write_text(dockerfile)


@requires_docker
def test_a_missing_image_and_a_failed_build_are_errors(pytester: pytest.Pytester) -> None:
    need_docker()
    _task(
        pytester.path / "absent",
        '[task]\nname = "c39/absent"\n[environment]\ndocker_image = "llmtool-c39/absent:none"\n',
    )
    _task(
        pytester.path / "broken",
        '[task]\nname = "c39/broken"\n',
        "FROM local/debian:bookworm\nRUN echo c39-build-marker && exit 7\n",
    )
    result = pytester.runpytest("--llm-model=nop", "-p", "no:randomly")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*infrastructure error: BuildFailed: image llmtool-c39/absent:none is not present*",
            "*infrastructure error: BuildFailed: building the image of*broken/environment failed*",
        ]
    )
    assert "c39-build-marker" in result.stdout.str()  # the build log's tail


def test_the_oracle_skips_a_task_without_a_solution(pytester: pytest.Pytester) -> None:
    _task(pytester.path / "plain", '[task]\nname = "c39/plain"\n', "FROM local/debian:bookworm\n")
    result = pytester.runpytest("--llm-model=oracle", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no solve.sh in solution/: the oracle agent runs*"])


def _harbor_task(path: Path, steps: tuple[str, ...] = ()) -> HarborTask:
    config = TaskConfig.model_validate({"steps": [{"name": s} for s in steps]})
    return HarborTask(
        path=path,
        config=config,
        name="t",
        task_id="t",
        instruction="",
        category="c",
        steps=tuple(Step(c, path / "steps" / c.name, "") for c in config.steps),
    )


def test_a_step_without_its_own_solution_falls_back_to_the_tasks(tmp_path: Path) -> None:
    task = _harbor_task(tmp_path, ("one", "two"))
    (tmp_path / "steps" / "one" / "solution").mkdir(parents=True)
    (tmp_path / "steps" / "one" / "solution" / "solve.sh").write_text("true\n")
    assert missing_solution(task) == (
        "no solve.sh in steps/two/solution/ nor solution/: the oracle agent runs the task's "
        "solution"
    )
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "solve.sh").write_text("true\n")
    assert missing_solution(task) is None


def test_uploads_follow_links_inside_the_task_and_never_outside(tmp_path: Path) -> None:
    task = tmp_path / "task"
    tests = task / "tests"
    tests.mkdir(parents=True)
    (task / "shared.sh").write_text("echo shared\n")
    (tests / "test.sh").symlink_to("../shared.sh")
    secret = tmp_path / "secret.txt"
    secret.write_text("host only\n")
    (tests / "leak.txt").symlink_to(secret)
    (tests / "passwd").symlink_to("/etc/passwd")
    assert task_files(tests, task) == {"test.sh": (task / "shared.sh").resolve()}


def test_phase_env_templates_are_read_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("C39_TOKEN", "from-host")
    monkeypatch.delenv("C39_ABSENT", raising=False)
    env = {"A": "${C39_TOKEN}", "B": "${C39_ABSENT:-fallback}", "C": "plain ${x}"}
    assert resolved_env(env, "[verifier]") == {
        "A": "from-host",
        "B": "fallback",
        "C": "plain ${x}",
    }
    with pytest.raises(TrialBroken, match=r"\[agent\]\.env K: \$\{C39_ABSENT\} is not set"):
        resolved_env({"K": "${C39_ABSENT}"}, "[agent]")


@requires_docker
@requires_cli("claude-code")
def test_an_agent_cli_runs_in_the_tasks_container(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", search_path())
    command = "echo hello > /app/hello.txt"
    server.script_containing(
        "/app/hello.txt",
        [Turn(tool_calls=[ToolCall("Bash", {"command": command})]), Turn(text="Done.")],
    )
    result = pytester.runpytest(
        "--llm-agent=claude-code", "--llm-model=sonnet", "--llm-report=out", "harbor/hello"
    )
    result.assert_outcomes(passed=1)
    (run,) = read_report(pytester)["harbor_results"]
    assert run["agent"] == "claude-code" and run["reward"] == 1.0
    assert [c["commands"] for c in run["trace"]["tool_calls"]] == [command]
    assert run["container"]["image"].startswith("llmtool/agent-claude-code:")
    assert (Path(run["artifacts"]) / "logs" / "agent" / "claude-code.txt").is_file()
    assert _containers(f"label={OWNER_LABEL}={owner()}") == []


def test_a_multi_step_cli_runs_cost_is_every_steps() -> None:
    """An agent CLI's own cost figure, per step, adds up in the joined trace: the item's
    cost is not the first step's alone; one step without a figure makes it unknown."""

    def step(cost: float | None) -> AgentTrace:
        info = AgentInfo(name="claude-code", reported_cost_usd=cost, cost_source="agent")
        return AgentTrace(agent=info, turns=1)

    joined = _joined([step(0.25), step(0.5)])
    assert joined.cost_usd == 0.75
    assert _agent_result([step(0.25), step(0.5)]).cost_usd == 0.75
    assert _joined([step(0.25), step(None)]).cost_usd is None


@requires_docker
def test_a_forbidden_call_fails_a_trial_that_earned_its_reward(
    pytester: pytest.Pytester, dataset: Path, server: FakeLLMServer
) -> None:
    """A task's `[[metadata.llmtool_trajectory]]` guardrail, over a real trial: the verifier
    gives the full reward, and the call the task forbids still fails the item, named."""
    toml = dataset / "hello" / "task.toml"
    text = toml.read_text().replace(
        '[metadata]\ncategory = "files"\ntags = ["smoke"]\n',
        '[metadata]\ncategory = "files"\ntags = ["smoke"]\n\n'
        "[[metadata.llmtool_trajectory]]\n"
        'assert = "forbidden"\n'
        "pattern = 'debian_version'\n",
    )
    toml.write_text(text)
    instruction = (dataset / "hello" / "instruction.md").read_text()
    command = "echo hello > /app/hello.txt && cat /app/hello.txt /etc/debian_version"
    server.script(instruction, [Turn(tool_calls=[command]), Turn(text="Done.")])
    result = pytester.runpytest(
        "--llm-model=haiku", "--llm-report=out", "harbor/hello", "-p", "no:randomly"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*trajectory(forbidden:debian_version)*call 1 (bash)*"])
    (run,) = read_report(pytester)["harbor_results"]
    assert run["reward"] == 1.0 and run["passed"] is False
    (gate,) = run["trajectory"]
    assert not gate["passed"] and "cat /app/hello.txt /etc/debian_version" in gate["message"]
