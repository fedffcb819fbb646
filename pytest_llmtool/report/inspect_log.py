"""`--llm-inspect-log=DIR`: the run as Inspect AI evaluation logs, for `inspect view`.

One log per model and kind, built with inspect_ai's own types and written by its own writer,
so Inspect's viewer (and anything else that reads its logs) shows our items as samples: the
conversation with its tool calls and results, the scores, the tokens. inspect_ai is imported
only here, when the writer runs, and only the `inspect` extra installs it.

What maps to what: a sample per item (id: the task id, with the kind's variant such as a
tool mode or guidance document in brackets; epoch: the trial, from 1), the task prompt as its
input, the checks, gates or speedup as its scores (C or I, with the failed ones as the
explanation, and the numbers beside; the agent's last reply as each score's answer, which the
viewer's ANSWER column shows), each tool result as the text the model was sent, the item's
run time (the duration pytest, and so pytest-html, reports) as the sample's time, the agent's
calls as its model usage, and an item that could not be scored as a sample with an error.
An agent CLI's run (`--llm-agent`) maps the same way; its sample's metadata also holds its
record (`agent_cli`: name, version, network, cost source) and the line every output shows of
it (`agent_cli_said`), its usage costs what the record says (the CLI's own figure where it gave
one), and the log's packages list each CLI's version.
Every string is redacted as it is written.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.records import (
    AgentTrace,
    ErrorRecord,
    EvalReport,
    HarborResult,
    ItemResult,
    LLMCallMetrics,
    Message,
    ModelSetup,
    OptimizationResult,
    ReasoningBlock,
    ReasoningContent,
    RedactedThinkingBlock,
    ScenarioResult,
    TaskResult,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from pytest_llmtool.report import Writer
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.report.trace_view import agent_line, final_words
from pytest_llmtool.stats.outcomes import task_of

if TYPE_CHECKING:
    from inspect_ai._util.content import Content
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage
    from inspect_ai.scorer import Score

    from pytest_llmtool.kinds import Kind

# The report's lists of results, by the kind that makes them.
KIND_RESULTS = (
    ("bash", "results"),
    ("scenario", "scenarios"),
    ("optimization", "optimization_results"),
    ("harbor", "harbor_results"),
)
# A choice's stop in Inspect's words (`ChatCompletionChoice.stop_reason`).
InspectStop = Literal[
    "stop", "max_tokens", "model_length", "tool_calls", "content_filter", "unknown"
]
# Scores whose value is C or I: averaged as `accuracy`; the others' numbers as `mean`.
PASS_FAIL = ("checks", "gates", "speedup")


def _safe(name: str) -> str:
    """A model name as part of a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


def sample_key(nodeid: str, model: str, trial: int) -> tuple[str, str]:
    """(file, sample id) of an item: its name without the model and the trial, so that the
    attempts of a task share an id and only a kind's variant (`[baseline]`, `[v2]`) stays."""
    path, _, name = nodeid.rpartition("::")
    task, _, bracket = name.partition("[")
    bracket = bracket.removesuffix("]").removesuffix(f"-t{trial + 1}")
    label = bracket.removeprefix(model).removeprefix("-") if bracket.startswith(model) else bracket
    return path, f"{task}[{label}]" if label else task


def _usage(calls: Sequence[LLMCallMetrics]) -> ModelUsage:
    """Inspect counts the cached parts of a prompt apart from `input_tokens`; ours include them."""
    from inspect_ai.model import ModelUsage

    given = sum(c.input_tokens for c in calls)
    read = sum(c.cache_read_tokens for c in calls)
    written = sum(c.cache_write_tokens for c in calls)
    output = sum(c.output_tokens for c in calls)
    costs = [c.cost_usd for c in calls if c.cost_usd is not None]
    reasoning = [c.reasoning_tokens for c in calls if c.reasoning_tokens is not None]
    return ModelUsage(
        reasoning_tokens=sum(reasoning) if reasoning else None,
        input_tokens=max(0, given - read - written),
        output_tokens=output,
        total_tokens=given + output,
        input_tokens_cache_read=read or None,
        input_tokens_cache_write=written or None,
        total_cost=sum(costs) if costs else None,
    )


