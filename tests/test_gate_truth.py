"""Issue 35, items 2 to 4: the gate says in one sentence what it decided and with what power;
a baseline notices that an alias now means another model; every comparison decides by one
rule, checked at p just below and just above 0.05.

McNemar's score test with one attempt per task: z = (a_only - b_only) / sqrt(a_only +
b_only). 4 flips one way over 7 tasks give z = 2, p = .0455 (the issue's "p = 0.046 with 7
shared tasks" beside "[+1.5 pp, +84 pp]"); 10 against 3 give z = 1.941, p = .0522.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import SERVER_KEY, read_report, write_dataset

from pytest_llmtool import stats
from pytest_llmtool.history.gate import (
    EXIT_BELOW,
    EXIT_REGRESSION,
    EXIT_UNDECIDED,
    RegressionGate,
)
from pytest_llmtool.records import (
    EvalReport,
    EvaluationResult,
    HarborResult,
    ModelInfo,
    ModelParams,
    RunMetadata,
    ScenarioResult,
    ScoreResult,
    ScriptingMetrics,
    TaskResult,
    TaskScore,
)
from pytest_llmtool.run.roles import model_info
from pytest_llmtool.settings import Settings
from pytest_llmtool.stats import baseline
from pytest_llmtool.stats.compare import BashPass, bash_attempts, comparisons
from pytest_llmtool.stats.outcomes import Outcome

# ------------------------------------------------------------------------------ the power


def _flips(ahead: int, behind: int, same: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per-task pass rates (now, then): `ahead` tasks fail -> pass, `behind` pass -> fail."""
    now = {f"t{i}": 1.0 for i in range(ahead)} | {f"b{i}": 0.0 for i in range(behind)}
    then = {f"t{i}": 0.0 for i in range(ahead)} | {f"b{i}": 1.0 for i in range(behind)}
    for i in range(same):
        now[f"s{i}"] = then[f"s{i}"] = 1.0
    return now, then


def test_the_smallest_detectable_change_is_tasks_to_detect_solved_for_the_change() -> None:
    now, then = _flips(0, 0, 5)
    test = stats.paired_rates(now, then)
    assert test is not None
    # No flip seen: psi = d, (1.96 + .841621 sqrt(1 - d))^2 / d = 5 at d = .9394.
    assert stats.detectable_change(test, now, then) == pytest.approx(0.9393616, abs=1e-6)
    # Below 4 tasks not even every task flipping one way reaches p < 0.05 (3: p = .083).
    few_now, few_then = _flips(0, 0, 3)
    few = stats.paired_rates(few_now, few_then)
    assert few is not None and stats.detectable_change(few, few_now, few_then) is None
    # The same formula both ways: a change at or above the figure needs no more tasks than
    # there are, one below it more.
    for n in range(4, 41):
        for k in range(1, n + 1):
            now, then = _flips(0, k, n - k)
            test = stats.paired_rates(now, then)
            assert test is not None
            detectable = stats.detectable_change(test, now, then)
            needed = stats.tasks_to_detect(test, now, then)
            assert detectable is not None and needed is not None
            assert (k / n >= detectable - 1e-9) == (needed <= n), (n, k)


def test_the_paired_t_power_is_the_t_formula() -> None:
    # Two attempts per task: differences 1, .5, -.5, 0, 0 (sd .5701), t(4) = 2.776445.
    now = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 1.0, "e": 1.0}
    then = {"a": 0.0, "b": 0.0, "c": 0.5, "d": 1.0, "e": 1.0}
    test = stats.paired_rates(now, then)
    assert test is not None and test.method == "paired-t"
    expected = (2.776445 + 0.841621) * 0.5700877 / 5**0.5
    assert stats.detectable_change(test, now, then) == pytest.approx(expected, abs=1e-5)


# ---------------------------------------------------------- p just below and just above .05


def _task(model: str, unit: str, passed: bool, mode: str | None = None) -> TaskResult:
    score = TaskScore.of(unit, [ScoreResult(check="c", passed=passed, detail="", weight=1.0)])
    scripting = None if mode is None else ScriptingMetrics(mode=mode)  # type: ignore[arg-type]
    return TaskResult.model_construct(
        nodeid=f"d.jsonl::{unit}[{model}]", model=model, trial=0, score=score, scripting=scripting
    )


