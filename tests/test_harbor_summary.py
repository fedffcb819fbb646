"""Harbor results aggregated (`kinds/harbor/summary.py`), shown (`kinds/harbor/report.py`) and
written as Harbor's own result files (`kinds/harbor/result_json.py`), checked against
Harbor's `TrialResult` and `JobResult` models from its unpacked wheel.

The wheel is unpacked (never installed: Harbor needs Python 3.12) into `$LLMTOOL_HARBOR_DIR`
(default `~/.cache/pytest-llmtool/harbor-0.25.0`) by `.ci/run`; where it is missing the test
that validates against it skips, and fails under `LLMTOOL_REQUIRE_AGENT_CLIS=1`, as CI sets
it. Its models are imported in a child process on Python 3.11 with two stand-ins: `typing`'s
`TypedDict` and `override` from `typing_extensions`, and the `toml` and `shortuuid` modules
(used by functions, not by the models' fields) as empty modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import run_metadata

from pytest_llmtool.kinds.harbor.report import (
    failure,
    failure_line,
    html_details,
    markdown_summary,
    screen_lines,
    terminal_lines,
)
from pytest_llmtool.kinds.harbor.result_json import JobWriter, trial_name
from pytest_llmtool.kinds.harbor.summary import build_summary, failure_reason, summary_fields
from pytest_llmtool.records import (
    ContainerInfo,
    ErrorRecord,
    EvalReport,
    ExceptionInfo,
    HarborAgentResult,
    HarborResult,
    HarborStepResult,
    PhaseTiming,
)

HARBOR_DIR = Path(
    os.environ.get("LLMTOOL_HARBOR_DIR", Path.home() / ".cache/pytest-llmtool/harbor-0.25.0")
)
T0 = "2026-11-29T10:00:00+00:00"


def result(task: str = "hello", model: str = "oracle", **fields: object) -> HarborResult:
    """A Harbor item's record, passing with reward 1 from reward.txt unless told."""
    values: dict[str, object] = {
        "nodeid": f"tasks/{task}/task.toml::{task}[{model}]",
        "model": model,
        "task_id": task,
        "task_name": task,
        "category": "tasks",
        "agent": model if model in ("oracle", "nop") else "builtin",
        "rewards": {"reward": 1.0},
        "reward_source": "reward.txt",
        "environment_setup": PhaseTiming(started_at=T0, finished_at="2026-11-29T10:00:02+00:00"),
        "verifier": PhaseTiming(
            started_at="2026-11-29T10:00:05+00:00", finished_at="2026-11-29T10:00:06+00:00"
        ),
    }
    values.update(fields)
    return HarborResult.model_validate(values)


FORMULACODE = {
    "agent_advantage": 0.1,
    "tests_passed": 1.0,
    "reward": 1.2,
}


def test_every_reward_key_is_a_metric_and_missing_ones_are_counted_apart() -> None:
    results = [
        result("a", rewards=dict(FORMULACODE), reward_source="reward.json"),
        result("b", rewards={**FORMULACODE, "agent_advantage": -0.3}, reward_source="reward.json"),
        result("c", rewards=None, reward_source=None, reward_error="RewardFileNotFoundError: x"),
        result("d", rewards={"reward": 0.5}),
    ]
    s = build_summary(results)
    assert (s.items, s.passed, s.pass_rate) == (4, 2, 0.5)
    assert s.pass_rate_ci is not None and s.pass_rate_ci.method == "wilson-cc"
    advantage = s.metrics["agent_advantage"]
    assert (advantage.n, advantage.missing, advantage.min, advantage.max) == (2, 2, -0.3, 0.1)
    assert advantage.mean == pytest.approx(-0.1)
    # Unbounded values: a t interval, not a rate's.
    assert advantage.interval is not None and advantage.interval.method == "t"
    tests = s.metrics["tests_passed"]
    assert tests.interval is not None and tests.interval.method == "wilson-cc"
    assert (s.metrics["reward"].n, s.metrics["reward"].missing) == (3, 1)
    assert s.failures == {"RewardFileNotFoundError": 1, "below threshold": 1}
    assert s.phase_ms == {"environment_setup": 2000.0, "verifier": 1000.0}
    # The oracle calls no model: its tokens and cost are known to be 0.
    assert (s.input_tokens, s.cost_usd, s.tokens_known) == (0, 0.0, 4)


def test_unknown_tokens_are_not_zero() -> None:
    known = result(
        "a",
        model="m",
        agent_result=HarborAgentResult(n_input_tokens=10, n_output_tokens=5, cost_usd=0.01),
    )
    unknown = result("b", model="m")  # a CLI that said nothing of its tokens
    s = build_summary([known, unknown])
    assert (s.input_tokens, s.output_tokens, s.cost_usd, s.tokens_known) == (None, None, None, 1)
    s = build_summary([known])
    assert (s.input_tokens, s.output_tokens, s.cost_usd) == (10, 5, 0.01)


