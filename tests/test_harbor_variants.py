"""ot-harness's agent variants (`--llm-harbor-variants`) and FormulaCode's Harbor task
(tests/data/harbor-formulacode/): the variants file, labels and skips, the per-variant rates
and the paired comparison with the base; FormulaCode's fields in the summary under oracle and
nop, and a tampering agent caught by the task's own verifier."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from containers import need_docker, requires_docker
from fake_llm_server import FakeLLMServer, Turn
from helpers import read_report, run_metadata

from pytest_llmtool.inputs.harbor_variants import (
    HarborVariant,
    McpSpec,
    VariantsError,
    read_variants,
)
from pytest_llmtool.kinds.harbor.config import EnvironmentConfig, TaskConfig
from pytest_llmtool.kinds.harbor.reward import read_rewards
from pytest_llmtool.kinds.harbor.summary import summary_fields
from pytest_llmtool.kinds.harbor.task import HarborTask
from pytest_llmtool.kinds.harbor.variant_summary import (
    markdown_lines,
    terminal_lines,
    variant_summaries,
)
from pytest_llmtool.kinds.harbor.variants import (
    variant_labels,
    variant_note,
    variant_skip_reason,
)
from pytest_llmtool.records import (
    ErrorRecord,
    EvalReport,
    HarborAgentResult,
    HarborResult,
)
from pytest_llmtool.report.comparisons import comparison_rows
from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.stats.compare import comparisons

FORMULACODE = Path(__file__).parent / "data" / "harbor-formulacode"
SKILL = "---\nname: fast\ndescription: Make Python loops fast.\n---\nUse closed forms.\n"


def _skills(root: Path) -> Path:
    (root / "skills" / "fast").mkdir(parents=True)
    (root / "skills" / "fast" / "SKILL.md").write_text(SKILL)
    return root / "skills"


def _write(root: Path, text: str) -> Path:
    path = root / "variants.yaml"
    path.write_text(text)
    return path


# The variants file.


def test_a_variants_file_reads_in_order(tmp_path: Path) -> None:
    skills = _skills(tmp_path)
    path = _write(
        tmp_path,
        "- {id: base, kind: base}\n"
        "- id: onetool\n  kind: mcp\n  mcp: {name: onetool, url: 'http://127.0.0.1:8760/mcp'}\n"
        "- {id: skills-fast, kind: skills, skills_dir: skills}\n",
    )
    assert read_variants(path, 1 << 20) == (
        HarborVariant("base", "base"),
        HarborVariant("onetool", "mcp", mcp=McpSpec("onetool", url="http://127.0.0.1:8760/mcp")),
        HarborVariant("skills-fast", "skills", skills_dir=skills.resolve()),
    )


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("{id: base, kind: base}\n", ":1:", "expected a list of variants"),
        ("- {id: base, kind: base}\n- {id: x, kind: plugin}\n", ":2:", "kind: expected base"),
        ("- {id: a, kind: base}\n\n- {id: a, kind: skills, skills_dir: skills}\n", ":3:", "twice"),
        ("- {id: 'a[b]', kind: base}\n", ":1:", "id: expected letters"),
        ("- {id: on, kind: base}\n", ":1:", "quote it"),
        ("- {id: a, kind: base, skill_dir: x}\n", ":1:", "unknown key 'skill_dir'"),
        ("- {id: a, kind: base, mcp: {name: s, url: 'http://h/'}}\n", ":1:", "only an mcp"),
        ("- {id: a, kind: mcp, mcp: {name: s, url: 'http://h/', command: s}}\n", ":1:", "one of"),
        ("- {id: a, kind: mcp, mcp: {name: s, url: 'http://h/m?k=1'}}\n", ":1:", "no query"),
        ("- {id: a, kind: mcp, mcp: {name: s, url: 'file:///x'}}\n", ":1:", "http(s) URL"),
        ("- {id: a, kind: skills, skills_dir: nowhere}\n", ":1:", "is not a directory"),
        ("- {id: a, kind: skills, skills_dir: empty}\n", ":1:", "no <skill>/SKILL.md"),
        ("- {id: a, kind: base}\n- {id: b, kind: base}\n", ":2:", "a second base"),
        ("- {id: a, kind: base}\n- id: b: c\n", ":2:", "not valid YAML"),
        ("- {id: a, kind: base}\n- {id: a, kind: base, id: b}\n", ":2:", "duplicate key"),
    ],
)
def test_a_bad_variants_file_names_its_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    _skills(tmp_path)
    (tmp_path / "empty").mkdir()
    path = _write(tmp_path, text)
    with pytest.raises(VariantsError) as caught:
        read_variants(path, 1 << 20)
    assert str(caught.value).startswith(f"{path}{where}")
    assert message in str(caught.value)


def test_a_bad_variants_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("variants.yaml").write_text("- {id: a, kind: base}\n- {id: a}\n")
    result = pytester.runpytest("--llm-harbor-variants=variants.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-harbor-variants: *variants.yaml:2: variant 2: kind*"])


# Labels and skips.


def _task(root: Path, skills_dir: str | None = None) -> HarborTask:
    config = TaskConfig(environment=EnvironmentConfig(skills_dir=skills_dir))
    return HarborTask(root, config, "t", "t", "Do it.", "c")


def test_each_variant_is_a_label_and_a_variant_that_cannot_apply_skips(tmp_path: Path) -> None:
    skills = HarborVariant("skills", "skills", skills_dir=_skills(tmp_path))
    mcp = HarborVariant("mcp", "mcp", mcp=McpSpec("s", url="http://127.0.0.1:1/"))
    base = HarborVariant("base", "base")
    assert variant_labels(()) == [("", None)]
    assert variant_labels((base, skills)) == [("base", base), ("skills", skills)]
    assert variant_skip_reason(base, "oracle") is None
    assert variant_skip_reason(skills, "builtin") is None
    assert "would be a base run" in (variant_skip_reason(skills, "oracle") or "")
    assert "would be a base run" in (variant_skip_reason(mcp, "builtin") or "")
    assert "would be a base run" in (variant_skip_reason(mcp, "codex") or "")


def test_skills_go_where_harbor_injects_them(tmp_path: Path) -> None:
    skills = HarborVariant("skills", "skills", skills_dir=_skills(tmp_path))
    note = variant_note(skills, _task(tmp_path))
    assert "<location>/runtime/skills/fast/SKILL.md</location>" in note
    assert "<description>Make Python loops fast.</description>" in note
    assert "/opt/s/fast/SKILL.md" in variant_note(skills, _task(tmp_path, "/opt/s"))
    assert variant_note(HarborVariant("base", "base"), _task(tmp_path)) == ""
    with pytest.raises(SandboxError, match="must be absolute"):
        variant_note(skills, _task(tmp_path, "skills"))


def test_variants_name_the_items_and_skip_saying_why(pytester: pytest.Pytester) -> None:
    """`task[model-variant]`; under the oracle a skills or mcp variant skips (deselecting
    the base keeps the run off containers)."""
    task = pytester.path / "t"
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "task.toml").write_text('[environment]\ndocker_image = "local/debian:bookworm"\n')
    (task / "instruction.md").write_text("Do nothing.\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("true\n")
    _skills(pytester.path)
    pytester.path.joinpath("variants.yaml").write_text(
        "- {id: base, kind: base}\n- {id: sk, kind: skills, skills_dir: skills}\n"
        "- {id: mc, kind: mcp, mcp: {name: s, url: 'http://127.0.0.1:9/mcp'}}\n"
    )
    args = ("--llm-harbor-variants=variants.yaml", "-p", "no:randomly")
    listed = pytester.runpytest(*args, "--collect-only", "-q")
    listed.stdout.fnmatch_lines(
        [
            "t/task.toml::t[[]oracle-base]",
            "t/task.toml::t[[]oracle-sk]",
            "t/task.toml::t[[]oracle-mc]",
        ]
    )
    result = pytester.runpytest(*args, "-k", "not base", "-rs")
    result.assert_outcomes(skipped=2, deselected=1)
    result.stdout.fnmatch_lines(
        ["*variant sk: oracle reads no instruction*", "*variant mc: an MCP server cannot*"]
    )


# Per-variant rates and the paired comparison.


def _result(task: str, variant: str, reward: float | None, **extra: Any) -> HarborResult:
    kind = "base" if variant == "base" else "skills"
    return HarborResult(
        nodeid=f"d/{task}/task.toml::{task}[m-{variant}]",
        model="m",
        task_id=task,
        task_name=task,
        category="c",
        agent="builtin",
        variant=variant,
        variant_kind=kind,
        rewards=None if reward is None else {"reward": reward},
        **extra,
    )


def _known(tokens: int | None, cost: float | None) -> HarborAgentResult:
    return HarborAgentResult(n_input_tokens=tokens, n_output_tokens=20, cost_usd=cost)


def _run() -> tuple[list[HarborResult], list[ErrorRecord]]:
    results = [
        _result("t1", "base", 1.0, agent_result=_known(100, 0.01), duration_ms=2000),
        _result("t2", "base", 0.0, agent_result=_known(None, 0.02), duration_ms=4000),
        _result("t3", "base", None, duration_ms=9000),  # no reward file: invalid
        _result("t1", "skills", 1.0, agent_result=_known(80, 0.01), duration_ms=1000),
        _result("t2", "skills", 1.0, agent_result=_known(60, 0.01), duration_ms=1000),
        _result("t3", "skills", 1.0, agent_result=_known(40, 0.01), duration_ms=1000),
    ]
    error = ErrorRecord(
        nodeid="d/t4/task.toml::t4[m-base]", task_id="t4", model="m", category="c", message="x"
    )
    return results, [error]


def test_per_variant_rates_as_ot_harness_reports_them() -> None:
    results, errors = _run()
    found = variant_summaries(results, errors)
    base, skills = found["m"]["base"], found["m"]["skills"]
    assert (base.trial_count, base.task_count, base.passed) == (4, 3, 1)
    assert base.pass_rate == 0.5  # over the two trials that are not invalid
    assert base.invalid_rate == 0.5  # t3 (no reward) and t4 (errored)
    assert base.tooling_failure_rate == 0.25
    assert base.partial_rate == pytest.approx(2 / 3)  # t2 (tokens) and t3 (nothing known)
    assert base.mean_tokens == 120  # t1's only: unknown tokens are never 0
    assert base.mean_cost_usd == pytest.approx(0.015)
    assert base.total_cost_usd == pytest.approx(0.03)
    assert base.mean_score == 0.5
    assert (base.mean_wall_time_seconds, base.median_wall_time_seconds) == (5.0, 4.0)
    assert base.pass_rate_ci is not None and base.pass_rate_ci.n == 2
    assert (skills.kind, skills.pass_rate, skills.partial_rate, skills.invalid_rate) == (
        "skills",
        1.0,
        0.0,
        0.0,
    )


def test_unknown_tokens_and_cost_show_as_unknown_never_zero() -> None:
    results = [_result("t1", "base", 1.0)]
    report = EvalReport(
        metadata=run_metadata(),
        harbor_results=results,
        harbor_variants=variant_summaries(results, []),
    )
    s = report.harbor_variants["m"]["base"]
    assert (s.mean_tokens, s.mean_cost_usd, s.total_cost_usd, s.partial_rate) == (
        None,
        None,
        None,
        1.0,
    )
    row = next(line for line in terminal_lines(report) if line.startswith("m "))
    assert row.split()[-2:] == ["-", "-"]


def test_each_variant_is_compared_paired_with_the_base() -> None:
    results, errors = _run()
    report = EvalReport(
        metadata=run_metadata(),
        harbor_results=results,
        harbor_variants=variant_summaries(results, errors),
    )
    found = [c for c in comparisons(report) if c.subject == "variant"]
    assert len(found) == 1
    c = found[0]
    assert (c.kind, c.a, c.b, c.model, c.tasks) == ("harbor", "skills", "base", "m", 3)
    assert c.a_only == ["d/t2/task.toml::t2", "d/t3/task.toml::t3"] and c.b_only == []
    assert c.pass_difference.estimate == pytest.approx(2 / 3)
    report.comparisons = found
    assert comparison_rows(report)[1][0][:2] == ["harbor variant", "skills vs base [m]"]
    text = "\n".join(terminal_lines(report) + markdown_lines(report))
    assert "Harbor variants" in text and "## Harbor Variants" in text
    assert "Tooling failures" in text


# A scripted built-in agent under two variants (Docker).

EXAMPLES = Path(__file__).parent.parent / "examples" / "harbor"


@requires_docker
def test_a_skills_variant_reaches_the_agent_in_its_container(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    """examples/harbor's count-404 under base and skills: the skills item's agent is told of
    the skill, reads its SKILL.md in the container and follows it; the base's guesses."""
    need_docker()
    for name in ("count-404", "skills", "variants.yaml"):
        copy = shutil.copytree if (EXAMPLES / name).is_dir() else shutil.copy
        copy(EXAMPLES / name, pytester.path / name)
    instruction = (EXAMPLES / "count-404" / "instruction.md").read_text()
    guess = "grep -c 404 /app/access.log > /app/answer.txt"
    server.script(instruction, [Turn(tool_calls=[guess]), Turn(text="Done.")])
    follow = (
        "head -2 /runtime/skills/log-triage/SKILL.md"
        " && awk '$9 == 404' /app/access.log | wc -l > /app/answer.txt"
    )
    server.script_containing(
        "<location>/runtime/skills/log-triage/SKILL.md</location>",
        [Turn(tool_calls=[follow]), Turn(text="Done.")],
    )
    result = pytester.runpytest(
        "--llm-model=haiku",
        "--llm-harbor-variants=variants.yaml",
        "--llm-report=out",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    runs = {r["variant"]: r for r in report["harbor_results"]}
    assert (runs["base"]["reward"], runs["skills"]["reward"]) == (0.0, 1.0)
    assert runs["skills"]["variant_kind"] == "skills"
    (call,) = runs["skills"]["trace"]["tool_calls"]
    assert call["stdout"].startswith("---\nname: log-triage\n")  # read in the container
    rates = report["harbor_variants"]["haiku"]
    assert (rates["base"]["pass_rate"], rates["skills"]["pass_rate"]) == (0.0, 1.0)
    (compared,) = [c for c in report["comparisons"] if c["subject"] == "variant"]
    assert (compared["a"], compared["b"], compared["tasks"]) == ("skills", "base", 1)
    assert "## Harbor Variants" in (pytester.path / "out" / "report.md").read_text()


# FormulaCode's task (Docker).


@requires_docker
def test_formulacode_fields_under_oracle_and_nop(pytester: pytest.Pytester) -> None:
    need_docker()
    shutil.copytree(FORMULACODE, pytester.path / "formulacode")
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    report = read_report(pytester)
    by_agent = {r["agent"]: r for r in report["harbor_results"]}
    oracle, nop = by_agent["oracle"], by_agent["nop"]
    fields = [
        "agent_advantage",
        *(f"agent_advantage_level{i}" for i in (1, 2, 3, 4)),
        "num_valid_benchmarks",
        "max_speedup",
        "tests_passed",
        "snapshots_passed",
    ]
    assert set(fields) <= set(oracle["rewards"])
    assert oracle["rewards"]["reward"] == 6.0  # a speedup far past 1.08^2
    assert oracle["rewards"]["tests_passed"] == oracle["rewards"]["snapshots_passed"] == 1.0
    assert oracle["rewards"]["num_valid_benchmarks"] == 3
    assert oracle["details"]["tamper_precheck"] == {"files": [], "rule": None}
    assert len(oracle["details"]["per_benchmark_speedups"]) == 3
    # nop changed nothing: not timed, every speedup 1, reward 0.25 + 0.75 = 1 < 2 (the task's).
    assert nop["rewards"]["reward"] == 1.0 and not nop["passed"]
    assert nop["details"]["timing_skipped"] == "no_change"
    assert set(nop["details"]["per_benchmark_speedups"].values()) == {1.0}
    # Every reward key is a metric of the summary under its own name (one task: no interval).
    for model in ("oracle", "nop"):
        metrics = report["harbor"][model]["metrics"]
        assert set(fields) <= set(metrics)
        assert metrics["agent_advantage"]["n"] == 1


def test_formulacode_fields_are_metrics_with_intervals() -> None:
    """Over two tasks, FormulaCode's keys each get a mean and an interval in the summary."""
    results = [_result("t1", "base", 6.0), _result("t2", "base", 1.0)]
    for r, advantage in zip(results, (0.02, -0.9), strict=True):
        assert r.rewards is not None
        r.rewards |= {"agent_advantage": advantage, "tests_passed": 1.0, "max_speedup": 9.0}
    metrics = summary_fields(results, [])["harbor"]["m-base"].metrics
    assert {"reward", "agent_advantage", "tests_passed", "max_speedup"} <= set(metrics)
    assert metrics["agent_advantage"].mean == pytest.approx(-0.44)
    assert metrics["agent_advantage"].interval is not None


async def _tampered_rewards() -> dict[str, Any]:
    """The task's verifier, as Harbor runs it, after an "agent" that edits the benchmark
    and adds an untracked conftest.py."""
    from pytest_llmtool.sandbox.container.engine import ContainerSpec, Engine
    from pytest_llmtool.sandbox.container.images import ensure_image

    task = FORMULACODE / "fastsum"
    engine = Engine.find()
    image = await ensure_image(engine, context=task / "environment", name="formulacode/fastsum")
    container = await engine.start(ContainerSpec(image=image.ref, run_id="test-harbor-variants"))
    try:
        agent = await container.exec(
            "cd /app && sed -i 's/total(300_000)/total(3)/' benchmarks/bench_fastsum.py"
            " && printf 'import sys\\n' > conftest.py"
        )
        assert agent.exit_code == 0, agent.stderr
        await container.put({"tests": task / "tests"}, "/")
        await container.exec("mkdir -p /logs/verifier && chmod +x /tests/test.sh")
        await container.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")
        reward_json = await container.get("/logs/verifier/reward.json")
        reward_txt = await container.get("/logs/verifier/reward.txt")
    finally:
        await container.remove()
    read = read_rewards(reward_json, reward_txt)
    return {"rewards": read.rewards, "details": read.details, "txt": reward_txt}


@requires_docker
def test_a_tampering_agent_is_caught() -> None:
    need_docker()
    got = asyncio.run(_tampered_rewards())
    assert got["details"]["tamper_precheck"] == {
        "files": ["benchmarks/bench_fastsum.py", "conftest.py"],
        "rule": "benchmarks",
    }
    assert got["details"]["timing_skipped"] == "tamper"
    assert got["rewards"]["reward"] == -1.0 and float(got["txt"]) == -1.0
    assert "agent_advantage" not in got["rewards"]  # null: not timed, not 0
    assert got["details"]["agent_advantage"] is None
    assert json.dumps(got["details"]["per_benchmark_speedups"]) == "{}"