def _scenario(model: str, unit: str, passed: bool, guidance: str) -> ScenarioResult:
    evaluation = EvaluationResult.model_construct(
        gates_passed=int(passed), gates_total=1, outcome="pass" if passed else "fail"
    )
    return ScenarioResult.model_construct(
        nodeid=f"s.yaml::{unit}[{model}]", model=model, guidance=guidance, evaluation=evaluation
    )


# (attempts of side A, attempts of side B) per task: what each case's units hold.
Case = list[tuple[list[bool], list[bool]]]


def _binary(ahead: int, behind: int, same: int) -> Case:
    return [([True], [False])] * ahead + [([False], [True])] * behind + [([True], [True])] * same


def _trials(ones: int, halves: int, minus_halves: int, zeros: int) -> Case:
    """Two attempts a task: differences 1, .5, -.5 and 0 (the paired t test)."""
    return (
        [([True, True], [False, False])] * ones
        + [([True, False], [False, False])] * halves
        + [([False, False], [True, False])] * minus_halves
        + [([True, True], [True, True])] * zeros
    )


CASES = {
    # McNemar 4 vs 0 over 7: p = .0455; 10 vs 3 over 15: p = .0522.
    "mcnemar-below": (_binary(4, 0, 3), True),
    "mcnemar-above": (_binary(10, 3, 2), False),
    # The paired t test: differences 4x1, .5, -.5, 2x0: p = .04987; 6x.5, -.5, 2x0: p = .0509.
    "t-below": (_trials(4, 1, 1, 2), True),
    "t-above": (_trials(0, 6, 1, 2), False),
}


def _harbor(model: str, unit: str, passed: bool, variant: str = "") -> HarborResult:
    kind = {"": None, "A": "skills", "B": "base"}[variant]
    return HarborResult(
        nodeid=f"h/{unit}/task.toml::{unit}[{model}{'-' + variant if variant else ''}]",
        model=model,
        task_id=unit,
        task_name=unit,
        category="c",
        agent="builtin",
        variant=variant,
        variant_kind=kind,  # type: ignore[arg-type]
        rewards={"reward": float(passed)},
    )


def _paths(case: Case) -> list[Any]:
    """The case through models side by side (bash tasks, scenarios, Harbor tasks), guidance
    documents, tool modes and Harbor agent variants."""
    tasks: list[TaskResult] = []
    scenarios: list[ScenarioResult] = []
    scripting: list[TaskResult] = []
    harbor: list[HarborResult] = []
    variants: list[HarborResult] = []
    for n, (a, b) in enumerate(case):
        for side, attempts in (("A", a), ("B", b)):
            for passed in attempts:
                tasks.append(_task(side, f"t{n}", passed))
                scenarios.append(_scenario(side, f"t{n}", passed, ""))
                scenarios.append(_scenario("m", f"t{n}", passed, f"{side}.md"))
                mode = "scripted" if side == "A" else "baseline"
                scripting.append(_task("m", f"t{n}", passed, mode))
                harbor.append(_harbor(side, f"t{n}", passed))
                variants.append(_harbor("m", f"t{n}", passed, side))
    models = [ModelInfo(name=name, provider="offline", model_id=name) for name in ("A", "B")]
    report = EvalReport.model_construct(
        metadata=RunMetadata.model_construct(models=models),
        scenarios=scenarios,
        harbor_results=harbor,
        harbor_variants={},
    )
    found = comparisons(report, BashPass(bash_attempts(tasks), []))
    modes = EvalReport.model_construct(
        metadata=RunMetadata.model_construct(models=[models[0]]),
        scenarios=[],
        harbor_results=variants,
        harbor_variants={"m": {}},
    )
    found += comparisons(modes, BashPass(bash_attempts(scripting), scripting))
    return found