def test_errors_by_type_and_infrastructure_errors_by_model() -> None:
    timed_out = result(
        "a",
        agent_timed_out=True,
        exception_info=ExceptionInfo(exception_type="AgentTimeoutError", exception_message="30 s"),
    )
    error = ErrorRecord(
        nodeid="x", task_id="b", model="oracle", category="tasks", message="image missing"
    )
    fields = summary_fields([timed_out], [error])
    s = fields["harbor"]["oracle"]
    assert s.errors == {"AgentTimeoutError": 1, "infrastructure": 1}
    assert s.agent_timeouts == 1 and s.passed == 1
    variant = result("a", model="m", variant="skills")
    assert list(summary_fields([variant], [])["harbor"]) == ["m-skills"]


@pytest.mark.parametrize(
    ("fields", "reason", "line"),
    [
        ({"rewards": {"reward": 0.5}}, "below threshold", "reward 0.5 < 1 (reward.txt)"),
        (
            {"rewards": {"style": 1.0}, "reward_source": "reward.json"},
            "no reward key",
            "the rewards have no 'reward' key (reward.json) (they have: style)",
        ),
        (
            {"rewards": {}, "details": {"reward": "1"}, "reward_source": "reward.json"},
            "reward not a number",
            "'reward' in reward.json is not a number: \"1\"",
        ),
        (
            {
                "rewards": None,
                "reward_source": None,
                "reward_error": "RewardFileNotFoundError: the verifier wrote neither",
            },
            "RewardFileNotFoundError",
            "no reward: RewardFileNotFoundError: the verifier wrote neither",
        ),
        (
            {
                "rewards": None,
                "reward_source": None,
                "exception_info": ExceptionInfo(
                    exception_type="VerifierTimeoutError", exception_message="after 60 s"
                ),
            },
            "VerifierTimeoutError",
            "no reward: VerifierTimeoutError: after 60 s",
        ),
    ],
)
def test_the_failure_says_why(fields: dict[str, Any], reason: str, line: str) -> None:
    r = result(**fields)
    assert not r.passed
    assert failure_reason(r) == reason
    assert failure_line(r) == line
    assert failure(r).splitlines()[0] == line


def test_the_failure_shows_the_timeout_the_steps_and_the_verifier_tail() -> None:
    r = result(
        rewards={"reward": 0.0},
        agent_timed_out=True,
        steps=[HarborStepResult(step_name="one", rewards={"reward": 0.0})],
        verifier_output="".join(f"line {n}\n" for n in range(30)) + "\x1b[31mred\n",
    )
    lines = failure(r).splitlines()
    assert lines[:3] == [
        "reward 0 < 1 (reward.txt)",
        "the agent timed out (the verifier ran on what it left)",
        "step one: reward=0",
    ]
    assert lines[3] == "verifier output (last lines):"
    assert lines[-1] == "  \\x1b[31mred" and len(lines) == 4 + 12


def test_the_reports_show_every_reward_key() -> None:
    results = [
        result("a", rewards=dict(FORMULACODE), reward_source="reward.json"),
        result("b", model="nop", rewards={"reward": 0.0}),
    ]
    fields = summary_fields(results, [])
    report = EvalReport(
        metadata=run_metadata(),
        harbor_results=fields["harbor_results"],
        harbor=fields["harbor"],
    )
    text = "\n".join(terminal_lines(report))
    for key in FORMULACODE:
        assert key in text
    assert "1/1" in text and "0/1" in text
    assert all(len(line) <= 80 for line in screen_lines(report, 80))
    assert "## Harbor tasks" in markdown_summary(report)
    # The record reads back as written.
    again = EvalReport.model_validate_json(report.model_dump_json())
    assert again.harbor["oracle"].metrics["agent_advantage"].mean == 0.1


def test_html_details_escape_what_the_task_wrote() -> None:
    r = result(
        rewards={"<b>": 1.0},
        details={"note": "<script>"},
        verifier_output="<img src=x>",
        container=ContainerInfo(
            engine="docker", endpoint="default", image="img", image_id="sha256:1", network="none"
        ),
    )
    page = "".join(html_details(r))
    assert "<script>" not in page and "<img" not in page and "&lt;b&gt;" in page
    assert "sha256:1" in page