def _run_usage(trace: AgentTrace) -> ModelUsage | None:
    """The agent's usage: its calls', or an agent CLI's totals where its calls' tokens were
    not all reported; the cost the record's (`AgentTrace.cost_usd`: a CLI's own figure where
    it gave one). None for a run that made no call and counted no token."""
    from inspect_ai.model import ModelUsage

    calls = trace.llm_calls
    if calls and all(c.usage_reported for c in calls):
        usage = _usage(calls)
    elif trace.total_input_tokens or trace.total_output_tokens:
        given, output = trace.total_input_tokens, trace.total_output_tokens
        usage = ModelUsage(input_tokens=given, output_tokens=output, total_tokens=given + output)
    elif calls:
        usage = _usage(calls)
    else:
        return None
    if trace.agent is not None:
        usage.total_cost = trace.cost_usd
    return usage


def _reasoning(block: ThinkingBlock | RedactedThinkingBlock | ReasoningBlock) -> Content:
    """A reasoning block as Inspect's own providers record it: redacted or encrypted
    reasoning in `reasoning` with `redacted` set, an OpenAI item's id as its `signature`."""
    from inspect_ai._util.content import ContentReasoning

    if isinstance(block, ThinkingBlock):
        return ContentReasoning(reasoning=block.thinking, signature=block.signature)
    if isinstance(block, RedactedThinkingBlock):
        return ContentReasoning(reasoning=block.data, redacted=True)
    summary = "\n\n".join(block.summary)
    if block.encrypted_content is not None:
        return ContentReasoning(
            reasoning=block.encrypted_content,
            summary=summary or None,
            signature=block.id,
            redacted=True,
        )
    return ContentReasoning(reasoning=summary, signature=block.id)


def _assistant_content(message: Message) -> str | list[Content]:
    """The reply's text, with its reasoning before it as Inspect's content parts."""
    from inspect_ai._util.content import ContentText

    if not any(isinstance(b, ReasoningContent) for b in message.content):
        return message.text()
    parts: list[Content] = []
    for block in message.content:
        if isinstance(block, ReasoningContent):
            parts.append(_reasoning(block))
        elif isinstance(block, TextBlock):
            parts.append(ContentText(text=block.text))
    return parts