def _outcomes(case: Case, side: int, model: str = "m") -> list[Outcome]:
    return [
        Outcome(
            nodeid=f"d.jsonl::t{n}[{model}]",
            model=model,
            task=f"d.jsonl::t{n}[{model}]",
            task_id=f"t{n}",
            kind="bash",
            trial=trial,
            category="c",
            passed=passed,
            rate=float(passed),
        )
        for n, pair in enumerate(case)
        for trial, passed in enumerate(pair[side])
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_every_comparison_decides_as_its_interval_says(name: str) -> None:
    case, decided = CASES[name]
    found = _paths(case)
    assert sorted((c.subject, c.kind) for c in found) == [
        ("guidance", "scenario"),
        ("model", "bash"),
        ("model", "harbor"),
        ("model", "scenario"),
        ("tool_mode", "bash"),
        ("variant", "harbor"),
    ]
    for c in found:
        assert (c.mcnemar_p < 0.05) == decided, c.subject
        assert c.pass_difference.excludes_zero() == decided, c.subject
        assert c.verdict.startswith("no detectable") != decided, c.verdict
        assert (c.better is not None) == decided
    # The baseline, both ways (now A against then B, and B against A), and the gate's words.
    for now, then in ((0, 1), (1, 0)):
        comparison = baseline.compare(
            _outcomes(case, now), _outcomes(case, then), ["m"], "ref", "run 1", gate=True
        )
        (change,) = comparison.models
        interval = change.pass_rate_change
        assert interval is not None and change.mcnemar_p is not None
        assert (change.mcnemar_p < 0.05) == interval.excludes_zero() == decided
        assert change.verdict.startswith("no detectable") != decided, change.verdict
        said = baseline.verdict(comparison)
        assert said.startswith("no detectable change") != decided, said
        if decided:
            moved = "improved" if interval.estimate > 0 else "regressed"
            assert said.startswith(f"m {moved} "), said
            assert change.regressed == (moved == "regressed")
        else:
            assert "cannot be seen" in said and not change.regressed


def test_the_issue_case_is_an_improvement_not_no_change() -> None:
    case = _binary(4, 0, 3)
    comparison = baseline.compare(_outcomes(case, 0), _outcomes(case, 1), ["m"], "r", "run 1")
    (change,) = comparison.models
    assert change.verdict == "improvement: +57 pp, McNemar p = 0.046 with 7 shared tasks"
    assert baseline.verdict(comparison) == (
        "m improved +57 pp [+1, +84]* on 7 shared tasks (McNemar p = 0.046)"
    )


# ------------------------------------------------------------------------ the gate's sentence


def _words(pytester: pytest.Pytester, tasks: int, broken: set[int]) -> None:
    """`tasks` tasks the oracle passes, but those in `broken`, whose solution does nothing."""
    write_dataset(
        pytester,
        [
            {
                "id": f"t{i}",
                "category": "text",
                "prompt": f"Say word{i}.",
                "expectations": [{"check": f"stdout_contains:word{i}"}],
                "solution": "true" if i in broken else f"echo word{i}",
            }
            for i in range(tasks)
        ],
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--llm-history=off", *args)


GATE = ("--llm-baseline=before/report.json", "--llm-fail-on-regression", "--llm-report=out")


def test_a_held_gate_says_how_small_a_change_it_could_not_see(pytester: pytest.Pytester) -> None:
    # The issue's case: 100% then 60% on 5 tasks, which 5 tasks cannot tell from noise.
    _words(pytester, 5, set())
    _run(pytester, "--llm-report=before").assert_outcomes(passed=5)
    _words(pytester, 5, {0, 1})
    result = _run(pytester, *GATE)
    assert result.ret == pytest.ExitCode.OK
    said = (
        "gate held: no detectable change for oracle on 5 shared tasks "
        "(McNemar p = 0.16; changes under ±94 pp cannot be seen)"
    )
    assert read_report(pytester)["gate"] == said
    assert result.stdout.lines[-2] == f"llmtool {said} (exit status 0)"
    result.stdout.fnmatch_lines(["oracle *5*100%*60%*±94 pp*"])
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "changes under ±94 pp cannot be seen" in markdown


def test_a_failed_gate_says_the_change_its_interval_and_p(pytester: pytest.Pytester) -> None:
    _words(pytester, 7, set())
    _run(pytester, "--llm-report=before").assert_outcomes(passed=7)
    _words(pytester, 7, {0, 1, 2, 3})  # p = .0455: just below
    result = _run(pytester, *GATE)
    assert result.ret == EXIT_REGRESSION
    said = "gate failed: oracle regressed -57 pp [-84, -1]* on 7 shared tasks (McNemar p = 0.046)"
    assert read_report(pytester)["gate"] == said
    result.stdout.fnmatch_lines([f"llmtool {said} (exit status 6)".replace("[", "[[]")])
    _words(pytester, 7, {0, 1, 2})  # p = .083: just above
    result = _run(pytester, *GATE)
    assert result.ret == pytest.ExitCode.OK
    assert read_report(pytester)["gate"] == (
        "gate held: no detectable change for oracle on 7 shared tasks "
        "(McNemar p = 0.083; changes under ±79 pp cannot be seen)"
    )


def test_an_improvement_beyond_noise_is_said_so(pytester: pytest.Pytester) -> None:
    _words(pytester, 7, {0, 1, 2, 3})
    _run(pytester, "--llm-report=before")
    _words(pytester, 7, set())
    result = _run(pytester, *GATE)
    assert result.ret == pytest.ExitCode.OK
    assert read_report(pytester)["gate"] == (
        "gate held: oracle improved +57 pp [+1, +84]* on 7 shared tasks (McNemar p = 0.046)"
    )
    result.stdout.fnmatch_lines(["oracle *improvement: +57 pp, McNemar p = 0.046*"])
    result.stdout.no_fnmatch_line("*no detectable change: McNemar p = 0.046*")


def test_an_undecided_gate_says_so(pytester: pytest.Pytester) -> None:
    _words(pytester, 3, set())
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-baseline=last", "--llm-fail-on-regression"
    )
    assert result.ret == EXIT_UNDECIDED
    result.stdout.fnmatch_lines(["llmtool gate undecided: nothing compared: *(exit status 7)"])


def test_each_decision_has_its_word_and_a_run_that_ended_early_is_undecided() -> None:
    gate = RegressionGate(None, None, fail=True)
    for status, reason, word in (
        (0, "every --llm-fail-under threshold met (1)", "held"),
        (EXIT_BELOW, "below --llm-fail-under: m: pass_rate 40%", "failed"),
        (1, "1 failures or errors besides failing tasks: the gate does not hide them", "failed"),
        (EXIT_UNDECIDED, "nothing compared: no baseline for m", "undecided"),
    ):
        gate.status, gate.reason = status, reason
        assert gate._sentence(status) == f"gate {word}: {reason}"
    gate.status, gate.reason = 2, None  # interrupted: the gate judged nothing
    assert gate._sentence(2) == (
        "gate undecided: the run ended with exit status 2 before anything could be judged"
    )
    assert RegressionGate(None, None, fail=False)._sentence(0) is None


def test_no_gate_no_sentence(pytester: pytest.Pytester) -> None:
    _words(pytester, 3, set())
    _run(pytester, "--llm-report=before")
    _run(pytester, "--llm-baseline=before/report.json", "--llm-report=out")
    assert read_report(pytester)["gate"] is None


# ---------------------------------------------------------------------- the model's identity


def _settings(**given: Any) -> Settings:
    return Settings(models=(), max_turns=1, report_dir=None, dataset_patterns=(), **given)


def test_the_identity_keeps_the_endpoint_and_parameters_but_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_llmtool.agents.registry import ModelRef

    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"https://proxy.example/anthropic?key={SERVER_KEY}")
    url = f"https://user:{SERVER_KEY}@llm.example:8443/v1?api-key={SERVER_KEY}#{SERVER_KEY}"
    params = ModelParams(temperature=0.0, max_tokens=512)
    settings = _settings(base_urls={"openai": url}, params=params)
    cand = model_info(ModelRef("cand", "openai-responses", "weak-1"), settings)
    assert (cand.endpoint, cand.params, cand.resolved) == (
        "https://llm.example:8443/v1",
        params,
        True,
    )
    assert baseline.describe(cand) == (
        "openai-responses:weak-1 @ https://llm.example:8443/v1 (temperature 0, max tokens 512)"
    )
    claude = model_info(ModelRef("haiku", "anthropic", "claude-haiku-4-5"), settings)
    assert claude.endpoint == "https://proxy.example/anthropic"  # the SDK's variable
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert model_info(ModelRef("h", "anthropic", "c"), settings).endpoint is None  # default
    oracle = model_info(ModelRef("oracle", "offline", "oracle"), settings)
    assert (oracle.endpoint, oracle.params) == (None, None)
    for info in (cand, claude, oracle):
        assert SERVER_KEY not in info.model_dump_json()