def _harbor_validate(job: Path) -> subprocess.CompletedProcess[str]:
    """Validate `job/result.json` and each trial's with Harbor's models, in a child process."""
    script = r"""
import json, sys, types, typing, typing_extensions
from pathlib import Path
from typing import Any
typing.TypedDict = typing_extensions.TypedDict
typing.override = typing_extensions.override
class Stand(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})
for name in ("toml", "shortuuid"):
    sys.modules.setdefault(name, Stand(name))
sys.path.append(sys.argv[1])
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult
job = Path(sys.argv[2])
found = JobResult.model_validate_json((job / "result.json").read_text())
trials = [TrialResult.model_validate_json(p.read_text()) for p in sorted(job.glob("*/result.json"))]
print(json.dumps({
    "n_total": found.n_total_trials,
    "evals": {k: [v.n_trials, v.n_errors, v.metrics] for k, v in found.stats.evals.items()},
    "rewards": [t.verifier_result.rewards if t.verifier_result else None for t in trials],
    "steps": [len(t.step_results or []) for t in trials],
    "cost": found.stats.cost_usd,
    "exceptions": [t.exception_info.exception_type if t.exception_info else None for t in trials],
}))
"""
    return subprocess.run(
        [sys.executable, "-c", script, str(HARBOR_DIR), str(job)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_result_json_is_what_harbor_reads(tmp_path: Path) -> None:
    if not (HARBOR_DIR / "harbor" / "models" / "trial" / "result.py").is_file():
        why = f"Harbor's wheel is not unpacked in {HARBOR_DIR} (.ci/run does it)"
        if os.environ.get("LLMTOOL_REQUIRE_AGENT_CLIS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    task_dir = tmp_path / "tasks" / "hello"
    task_dir.mkdir(parents=True)
    (task_dir / "task.toml").write_text("[metadata]\n")
    results = [
        result("hello"),
        result(
            "fc",
            model="m",
            rewards={"reward": 0.5, "agent_advantage": -0.2},
            agent_result=HarborAgentResult(
                n_input_tokens=100, n_cache_tokens=20, n_output_tokens=7, cost_usd=0.002
            ),
        ),
        result(
            "none",
            rewards=None,
            reward_error="RewardFileNotFoundError: none",
            exception_info=ExceptionInfo(
                exception_type="VerifierTimeoutError", exception_message="60 s"
            ),
        ),
        result(
            "multi",
            rewards={"reward": 0.5},
            steps=[
                HarborStepResult(step_name="one", rewards={"reward": 1.0}),
                HarborStepResult(step_name="two", rewards={"reward": 0.0}),
            ],
        ),
    ]
    writer = JobWriter(tmp_path / "jobs", job_name="job-1")
    folders = [writer.write_trial(r) for r in results]
    assert folders[0] == tmp_path / "jobs" / "job-1" / trial_name(results[0])
    checked = _harbor_validate(tmp_path / "jobs" / "job-1")
    assert checked.returncode == 0, checked.stderr[-3000:]
    found = json.loads(checked.stdout)
    assert found["n_total"] == 4
    assert found["evals"]["oracle__adhoc"][:2] == [1, 1]  # "multi" rolls up into steps
    assert found["evals"]["builtin__m__adhoc"] == [1, 0, [{"agent_advantage": -0.2, "reward": 0.5}]]
    assert found["cost"] == 0.002
    assert sorted(map(str, found["rewards"])) == sorted(
        map(str, [{"reward": 1.0}, {"reward": 0.5, "agent_advantage": -0.2}, None, None])
    )
    assert sorted(found["steps"]) == [0, 0, 0, 2]
    assert "VerifierTimeoutError" in found["exceptions"]


def test_trials_of_one_run_share_one_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """xdist's workers name the run's job once: the first records it under the run's id."""
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-1")
    first = JobWriter(tmp_path).write_trial(result("a"))
    second = JobWriter(tmp_path).write_trial(result("b"))
    assert first.parent == second.parent
    job = json.loads((first.parent / "result.json").read_text())
    assert job["n_total_trials"] == 2
    assert job["stats"]["evals"]["oracle__adhoc"]["metrics"] == [{"mean": 1.0}]


def test_a_key_is_a_rate_for_every_model_or_for_none() -> None:
    """`lines` is 3 for one model and 0 for the other: a count, so no model's interval of it
    is a rate's (a Wilson interval of 0 lines would read as a rate of 0%)."""
    results = [
        result("a", rewards={"reward": 1.0, "lines": 3.0}),
        result("b", rewards={"reward": 1.0, "lines": 3.0}),
        result("a", model="nop", rewards={"reward": 0.0, "lines": 0.0}),
        result("b", model="nop", rewards={"reward": 1.0, "lines": 0.0}),
    ]
    summaries = summary_fields(results, [])["harbor"]
    lines = summaries["nop"].metrics["lines"]
    assert lines.interval is None  # no spread: a t interval is none, not a point
    reward = summaries["nop"].metrics["reward"]
    assert reward.interval is not None and reward.interval.method == "wilson-cc"