# Why the agent's run ended, in Inspect's words for a choice's stop.
_INSPECT_STOPS: dict[str, InspectStop] = {
    "end_turn": "stop",
    "max_tokens": "max_tokens",
    "context_window": "model_length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}


def _messages(trace: AgentTrace, model: str) -> list[ChatMessage]:
    """The conversation in Inspect's messages: a tool result becomes a `tool` message naming
    the call it answers."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    names: dict[str, str] = {}
    messages: list[ChatMessage] = []
    for message in trace.messages:
        text = message.text()
        if message.role == "assistant":
            calls = [
                ToolCall(id=b.id, function=b.name, arguments=b.input)
                for b in message.content
                if isinstance(b, ToolUseBlock)
            ]
            names.update((c.id, c.function) for c in calls)
            messages.append(
                ChatMessageAssistant(
                    content=_assistant_content(message), tool_calls=calls or None, model=model
                )
            )
            continue
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                messages.append(
                    ChatMessageTool(
                        content=block.content,
                        tool_call_id=block.tool_use_id,
                        function=names.get(block.tool_use_id),
                    )
                )
        if any(isinstance(b, TextBlock) for b in message.content):
            messages.append(ChatMessageUser(content=text))
    return messages


def _prompt(trace: AgentTrace | None) -> str:
    """The task as the agent was given it: the conversation's first user text."""
    for message in trace.messages if trace else []:
        if message.role == "user" and message.text():
            return message.text()
    return ""


def _pass(passed: bool, explanation: str, **metadata: Any) -> Score:
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    return Score(value=CORRECT if passed else INCORRECT, explanation=explanation, metadata=metadata)


def _number(value: float) -> Score:
    from inspect_ai.scorer import Score

    return Score(value=value)


def _bash(result: TaskResult) -> tuple[list[str], dict[str, Score], dict[str, Any]]:
    """Target, scores and metadata of a bash task: its checks, all and the failed ones."""
    score = result.score
    failed = "\n".join(f"{escaped(r.check)}: {escaped(r.detail)}" for r in score.failed())
    explanation = failed or "every check passed"
    scores = {
        "checks": _pass(result.passed, explanation, score=score.score, max_score=score.max_score),
        "weighted": _number(score.rate()),
    }
    metadata: dict[str, Any] = {
        "category": result.category,
        "mode": result.mode,
        "difficulty": result.difficulty,
        "checks": [r.model_dump(mode="json") for r in score.results],
        **({"tool_mode": result.scripting.mode} if result.scripting else {}),
    }
    if result.generate is not None:  # the script ran once, outside the conversation
        metadata["generate"] = result.generate.model_dump(mode="json")
        metadata["script_runs"] = [c.model_dump(mode="json") for c in result.trace.tool_calls]
    return [escaped(r.check) for r in score.results], scores, metadata


def _scenario(result: ScenarioResult) -> tuple[list[str], dict[str, Score], dict[str, Any]]:
    """A scenario: its gates decide, the judge's and the composite score stand beside."""
    evaluation = result.evaluation
    failed = [f"{g.gate_type}: {escaped(g.message)}" for g in evaluation.gates if not g.passed]
    explanation = "\n".join([evaluation.reason, *failed] if evaluation.reason else failed)
    scores = {
        "gates": _pass(
            result.passed,
            explanation or f"{evaluation.gates_passed} of {evaluation.gates_total} gates passed",
            gates_passed=evaluation.gates_passed,
            gates_total=evaluation.gates_total,
        )
    }
    if evaluation.judge_score is not None:
        scores["judge"] = _number(evaluation.judge_score)
    if evaluation.composite_score is not None:
        scores["composite"] = _number(evaluation.composite_score)
    metadata = {
        "scenario": result.scenario,
        "guidance": result.guidance,
        "tags": result.tags,
        "tier": result.tier,
        "gates": [g.model_dump(mode="json") for g in evaluation.gates],
        "interaction": evaluation.interaction.model_dump(mode="json"),
        "notes": result.notes,
    }
    return [g.gate_type for g in evaluation.gates], scores, metadata


def _optimization(
    result: OptimizationResult,
) -> tuple[list[str], dict[str, Score], dict[str, Any]]:
    """An optimization attempt: passed when it succeeded faster than the task asks."""
    metrics = result.metrics
    speedup = metrics.task_speedup
    why = [
        *(["the tests or the snapshot failed"] if not metrics.success else []),
        *([f"changed the harness: {', '.join(result.tampered_files)}"] if metrics.tampered else []),
        *(["the benchmarks gave nothing usable"] if metrics.measurement_failed else []),
        *result.notes,
    ]
    shown = "none" if speedup is None else f"{speedup:.3g}x"
    explanation = "\n".join([f"speedup {shown}, needed above {result.min_speedup:g}x", *why])
    scores = {"speedup": _pass(result.passed, explanation, task_speedup=speedup)}
    if speedup is not None:
        scores["task_speedup"] = _number(speedup)
    metadata = {
        "category": result.category,
        "agent": result.agent,
        "min_speedup": result.min_speedup,
        "metrics": metrics.model_dump(mode="json"),
    }
    return [f"speedup > {result.min_speedup:g}"], scores, metadata


def _harbor(result: HarborResult) -> tuple[list[str], dict[str, Score], dict[str, Any]]:
    """A Harbor trial: passed when its reward reached the threshold; every reward a score."""
    shown = "none" if result.reward is None else f"{result.reward:g}"
    why = [
        *([result.reward_error] if result.reward_error else []),
        *(["the agent timed out"] if result.agent_timed_out else []),
    ]
    explanation = "\n".join(
        [f"{result.reward_key} {shown}, needed at least {result.threshold:g}", *why]
    )
    scores = {"reward": _pass(result.passed, explanation, reward=result.reward)}
    for key, value in (result.rewards or {}).items():
        scores[f"reward.{key}"] = _number(value)
    metadata = {
        "category": result.category,
        "agent": result.agent,
        "variant": result.variant,
        "rewards": result.rewards,
        "reward_source": result.reward_source,
        "container": result.container.model_dump(mode="json") if result.container else None,
    }
    return [f"{result.reward_key} >= {result.threshold:g}"], scores, metadata


_TRACED = (TaskResult, ScenarioResult, OptimizationResult, HarborResult)


def _result_sample(
    result: ItemResult, kind: str, model: str, setups: dict[str, ModelSetup]
) -> EvalSample:
    """One item of a built-in kind as an Inspect sample (`model`: its Inspect name); its
    system prompt, from the run's recorded setups, leads the messages."""
    from inspect_ai.log import EvalSample, EvalSampleLimit
    from inspect_ai.model import (
        ChatCompletionChoice,
        ChatMessageAssistant,
        ChatMessageSystem,
        ModelOutput,
    )

    if isinstance(result, TaskResult):
        target, scores, metadata = _bash(result)
    elif isinstance(result, ScenarioResult):
        target, scores, metadata = _scenario(result)
    elif isinstance(result, HarborResult):
        target, scores, metadata = _harbor(result)
    else:
        assert isinstance(result, OptimizationResult)
        target, scores, metadata = _optimization(result)
    trace = result.trace if isinstance(result, _TRACED) else None
    messages = _messages(trace, model) if trace else []
    setup = setups.get(trace.setup) if trace and trace.setup else None
    if setup is not None and setup.system:
        messages.insert(0, ChatMessageSystem(content=setup.system))
    replies = [m for m in messages if isinstance(m, ChatMessageAssistant)]
    # The viewer's ANSWER column is a score's `answer`: the agent's last reply, on every score
    # (an agent CLI's own final text when its stream held none).
    answer = replies[-1].text if replies else ""
    if not answer and trace is not None:
        answer = final_words(trace)
    for score in scores.values():
        score.answer = answer or None
    stop: InspectStop = "unknown"
    if trace is not None:
        # A record from before `stop` says only whether the end was natural.
        ended = trace.stop or ("end_turn" if trace.natural_stop else None)
        stop = _INSPECT_STOPS.get(ended or "", "unknown")
    limit = None
    if trace and trace.timed_out:
        limit = EvalSampleLimit(type="time", limit=trace.duration_ms / 1000)
    elif trace and not trace.natural_stop and trace.stop in (None, "max_turns"):
        limit = EvalSampleLimit(type="turn", limit=trace.turns)
    usage = _run_usage(trace) if trace else None
    if trace is not None and trace.agent is not None:  # which agent, network and cost
        metadata["agent_cli"] = trace.agent.model_dump(mode="json")
        metadata["agent_cli_said"] = agent_line(trace)
    return EvalSample(
        id=sample_key(result.nodeid, result.model, result.trial)[1],
        epoch=result.trial + 1,
        input=_prompt(trace),
        target=target,
        messages=messages,
        output=ModelOutput(
            model=model,
            choices=[ChatCompletionChoice(message=replies[-1], stop_reason=stop)]
            if replies
            else [],
        ),
        scores=scores,
        metadata={"kind": kind, "nodeid": result.nodeid, **metadata},
        model_usage={model: usage} if usage is not None else {},
        role_usage={"judge": _usage(result.judge_calls)} if result.judge_calls else {},
        total_time=_seconds(result, trace),
        turn_count=trace.turns if trace else None,
        limit=limit,
    )


def _seconds(result: ItemResult, trace: AgentTrace | None) -> float | None:
    """The sample's time: the item's run, as pytest (and so pytest-html and JUnit) reports
    it; a record from before it was kept has the agent's conversation time only."""
    if result.run_ms is not None:
        return result.run_ms / 1000
    return trace.duration_ms / 1000 if trace else None


def _error_sample(error: ErrorRecord, key: str) -> EvalSample:
    """An item that could not be scored: its error, no score."""
    from inspect_ai._util.error import EvalError
    from inspect_ai.log import EvalSample

    return EvalSample(
        id=key,
        epoch=error.trial + 1,
        input="",
        target="",
        error=EvalError(
            message=error.message, traceback=error.message, traceback_ansi=error.message
        ),
        metadata={"kind": error.kind, "nodeid": error.nodeid, "category": error.category},
    )


class _Log:
    """The samples of one (model, kind) as they are made, and what their header needs."""

    def __init__(self, kind: str, model: str) -> None:
        self.kind, self.model = kind, model
        self.samples: list[EvalSample] = []
        self.keys: list[tuple[str, str]] = []
        # Summed over the samples by role: the agent's model ("agent") and the judge.
        self.usage: dict[str, ModelUsage] = {}

    def add(self, key: tuple[str, str], sample: EvalSample) -> None:
        self.keys.append(key)
        self.samples.append(sample)
        used = [("agent", u) for u in sample.model_usage.values()]
        used += [("judge", u) for u in sample.role_usage.values()]  # its only role
        for role, usage in used:
            self.usage[role] = self.usage[role] + usage if role in self.usage else usage


class InspectLogWriter(Writer):
    """Writes the Inspect AI logs into `directory`; a failure is said on the terminal, not
    raised, so it never costs the run its other reports."""

    def __init__(self, directory: Path, redact: Redactor) -> None:
        self.directory = directory
        self.redact = redact
        self.paths: list[Path] = []
        self.problem: str | None = None

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        try:
            self.paths = self._write(report)
        except (OSError, ValueError) as exc:  # a pydantic ValidationError is a ValueError
            self.problem = self.redact(f"{type(exc).__name__}: {exc}")
        return self.paths

    def terminal(self, report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
        if self.problem is not None:
            return ["", f"inspect logs: not written: {self.problem}"]
        if not self.paths:
            return []
        return [
            "",
            f"inspect logs: {len(self.paths)} in {self.directory} "
            f"(inspect view --log-dir {self.directory})",
        ]

    def _write(self, report: EvalReport) -> list[Path]:
        """A kind at a time: only its samples are held while its logs are written."""
        names = {m.name: f"{m.provider}/{m.model_id}" for m in report.metadata.models}
        run_id = uuid.uuid4().hex
        self.directory.mkdir(parents=True, exist_ok=True)
        written = []
        # Each trial's sample carries its task's verdict over the trials (`--llm-task-pass`).
        verdicts = {(v.model, v.task): v for v in report.task_verdicts}
        for kind, field in KIND_RESULTS:
            logs: dict[str, _Log] = {}
            results: Sequence[ItemResult] = getattr(report, field)
            for result in results:
                log = logs.setdefault(result.model, _Log(kind, result.model))
                sample = _result_sample(
                    result, kind, names.get(result.model, result.model), report.setups
                )
                verdict = verdicts.get((result.model, task_of(result.nodeid, result.trial)))
                if verdict is not None and sample.metadata is not None:
                    sample.metadata["task_verdict"] = verdict.model_dump(mode="json")
                log.add(sample_key(result.nodeid, result.model, result.trial), sample)
            for error in report.errors:
                # A bad dataset line has no model: no model ran it.
                if error.kind == kind and error.model:
                    log = logs.setdefault(error.model, _Log(kind, error.model))
                    key = sample_key(error.nodeid, error.model, error.trial)
                    log.add(key, _error_sample(error, key[1]))
            for log in logs.values():
                written.append(
                    self._write_log(report, log, names.get(log.model, log.model), run_id)
                )
        return written

    def _write_log(self, report: EvalReport, log: _Log, model: str, run_id: str) -> Path:
        """One log file, written whole under a temporary name and then moved into place."""
        from inspect_ai.log import EvalSample, write_eval_log

        _unique_ids(log)
        header = self._header(report, log, model, run_id)
        # Every string of a sample, redacted once more as the JSON text it is written as.
        header.samples = [
            EvalSample.model_validate_json(self.redact(s.model_dump_json())) for s in log.samples
        ]
        stamp = report.metadata.started[:19].replace(":", "-")
        path = self.directory / f"{stamp}_{log.kind}_{_safe(log.model)}.eval"
        tmp = path.with_name(f".{path.stem}.tmp.eval")
        write_eval_log(header, str(tmp))
        os.replace(tmp, path)
        return path

    def _header(self, report: EvalReport, log: _Log, model: str, run_id: str) -> EvalLog:
        """The log without its samples: what ran, how it scored, what it used; redacted."""
        from inspect_ai.log import (
            EvalConfig,
            EvalDataset,
            EvalLog,
            EvalMetric,
            EvalResults,
            EvalScore,
            EvalSpec,
            EvalStats,
        )
        from inspect_ai.scorer import value_to_float

        to_float = value_to_float()  # C is 1, I is 0
        meta = report.metadata
        ids = list(dict.fromkeys(str(s.id) for s in log.samples))
        scored = [s for s in log.samples if s.scores]
        eval_scores = []
        for name in dict.fromkeys(n for s in scored for n in s.scores or {}):
            values = [
                to_float(s.scores[name].value) for s in scored if s.scores and name in s.scores
            ]
            metric = "accuracy" if name in PASS_FAIL else "mean"
            eval_scores.append(
                EvalScore(
                    name=name,
                    scorer=name,
                    scored_samples=len(values),
                    unscored_samples=len(log.samples) - len(values),
                    metrics={metric: EvalMetric(name=metric, value=sum(values) / len(values))},
                )
            )
        packages = {"pytest-llmtool": meta.plugin, "pytest": meta.pytest}
        if meta.bashkit:
            packages["bashkit"] = meta.bashkit
        packages |= {name: version or "unknown" for name, version in meta.agents.items()}
        header = EvalLog(
            status="success" if meta.complete is not False else "cancelled",
            eval=EvalSpec(
                run_id=run_id,
                created=meta.started,
                task=log.kind,
                task_display_name=f"{log.kind} ({log.model})",
                dataset=EvalDataset(name=log.kind, samples=len(ids), sample_ids=ids),
                model=model,
                config=EvalConfig(
                    epochs=meta.trials,
                    turn_limit=meta.max_turns,
                    cost_limit=report.budget.limit_usd if report.budget else None,
                ),
                packages=packages,
                metadata={
                    "pytest_llmtool": meta.model_dump(mode="json", exclude={"models"}),
                    "partial": report.partial,
                },
            ),
            results=EvalResults(
                total_samples=len(log.samples),
                completed_samples=len(scored),
                scores=eval_scores,
            ),
            stats=EvalStats(
                started_at=meta.started,
                completed_at=meta.finished,
                model_usage={model: log.usage["agent"]} if "agent" in log.usage else {},
                role_usage={"judge": log.usage["judge"]} if "judge" in log.usage else {},
            ),
        )
        return EvalLog.model_validate_json(self.redact(header.model_dump_json()))


def _unique_ids(log: _Log) -> None:
    """Two files of one kind may share a task id: then the file names the sample too."""
    seen: dict[tuple[str, int], set[str]] = {}
    for (path, key), sample in zip(log.keys, log.samples, strict=True):
        seen.setdefault((key, sample.epoch), set()).add(path)
    clashing = {key for (key, _), paths in seen.items() if len(paths) > 1}
    for (path, key), sample in zip(log.keys, log.samples, strict=True):
        if key in clashing:
            sample.id = f"{path}::{key}"