def _info(model_id: str, endpoint: str | None = "http://a/v1", resolved: bool = True) -> ModelInfo:
    return ModelInfo(
        name="cand",
        provider="openai",
        model_id=model_id,
        endpoint=endpoint if resolved else None,
        params=ModelParams() if resolved else None,
        resolved=resolved,
    )


def _compare(now: ModelInfo, then: ModelInfo, allowed: bool = False) -> Any:
    rows = _outcomes(_binary(0, 0, 5), 0, "cand")
    comparison = baseline.compare(
        rows, rows, ["cand"], "1", "history run 1", 1, True, ([now], [then])
    )
    comparison.model_change_allowed = allowed
    return comparison


def test_an_older_baseline_is_compared_on_what_it_recorded() -> None:
    # Same provider and model id; endpoint and parameters not recorded: said, not failed.
    comparison = _compare(_info("strong-1"), _info("strong-1", resolved=False))
    (change,) = comparison.models
    assert change.identity_change is None
    assert change.identity_unknown == ["endpoint", "parameters"]
    assert baseline.changed_identity(comparison) is None
    assert baseline.undecided(comparison) is None
    assert (
        "cand: the baseline does not record its endpoint and parameters (an older report): "
        "compared provider and model id only"
    ) in baseline.notes(comparison)
    # Another model id is a change even there, said with what is known of both.
    comparison = _compare(_info("weak-1"), _info("strong-1", resolved=False))
    assert comparison.models[0].identity_change == "cand was openai:strong-1, now openai:weak-1"
    assert baseline.changed_identity(comparison) is not None


def test_a_changed_endpoint_or_parameter_is_another_model() -> None:
    comparison = _compare(_info("m"), _info("m", endpoint="http://b/v1"))
    assert comparison.models[0].identity_change == (
        "cand was openai:m @ http://b/v1, now openai:m @ http://a/v1"
    )
    hotter = _info("m").model_copy(update={"params": ModelParams(temperature=1.0)})
    comparison = _compare(_info("m"), hotter)
    assert comparison.models[0].identity_change == (
        "cand was openai:m @ http://a/v1 (temperature 1), now openai:m @ http://a/v1"
    )
    allowed = _compare(_info("m"), hotter, allowed=True)
    assert baseline.changed_identity(allowed) is None
    assert "(--llm-allow-model-change)" in "\n".join(baseline.notes(allowed))


def _script(server: FakeLLMServer, tasks: int) -> None:
    for i in range(tasks):
        server.script(f"Say word{i}.", [Turn(tool_calls=[f"echo word{i}"]), Turn(text="done")])


def _aliases(pytester: pytest.Pytester, model_id: str) -> None:
    pytester.makeini(f"[pytest]\nllm_model_aliases =\n    cand = openai:{model_id}\n")


def test_an_alias_that_now_means_another_model_fails_the_gate_unless_allowed(
    pytester: pytest.Pytester, server: FakeLLMServer
) -> None:
    _words(pytester, 3, set())
    _script(server, 3)
    endpoint = server.openai_url.rstrip("/")
    _aliases(pytester, "strong-1")
    first = pytester.runpytest("-p", "no:cacheprovider", "--llm-model=cand", "--llm-report=before")
    first.assert_outcomes(passed=3)
    (stored,) = read_report(pytester, "before")["metadata"]["models"]
    assert (stored["provider"], stored["model_id"]) == ("openai", "strong-1")
    assert (stored["endpoint"], stored["resolved"]) == (endpoint, True)
    _aliases(pytester, "weak-1")
    gate = ("--llm-model=cand", "--llm-baseline=1", "--llm-fail-on-regression", "--llm-report=out")
    result = pytester.runpytest("-p", "no:cacheprovider", *gate)
    assert result.ret == EXIT_UNDECIDED
    was = f"openai:strong-1 @ {endpoint}"
    now = f"openai:weak-1 @ {endpoint}"
    result.stdout.fnmatch_lines(
        [
            f"cand = {now} (was {was}) *3*",
            f"cand was {was}, now {now}: two models, not one model's change: the gate does "
            "not pass it (--llm-allow-model-change compares them)",
            f"llmtool gate undecided: the baseline ran another model: cand was {was}, now {now} "
            "(--llm-allow-model-change compares them anyway) (exit status 7)",
        ]
    )
    report = read_report(pytester)
    assert report["baseline"]["models"][0]["identity_change"] == f"cand was {was}, now {now}"
    allowed = pytester.runpytest("-p", "no:cacheprovider", *gate, "--llm-allow-model-change")
    assert allowed.ret == pytest.ExitCode.OK
    gate_said = read_report(pytester)["gate"]
    assert gate_said.startswith("gate held: no detectable change for cand on 3 shared tasks")
    assert gate_said.endswith(f"cand was {was}, now {now}")
    # The history keeps what each run resolved to, and `llmtool history show` says it.
    from pytest_llmtool import history
    from pytest_llmtool.cli import main

    db = pytester.path / ".llmtool" / "history.db"
    assert history.show(db, 1)["identities"]["cand"]["said"] == was
    shown = history.show(db, "last")
    assert shown["identities"]["cand"]["said"] == now and shown["gate"] == gate_said
    assert main(["history", "--db", str(db), "show", "last"]) == 0
    # No key anywhere a run wrote.
    written = [p for p in pytester.path.rglob("*") if p.is_file() and p.suffix != ".db"]
    assert not [p for p in written if SERVER_KEY in p.read_text(errors="replace")]
    for run in (1, 2, 3):
        assert SERVER_KEY not in history.stored_report(db, run)[1]


def test_the_new_option_is_a_switch_with_an_ini_key(pytester: pytest.Pytester) -> None:
    _words(pytester, 1, set())
    pytester.makeini("[pytest]\nllm_allow_model_change = maybe\n")
    result = pytester.runpytest("--llm-model=oracle")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini llm_allow_model_change: expected true or false" in result.stderr.str()


def test_an_older_record_reads_as_unresolved() -> None:
    info = _info("m")
    assert ModelInfo.model_validate_json(info.model_dump_json()) == info
    old = json.loads(info.model_dump_json())
    for key in ("endpoint", "params", "resolved"):
        del old[key]
    assert ModelInfo.model_validate(old).resolved is False


# ------------------------------------------------------- the early stop beside the verdict


def test_a_decided_early_stop_is_said_beside_the_verdict_without_contradicting_it(
    pytester: pytest.Pytester,
) -> None:
    # 3 tasks the oracle passes and the nop fails, 10 trials each: the sequential comparison
    # is decided after 7 discordant trial pairs (e = 26.8 >= 20), while 3 tasks cannot show
    # a difference over tasks (McNemar p = 0.083). Once "oracle better than nop" stood in the
    # skip reasons beside "no detectable difference" in the headline.
    _words(pytester, 3, set())
    result = _run(
        pytester,
        "--llm-model=oracle,nop",
        "--llm-trials=10",
        "--llm-early-stop=compare",
        "--llm-report=out",
        "-rs",
    )
    verdict = (
        "[bash] oracle vs nop: no detectable difference: McNemar p = 0.083 with 3 shared tasks; "
        "about 4 would detect +100 pp"
    )
    stopped = (
        "early stop: oracle ahead of nop in these trials (7 of 7 discordant pairs, "
        "e = 26.8 >= 20); not a verdict over tasks"
    )
    lines = result.stdout.lines
    assert lines[lines.index(verdict) + 1] == stopped
    result.stdout.fnmatch_lines(
        ["SKIPPED*not needed: the sequential comparison is decided: oracle ahead of nop in*"]
    )
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "- early stop: oracle ahead of nop in these trials" in markdown
    for text in (result.stdout.str(), markdown):
        assert "better than" not in text


def test_a_sequential_decision_names_the_arm_ahead_and_its_wins() -> None:
    from pytest_llmtool.records import SequentialDecision
    from pytest_llmtool.stats import sequential

    b_ahead = SequentialDecision(
        subject="model",
        a="x",
        b="y",
        alpha=0.05,
        discordant=9,
        a_wins=1,
        e_value=21.0,
        decided=True,
        better="y",
    )
    assert sequential.said(b_ahead) == (
        "y ahead of x in these trials (8 of 9 discordant pairs, e = 21 >= 20)"
    )


# -------------------------------------------------------------- report.md's run information


def test_the_run_information_names_each_models_endpoint_but_no_credential() -> None:
    from helpers import run_metadata

    from pytest_llmtool.agents.models import ModelEntry, identity
    from pytest_llmtool.report.markdown import metadata_lines

    url = f"https://user:{SERVER_KEY}@llm.example:8443/v1?api_key={SERVER_KEY}"
    entry = ModelEntry(
        "openai",
        "weak-1",
        base_url=url,
        headers=(("X-Key", SERVER_KEY),),
        params=ModelParams(reasoning_effort="high"),
    )
    meta = run_metadata()
    meta.models = [
        identity("cand", entry),
        ModelInfo(name="oracle", provider="offline", model_id="oracle", resolved=True),
    ]
    (models,) = [line for line in metadata_lines(meta) if line.startswith("- **Models**")]
    assert models == (
        "- **Models**: cand (openai:weak-1 `@` `https://llm.example:8443/v1` (reasoning effort "
        "high, headers X-Key)), oracle (offline:oracle)"
    )
    assert SERVER_KEY not in "\n".join(metadata_lines(meta))
