"""Every result model of the plugin, and the versioned run record they add up to.

Field names follow the specs: bashkit-eval's `ToolCallResult`, `AgentTrace`, `TaskScore`,
`CategorySummary`, `EvalSummary` (seed 000), `LLMCallMetrics` (seed 003), and llm-tool-test's
`InteractionMetrics`, `GateResult`, `JudgeResponse`, `EvaluationResult` (seed 004), so a report
reads as the upstream ones do. Everything here is JSON-native: it travels on pytest reports
(and so across xdist workers), into the journal and into `report.json`.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    computed_field,
)

if TYPE_CHECKING:
    from pytest_llmtool import stats


IntervalMethod = Literal[
    "wilson",
    "t",
    "clustered-t",
    "wilson-cc",
    "clustered-wilson-cc",
    "tango",
    "paired-t",
    "log-t",
]


# Below this many tasks an interval is too wide to read much into; outputs say so.
SMALL_SAMPLE = 30


class Interval(BaseModel):
    """A 95% interval beside a rate or a difference (`stats/`, `stats/intervals.py`).

    `method` (docs/results.md): `wilson-cc` for a rate over tasks (Wilson with
    continuity correction, at the effective sample size of a mean of per-task values),
    `clustered-wilson-cc` for the same over tasks of several attempts each (averaged per
    task first), `tango` and `paired-t` for a paired difference of rates, `log-t` for a
    geometric mean of ratios; `wilson`, `t`, `clustered-t` in older reports. `n` counts
    tasks, the independent units; `small` flags fewer than 30, where the interval is wide."""

    estimate: float
    low: float
    high: float
    n: int
    method: IntervalMethod

    @computed_field  # type: ignore[prop-decorator]
    @property
    def small(self) -> bool:
        return self.n < SMALL_SAMPLE

    @classmethod
    def of(cls, interval: stats.Interval, method: IntervalMethod) -> Interval:
        return cls(
            estimate=interval.estimate,
            low=interval.low,
            high=interval.high,
            n=interval.n,
            method=method,
        )

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


class Usage(BaseModel):
    """Token counts of one call. `input_tokens` is the whole prompt, cached parts included,
    so context growth reads the same with caching on or off."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # The part of `output_tokens` the model spent reasoning (OpenAI's `reasoning_tokens`,
    # Anthropic's `thinking_tokens`): already in `output_tokens`, so priced there. None when
    # the provider did not say (not zero: unknown).
    reasoning_tokens: int | None = None
    # False when the answer carried no usage at all (a streamed reply from llama.cpp's
    # server): its token counts are unknown, not zero, and so is its cost.
    reported: bool = True


class ItemResult(BaseModel):
    """What every kind's result record has: which item, model and trial, and the outcome."""

    nodeid: str
    model: str
    trial: int = 0
    # The judge's model calls for this item (each judge run's numbered from 1): paid for like
    # the agent's, so they count in every total and in `--llm-max-cost`.
    judge_calls: list[LLMCallMetrics] = Field(default_factory=list)
    # How long the item's run took (its sandbox, agent and scoring, not its wait for a slot):
    # the duration pytest reports for it, and so JUnit and pytest-html; None in a record from
    # before it.
    run_ms: float | None = None
    # Judge calls this item did not make because its checks and gates had already decided it
    # (`--llm-judge-when=undecided`, or a failed guardrail): counted, never guessed as passes.
    judge_calls_saved: int = 0

    @property
    def passed(self) -> bool:
        raise NotImplementedError


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


class ThinkingBlock(BaseModel):
    """The model's reasoning text as its provider returned it: an Anthropic thinking block,
    whose `signature` must go back to the API byte for byte in the tool-use turns that follow,
    or the reasoning text an OpenAI-compatible server returns beside its reply (no signature,
    never sent back)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(BaseModel):
    """Anthropic thinking the provider encrypted (`data` is opaque): sent back unchanged."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ReasoningBlock(BaseModel):
    """An OpenAI Responses reasoning item: its summary text, and with `store: false` its
    `encrypted_content`, which goes back with the next turn so the model keeps its reasoning
    across tool calls."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[str] = Field(default_factory=list)
    encrypted_content: str | None = None


# What a model reasoned rather than said: kept in the trace, shown folded, not part of the
# reply's text.
ReasoningContent = (ThinkingBlock, RedactedThinkingBlock, ReasoningBlock)


def reasoning_texts(block: ThinkingBlock | RedactedThinkingBlock | ReasoningBlock) -> list[str]:
    """The readable text of a reasoning block: none for redacted or encrypted reasoning."""
    if isinstance(block, ThinkingBlock):
        return [block.thinking]
    if isinstance(block, ReasoningBlock):
        return list(block.summary)
    return []


ContentBlock = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ReasoningBlock,
    Field(discriminator="type"),
]


class Message(BaseModel):
    """One conversation turn in a provider-neutral shape; providers translate it."""

    role: Literal["user", "assistant"]
    content: list[ContentBlock]

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class ToolSpec(BaseModel):
    """A tool as the model is offered it: its name, what it is for, its input schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ToolCallResult(BaseModel):
    """One bash invocation within a task."""

    commands: str
    stdout: str
    stderr: str
    exit_code: int


# Why a reply ended, whatever the provider calls it: `end_turn` is the model's own end of
# turn (the only natural stop), `tool_use` a reply that calls tools, `max_tokens` a reply cut
# at its output limit (a tool call in it is not run), `refusal` and `content_filter` the model
# or the provider declining, `pause` a turn the provider paused (continued), `empty` a reply
# with no content at all, `context_window` a conversation too long for the model, `other`
# anything else (the provider's word is in `stop_reason`).
StopKind = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "refusal",
    "content_filter",
    "pause",
    "empty",
    "context_window",
    "other",
]


class LLMCallMetrics(BaseModel):
    """One model call within a task (seed 003)."""

    call_number: int
    input_tokens: int
    output_tokens: int
    latency_ms: float
    cumulative_input: int
    tool_calls_made: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    retries: int = 0
    stop_reason: str | None = None
    cost_usd: float | None = None
    # Milliseconds of the call before its answering attempt was sent: the wait for room in its
    # provider's window, failed attempts and the pauses between them (`latency_ms` is the rest).
    wait_ms: float = 0.0
    # Why the reply ended, in the provider-neutral words of `StopKind` (`stop_reason` is the
    # provider's own word); None in a record from before it.
    stop: StopKind | None = None
    # Output tokens spent reasoning (part of `output_tokens`); None: the provider did not say.
    reasoning_tokens: int | None = None
    # Milliseconds from sending a streamed call to its first token; None when not streamed.
    ttft_ms: float | None = None
    # False when the provider sent no usage for this call: its token counts read 0 but are
    # unknown, and its cost is None.
    usage_reported: bool = True


# `ItemResult.judge_calls` names `LLMCallMetrics` before it exists: complete it now, or the
# result class of a kind in another module (a third-party one) could not be built.
ItemResult.model_rebuild()


class ModelParams(BaseModel):
    """What is sent with every call of a model (its table entry's `params`, with
    `--llm-temperature` and `--llm-max-tokens` over them); None where nothing was sent and the
    provider's default applied. A field left unset is None, so a record from before a field
    existed compares equal to one that leaves it unset."""

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    # OpenAI reasoning effort (`minimal`, `low`, `medium`, `high`, ...), as the API names it.
    reasoning_effort: str | None = None
    # Anthropic extended thinking: a budget of tokens, or "adaptive" (the model decides).
    thinking_budget: int | Literal["adaptive"] | None = None
    # Send reasoning back between tool turns (Anthropic thinking blocks, OpenAI encrypted
    # reasoning items); None is the default, on. False drops them, as bashkit-eval does.
    keep_reasoning: bool | None = None
    # Stream every call (time to first token is recorded); None streams only the calls the
    # SDK will not send without streaming (a large `max_tokens`).
    stream: bool | None = None
    # Fields merged into the request body as given (a server's own parameters).
    extra_body: dict[str, Any] | None = None


class ModelSetup(BaseModel):
    """What the model was given besides the conversation: the system prompt, the tools and
    the parameters. `report.json` holds each distinct one once (`EvalReport.setups`), keyed by
    `key()`; a trace names its own (`AgentTrace.setup`)."""

    system: str
    tools: list[ToolSpec] = Field(default_factory=list)
    params: ModelParams = Field(default_factory=ModelParams)

    def key(self) -> str:
        """A digest of the content: equal setups share one entry, whoever ran them."""
        for known, key in _KEYED:
            if known == self:
                return key
        key = hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]
        _KEYED.appendleft((self, key))
        return key


# The setups keyed last, with their keys: a run gives most of its items one setup, whose
# digest (of its tool schemas and system prompt) costs more than the rest of a small task's
# run; telling it equal to one of these costs little (its parts are the same objects).
_KEYED: deque[tuple[ModelSetup, str]] = deque(maxlen=4)


class AgentInfo(BaseModel):
    """The agent that ran an item when it was not the built-in loop: an agent CLI
    (`--llm-agent`: `claude-code`, `codex`, ...) or an external command (`--llm-agent-cmd`:
    `external`), as it said of itself and as the plugin ran it."""

    name: str
    # What the agent's `--version` printed; None when it could not say.
    version: str | None = None
    exit_code: int | None = None
    # The agent's own figure of what the run cost (Claude Code's `total_cost_usd`, opencode's
    # per-step costs); None where it gives none.
    reported_cost_usd: float | None = None
    # Which figure `AgentTrace.cost_usd` is: the agent's own ("agent"), its tokens at the
    # price table's price ("price_table"), or none (None: no price, no figure).
    cost_source: Literal["agent", "price_table"] | None = None
    # What its sandbox let it reach: "endpoint" (the model endpoint only, enforced), "host"
    # (the host's network: nothing enforced), "none" (no network at all).
    network: Literal["endpoint", "host", "none"] | None = None
    # The agent's last answer in its own words.
    final_text: str = ""


class AgentTrace(BaseModel):
    """Everything one agent run did, as seed 000's `AgentTrace`, plus its per-call metrics."""

    messages: list[Message] = Field(default_factory=list)
    tool_calls: list[ToolCallResult] = Field(default_factory=list)
    turns: int = 0
    natural_stop: bool = False
    timed_out: bool = False
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    duration_ms: int = 0
    llm_calls: list[LLMCallMetrics] = Field(default_factory=list)
    # Why the run ended: the last reply's `StopKind`, or "max_turns", "timed_out", "budget";
    # None in a record from before it and for a trace no loop ran.
    stop: str | None = None
    # The key of this run's `ModelSetup` in `EvalReport.setups`; None for an external agent's
    # trace and in a record from before it.
    setup: str | None = None
    # The agent CLI or external command that ran the item; None for the built-in loop.
    agent: AgentInfo | None = None

    @property
    def given(self) -> ModelSetup | None:
        """The setup this trace's model was given: known only to a `RunTrace`, in the
        process that ran the item; None in a trace read back."""
        return None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tool_call_count(self) -> int:
        return len(self.tool_calls)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def last_tool_response(self) -> ToolCallResult | None:
        return self.tool_calls[-1] if self.tool_calls else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def base_context(self) -> int:
        """Input tokens of the first call: system prompt and tools before any history."""
        calls = self._counted_calls()
        return calls[0].input_tokens if calls else 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def context_growth_avg(self) -> float:
        """Mean input-token increase between consecutive calls; 0 with fewer than two."""
        calls = self._counted_calls()
        if len(calls) < 2:
            return 0.0
        return (calls[-1].input_tokens - calls[0].input_tokens) / (len(calls) - 1)

    def _counted_calls(self) -> list[LLMCallMetrics]:
        """The calls whose provider said how many tokens they took: a call with no usage
        (refused as too long, a stream that sent none) reads 0, which is no context size."""
        return [c for c in self.llm_calls if c.usage_reported]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_usd(self) -> float | None:
        """What the run cost; None when the model has no price (offline agents). An agent
        that reported its own cost is taken at its word (`AgentInfo.cost_source`)."""
        if self.agent is not None and self.agent.cost_source == "agent":
            return self.agent.reported_cost_usd
        costs = [c.cost_usd for c in self.llm_calls]
        if not costs or any(c is None for c in costs):
            return None
        return sum(c for c in costs if c is not None)

    @property
    def total_cache_read_tokens(self) -> int:
        return sum(c.cache_read_tokens for c in self.llm_calls)

    @property
    def total_reasoning_tokens(self) -> int | None:
        """Reasoning tokens over the calls whose provider said; None when none did."""
        said = [c.reasoning_tokens for c in self.llm_calls if c.reasoning_tokens is not None]
        return sum(said) if said else None

    @property
    def total_cache_write_tokens(self) -> int:
        return sum(c.cache_write_tokens for c in self.llm_calls)

    @property
    def total_retries(self) -> int:
        return sum(c.retries for c in self.llm_calls)

    def transcript(self) -> str:
        """The conversation as readable text, as the artifacts and reports keep it (a judge
        reads it as JSON entries: `agents/judge.py`)."""
        lines = []
        for message in self.messages:
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    lines.append(f"[tool result]\n{block.content}")
                elif isinstance(block, ToolUseBlock):
                    lines.append(
                        f"[{message.role} runs] {block.input.get('commands', block.input)}"
                    )
                elif isinstance(block, ThinkingBlock):
                    lines.append(f"[{message.role} thinks] {block.thinking}")
                elif isinstance(block, ReasoningBlock):
                    lines += [f"[{message.role} thinks] {text}" for text in block.summary]
                elif isinstance(block, RedactedThinkingBlock):
                    lines.append(f"[{message.role} thinks] (redacted by the provider)")
                else:
                    lines.append(f"[{message.role}] {block.text}")
        return "\n".join(lines) + "\n"

    @property
    def tool_calls_ok(self) -> int:
        return sum(1 for c in self.tool_calls if c.exit_code == 0)

    @property
    def tool_calls_error(self) -> int:
        return len(self.tool_calls) - self.tool_calls_ok


class RunTrace(AgentTrace):
    """The trace of a run made in this process, which also holds the setup its model was
    given: that travels apart, once per distinct value (`roles.py`), not with every result.
    A subclass, so that the traces the controller reads back (several times per result at
    the end of a run) carry no private attribute to initialise."""

    _given: ModelSetup | None = PrivateAttr(default=None)

    def record_setup(self, given: ModelSetup) -> None:
        self.setup, self._given = given.key(), given

    @property
    def given(self) -> ModelSetup | None:
        return self._given


class SubcommandMetrics(BaseModel):
    total: int = 0
    errors: int = 0
    help_invocations: int = 0


# Which rules scored a scenario (`kinds/scenario/rules.py`): ax-eval's current ones, or seed
# 004's formulas.
Rules = Literal["ax-eval", "seed"]

# Where a scenario's interaction metrics come from (ax-eval's names): the agent's own tool
# calls, an MCP target's tools/call results, or a scan of a plain-text transcript.
EvidenceSource = Literal[
    "structured_tool_calls", "structured_mcp_tool_calls", "transcript_regex_fallback"
]
# The names results written before ax-eval's took.
_OLD_SOURCES = {"events": "structured_tool_calls", "transcript": "transcript_regex_fallback"}


def _evidence_source(value: Any) -> Any:
    return _OLD_SOURCES.get(value, value) if isinstance(value, str) else value


class InteractionMetrics(BaseModel):
    """Layer 1 of a scenario's evaluation: how the agent used the target tool, by the rules
    that scored it (`EvaluationResult.rules`). Never decides an outcome by itself (the
    `target_commands` guardrail reads only whether the target was used).

    `tool_reuse_count` (total - unique) was `retry_count`, and `interaction_evidence_source`
    was `source` (`events`, `transcript`): records written before still load.
    """

    total_commands: int = 0
    unique_commands: int = 0
    error_count: int = 0
    tool_reuse_count: int = Field(
        default=0, validation_alias=AliasChoices("tool_reuse_count", "retry_count")
    )
    help_invocations: int = 0
    first_try_success_rate: float = 0.0
    iteration_ratio: float = 0.0
    completed: bool = False
    interaction_evidence_source: Annotated[EvidenceSource, BeforeValidator(_evidence_source)] = (
        Field(
            default="structured_tool_calls",
            validation_alias=AliasChoices("interaction_evidence_source", "source"),
        )
    )
    by_subcommand: dict[str, SubcommandMetrics] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error_rate(self) -> float:
        return self.error_count / self.total_commands if self.total_commands else 0.0


class McpToolCall(BaseModel):
    """One tools/call of an MCP target (ax-eval's McpToolCallEvent); `result` is an excerpt."""

    server: str
    tool: str
    arguments: dict[str, Any]
    is_error: bool
    duration_ms: int
    result: str


class McpSessionRecord(BaseModel):
    """What the built-in agent saw of an MCP target: the tools offered to the model, those
    the server exposes but the scenario does not declare (not offered), and every call."""

    server: str
    transport: Literal["stdio", "http"]
    declared_tools: list[str]
    undeclared_tools: list[str] = Field(default_factory=list)
    calls: list[McpToolCall] = Field(default_factory=list)


class GateResult(BaseModel):
    """Layer 2: one gate's verdict (seed 004's struct, with ax-eval's `identifier`: the gate's
    type and what it checks, `file_exists(out.txt)`, `script(./check.sh)`; empty in a record
    from before it)."""

    gate_type: str
    identifier: str = ""
    passed: bool
    message: str


class EvaluatorResult(BaseModel):
    """One of ax-eval's `scripts.evaluators`, as its `metrics.json` records it: the `score`,
    `summary` and `metrics` its JSON output gave, or the `error` that kept it from giving
    them (a failed or timed-out script, output that is not JSON). Diagnostic: never decides."""

    name: str
    score: float | None = None
    summary: str | None = None
    metrics: Any = None
    error: str | None = None


class Prescriptiveness(BaseModel):
    """How much the scenario's inputs (task and guidance) told the agent how to work, as the
    judge rated it: 0 goal only, 1 hints, 2 a partial recipe, 3 step by step (ax-eval's scale)."""

    level: int = Field(ge=0, le=3)
    rationale: str = ""


class JudgeResponse(BaseModel):
    """Layer 3: a validated judge answer. `weighted_score` is recomputed from the scores, or
    is the judge's own where that is lower (a hard cap it applied, `agents/judge.py`).

    Fields a rubric's `require_fields` leaves out may be missing from the answer, hence the
    defaults; `scores` is always required because the weighted score is computed from it.
    `adjusted_score` is ours, not the judge's: `weighted_score * (1 - level/3 * discount)`,
    informational only (never the verdict or the composite); None without a prescriptiveness.
    """

    scores: dict[str, float]
    weighted_score: float
    confidence: float | None = None
    issues: list[str] = Field(default_factory=list)
    highlights: list[str] = Field(default_factory=list)
    rationale: str | None = None
    prescriptiveness: Prescriptiveness | None = None
    adjusted_score: float | None = None


JudgeDecision = Literal["pass", "fail", "inconclusive"]


class JudgeOpinion(BaseModel):
    """One judge model's answers on one scenario item (`--llm-judge-samples`, `docs/judge.md`):
    the weighted score and each criterion's score of every sample (an answer still invalid
    after its retry counts 0), their mean's 95% t interval (two samples or more), and the
    decision by the rule: pass when the low bound is at or above the threshold, fail when
    the high bound is below it, otherwise inconclusive."""

    model: str
    samples: list[float]
    criteria: dict[str, list[float]] = Field(default_factory=dict)
    invalid: int = 0
    interval: Interval | None = None
    decision: JudgeDecision


GateStatus = Literal["not_configured", "passed", "failed"]


class EfficiencyMetrics(BaseModel):
    """ax-eval's `efficiency` block of `metrics.json`."""

    total_commands: int
    unique_commands: int
    error_count: int
    tool_reuse_count: int
    help_invocations: int
    first_try_success_rate: float
    iteration_ratio: float
    completed: bool


class AxEvalMetrics(BaseModel):
    """One scenario item as ax-eval's `metrics.json` says it, so a tool that reads ax-eval's
    results reads ours: a view of the `EvaluationResult`, never stored apart from it.

    `gate_status` is `not_configured` (no gates), `passed` or `failed`, and `failed_gates`
    names the failed gates by identifier; `judge_passed` is None when no judge decided,
    `judge_error` says why a judge that was asked gave no valid score, and `evaluator_results`
    are the `scripts.evaluators`' results."""

    gate_status: GateStatus
    failed_gates: list[str]
    details: list[GateResult]
    judge_score: float | None
    judge_passed: bool | None
    judge_threshold: float | None
    judge_error: str | None
    composite_score: float | None
    efficiency: EfficiencyMetrics
    interaction_evidence_source: EvidenceSource
    evaluator_results: list[EvaluatorResult]


class EvaluationResult(BaseModel):
    """Seed 004's `EvaluationResult`: three layers, an optional composite, one outcome.

    `rules` says which rules scored it (a record from before them was scored by seed 004's
    formulas). `interaction_failure` names a broken `interaction.target_commands` guardrail
    (or, under ax-eval's rules, transcript evidence from an agent that gives structured
    calls): it fails the item as a failed gate does. With repeated judging or a judge panel,
    `judge_score` is the mean over judges of each judge's mean, `judge_panel` holds every
    judge's samples, and `judge_decision` is the panel's (a strict majority, else
    inconclusive). An inconclusive judge fails the item: `outcome` is "fail" and
    `judge_decision` says why. `metrics` is the same result in ax-eval's `metrics.json`
    shape, derived on output."""

    rules: Rules = "seed"
    interaction: InteractionMetrics
    interaction_failure: str | None = None
    gates: list[GateResult]
    gates_passed: int
    gates_total: int
    judge_score: float | None = None
    judge_response: JudgeResponse | None = None
    judge_verdict: str | None = None
    judge_threshold: float | None = None  # the scenario's pass_threshold, when it has a judge
    composite_score: float | None = None
    outcome: Literal["pass", "fail"]
    reason: str = ""
    judge_decision: JudgeDecision | None = None
    judge_interval: Interval | None = None
    judge_panel: list[JudgeOpinion] = Field(default_factory=list)
    evaluator_results: list[EvaluatorResult] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def metrics(self) -> AxEvalMetrics:
        m = self.interaction
        failed = [g.identifier or g.gate_type for g in self.gates if not g.passed]
        status: GateStatus = "failed" if failed else "passed" if self.gates else "not_configured"
        decided = self.judge_decision is not None
        return AxEvalMetrics(
            gate_status=status,
            failed_gates=failed,
            details=self.gates,
            judge_score=self.judge_score,
            judge_passed=self.judge_decision == "pass" if decided else None,
            judge_threshold=self.judge_threshold,
            judge_error=self.judge_verdict if decided and self.judge_score is None else None,
            composite_score=self.composite_score,
            efficiency=EfficiencyMetrics.model_validate(
                m.model_dump(include=set(EfficiencyMetrics.model_fields))
            ),
            interaction_evidence_source=m.interaction_evidence_source,
            evaluator_results=self.evaluator_results,
        )


class ScenarioResult(ItemResult):
    """One scenario item's outcome: which scenario, model and guidance, and what happened."""

    scenario: str
    guidance: str | None = None
    tags: list[str]
    tier: int
    evaluation: EvaluationResult
    trace: AgentTrace | None = None
    mcp: McpSessionRecord | None = None  # an MCP target's session
    notes: list[str]
    artifacts: str
    duration_ms: int

    @property
    def passed(self) -> bool:
        return self.evaluation.outcome == "pass"

    @property
    def inconclusive(self) -> bool:
        """Failed because the judge could not decide (not counted as a pass)."""
        return self.evaluation.judge_decision == "inconclusive"


class ScoreResult(BaseModel):
    """The outcome of one expectation check."""

    check: str
    passed: bool
    detail: str
    weight: float


class TaskScore(BaseModel):
    """All checks of one task; `score` sums the weights of the passed ones."""

    task_id: str
    results: list[ScoreResult]
    score: float
    max_score: float

    @classmethod
    def of(cls, task_id: str, results: list[ScoreResult]) -> TaskScore:
        """A task's score from its check results: the passed weights out of all weights."""
        return cls(
            task_id=task_id,
            results=results,
            score=sum(r.weight for r in results if r.passed),
            max_score=sum(r.weight for r in results),
        )

    def all_passed(self) -> bool:
        return all(r.passed for r in self.results)

    def rate(self) -> float:
        return self.score / self.max_score if self.max_score else 1.0

    def failed(self) -> list[ScoreResult]:
        return [r for r in self.results if not r.passed]


# The two ways bashkit-eval runs a scripting-tool task (one with mock `tools`): `scripted`,
# the mock tools are commands in the bash sandbox; `baseline`, each is its own model tool.
ToolMode = Literal["scripted", "baseline"]
TOOL_MODES: tuple[ToolMode, ...] = ("scripted", "baseline")


class InnerCommand(BaseModel):
    """One command of a scripting-tool run that bashkit traces (its `ScriptedCommandInvocation`):
    a mock tool (`tool`), `help` or a tool's `--help` (`help`), or `discover`. `call` is the
    index in `trace.tool_calls` of the model's tool call that ran it. Other commands of a
    script (`jq`, `echo`) are not traced, as upstream."""

    call: int
    name: str
    kind: Literal["tool", "help", "discover"]
    args: list[str] = Field(default_factory=list)
    exit_code: int


class ScriptingMetrics(BaseModel):
    """What bashkit-eval records of a scripting-tool run beyond a bash task's trace (its
    `ScriptingTrace` and the metrics its mira study keeps): the mode, the traced inner commands
    and their counts by kind, and the bytes of tool output (raw stdout + stderr, and the text
    sent back to the model). In baseline mode every model tool call is one `tool` command."""

    mode: ToolMode
    discovery: bool = False
    invocations: list[InnerCommand] = Field(default_factory=list)
    raw_tool_output_bytes: int = 0
    tool_output_sent_bytes: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def inner_commands(self) -> int:
        return len(self.invocations)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def inner_tool(self) -> int:
        return sum(1 for i in self.invocations if i.kind == "tool")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def inner_help(self) -> int:
        return sum(1 for i in self.invocations if i.kind == "help")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def inner_discover(self) -> int:
        return sum(1 for i in self.invocations if i.kind == "discover")


class GenerateMetrics(BaseModel):
    """A generate-mode task (bashkit-eval): one reply, its script extracted and run once."""

    script_found: bool
    extracted: Literal["fenced", "raw"] | None = None
    script_bytes: int = 0
    exit_code: int | None = None
    timed_out: bool = False
    generate_ms: float = 0.0
    exec_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


class TaskResult(ItemResult):
    """One bash task item's outcome: which task, how it scored and what the agent did."""

    task_id: str
    category: str
    score: TaskScore
    trace: AgentTrace
    # bashkit-eval's task tags since 2026 (`agent`/`runtime`/`generate`, `basic`/`repo`/`hard`).
    mode: str = "agent"
    difficulty: str = "basic"
    # Scripting-tool tasks only: the mode and what upstream records of such a run.
    scripting: ScriptingMetrics | None = None
    # Generate-mode tasks only.
    generate: GenerateMetrics | None = None
    # Where it ran (`--llm-bash`): "bashkit", or "container" with the container's record.
    shell: str = "bashkit"
    container: ContainerInfo | None = None
    # Under `--llm-bash=bashkit,container`, a failed bashkit attempt's tool calls replayed
    # in a fresh container and scored by the same checks: True when they pass there (a
    # bashkit gap), False when they fail there too (the model's); None: not replayed.
    real_shell_passed: bool | None = None
    real_shell_detail: str | None = None

    @property
    def passed(self) -> bool:
        return self.score.all_passed()

    @property
    def duration_ms(self) -> int:
        return self.trace.duration_ms


class ErrorRecord(BaseModel):
    """An item that could not be scored (sandbox or agent crash, bad dataset line)."""

    nodeid: str
    kind: str = ""
    trial: int = 0
    task_id: str
    model: str
    category: str
    message: str


class CallUsage(BaseModel):
    """Tokens, retries and cost summed over model calls; `cost_usd` is None when any call's
    cost is unknown (no price, or no usage reported): a sum of the others would read as the
    whole cost."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    retries: int = 0
    cost_usd: float | None = None

    @classmethod
    def of(cls, calls: list[LLMCallMetrics]) -> CallUsage:
        usage = cls()
        usage.add(calls)
        return usage

    @classmethod
    def of_run(cls, trace: AgentTrace | None, judged: list[LLMCallMetrics]) -> CallUsage:
        """An item's calls, its agent's and its judges': the agent's part of the cost is
        `AgentTrace.cost_usd`, the agent CLI's own figure where it gave one (its calls'
        prices otherwise), so that every output's cost of an item is the record's."""
        usage = cls.of([*(trace.llm_calls if trace is not None else []), *judged])
        if trace is not None and trace.agent is not None and trace.agent.cost_source == "agent":
            judges = CallUsage.of(judged).cost_usd if judged else 0.0
            own = trace.cost_usd
            usage.cost_usd = None if own is None or judges is None else own + judges
        return usage

    def add(self, calls: list[LLMCallMetrics]) -> None:
        # Summed in locals and set once: setting a model's attribute costs about a
        # microsecond, and the end of a run sums every result's calls more than once.
        inputs = outputs = cache_read = cache_write = retries = 0
        cost = 0.0 if self.cost_usd is None and self.calls == 0 else self.cost_usd
        for call in calls:
            inputs += call.input_tokens
            outputs += call.output_tokens
            cache_read += call.cache_read_tokens
            cache_write += call.cache_write_tokens
            retries += call.retries
            cost = None if cost is None or call.cost_usd is None else cost + call.cost_usd
        if calls:
            self.calls += len(calls)
            self.input_tokens += inputs
            self.output_tokens += outputs
            self.cache_read_tokens += cache_read
            self.cache_write_tokens += cache_write
            self.retries += retries
            self.cost_usd = cost


class CategorySummary(BaseModel):
    tasks: int = 0
    passed: int = 0
    score: float = 0.0
    max_score: float = 0.0
    rate: float = 0.0
    rate_ci: Interval | None = None
    pass_rate_ci: Interval | None = None


class HealthCriterion(BaseModel):
    """One line of seed 000's "Healthy Profile", judged on the point estimate."""

    criterion: str
    value: str
    met: bool


class StopTally(BaseModel):
    """Why a summary's items stopped, and what their models spent reasoning."""

    # How many items' runs ended each way (`AgentTrace.stop`: "end_turn", "max_tokens",
    # "max_turns"...); a trace from before it is not counted.
    stops: dict[str, int] = Field(default_factory=dict)
    # Output tokens spent reasoning, over the calls whose provider said; None when none did.
    reasoning_tokens: int | None = None

    def count_run(self, trace: AgentTrace) -> None:
        if trace.stop is not None:
            self.stops[trace.stop] = self.stops.get(trace.stop, 0) + 1
        if (reasoning := trace.total_reasoning_tokens) is not None:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + reasoning


class GenerateSummary(BaseModel):
    """Generate-mode tasks: how often the one reply held a script, and how often that first
    script passed every check (with its 95% interval over tasks)."""

    tasks: int = 0
    scripts_found: int = 0
    passed: int = 0
    pass_rate: float = 0.0
    pass_rate_ci: Interval | None = None
    timed_out: int = 0


class EvalSummary(StopTally):
    total_tasks: int = 0
    total_passed: int = 0
    total_score: float = 0.0
    total_max_score: float = 0.0
    overall_rate: float = 0.0
    pass_rate: float = 0.0
    total_tool_calls: int = 0
    tool_calls_ok: int = 0
    tool_calls_error: int = 0
    tool_call_success_rate: float = 0.0
    total_turns: int = 0
    avg_turns_per_task: float = 0.0
    avg_tool_calls_per_task: float = 0.0
    natural_stops: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    total_cache_read_tokens: int = 0
    total_cache_write_tokens: int = 0
    total_retries: int = 0
    total_cost_usd: float | None = None
    mean_base_context: float = 0.0
    mean_context_growth_avg: float = 0.0
    total_duration_ms: int = 0
    avg_duration_ms: float = 0.0
    errors: int = 0
    by_category: dict[str, CategorySummary] = Field(default_factory=dict)
    # bashkit-eval's other task tags, as `by_category` (`agent`/`runtime`/`generate`;
    # `basic`/`repo`/`hard`).
    by_mode: dict[str, CategorySummary] = Field(default_factory=dict)
    by_difficulty: dict[str, CategorySummary] = Field(default_factory=dict)
    # Generate-mode tasks: the first (and only) script's success.
    generate: GenerateSummary | None = None
    # 95% intervals of `pass_rate`, `overall_rate` and `tool_call_success_rate` (same
    # estimates); None with nothing to rate.
    pass_rate_ci: Interval | None = None
    overall_rate_ci: Interval | None = None
    tool_call_success_ci: Interval | None = None
    healthy_profile: list[HealthCriterion] = Field(default_factory=list)
    # The `llm_judge:` checks' calls: already in the token, retry and cost totals above (they
    # are paid for like the agent's), and here apart.
    judge: CallUsage = Field(default_factory=CallUsage)

    def add_judge_calls(self, calls: list[LLMCallMetrics]) -> None:
        """Count judge calls in the totals and in `judge`."""
        self.judge.add(calls)
        spent = CallUsage.of(calls)
        self.total_input_tokens += spent.input_tokens
        self.total_output_tokens += spent.output_tokens
        self.total_cache_read_tokens += spent.cache_read_tokens
        self.total_cache_write_tokens += spent.cache_write_tokens
        self.total_retries += spent.retries
        if spent.cost_usd is not None:
            self.total_cost_usd = (self.total_cost_usd or 0.0) + spent.cost_usd


class ToolModeSummary(StopTally):
    """One model's scripting-tool items in one tool mode (`--llm-tool-mode`), over the items
    scored (errored ones are counted in `errors` only). Averages are per item; `mock_calls`
    sums the traced mock tool commands (`inner_tool`: in scripted mode a script may call
    several, in baseline mode each model tool call is one)."""

    tasks: int = 0
    passed: int = 0
    pass_rate: float = 0.0
    pass_rate_ci: Interval | None = None
    overall_rate: float = 0.0
    total_turns: int = 0
    avg_turns: float = 0.0
    total_tool_calls: int = 0
    tool_calls_ok: int = 0
    avg_tool_calls: float = 0.0
    mock_calls: int = 0
    help_calls: int = 0
    discover_calls: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    avg_tokens: float = 0.0
    raw_tool_output_bytes: int = 0
    tool_output_sent_bytes: int = 0
    natural_stops: int = 0
    total_cost_usd: float | None = None
    errors: int = 0


class ScenarioSummary(StopTally):
    """Scenario outcomes of one model: passes, gates, judge and mean interaction metrics."""

    scenarios: int = 0
    passed: int = 0
    # The rules that scored these items: the interaction means mix formulas when several.
    rules: list[Rules] = Field(default_factory=list)
    gates_passed: int = 0
    gates_total: int = 0
    judged: int = 0
    mean_judge_score: float | None = None
    # Items failed because the judge (its samples' interval, or its panel) could not decide.
    inconclusive: int = 0
    # The judge's own spread: the mean standard deviation of one judge's repeated scores of
    # one item, over items and judges with two samples or more.
    judge_sample_sd: float | None = None
    # Judge panels: Krippendorff's alpha (interval metric) of the judges' mean scores, per
    # criterion id and "overall" (every criterion of every item a unit); None: undefined.
    panel_alpha: dict[str, float | None] = Field(default_factory=dict)
    mean_composite_score: float | None = None
    total_commands: int = 0
    error_count: int = 0
    help_invocations: int = 0
    completed: int = 0
    mean_first_try_success_rate: float = 0.0
    mean_iteration_ratio: float = 0.0
    # 95% intervals of passed / scenarios and gates_passed / gates_total.
    pass_rate_ci: Interval | None = None
    gate_pass_rate_ci: Interval | None = None
    # Every model call of the model's scenarios, agent and judge; and the judge's apart.
    usage: CallUsage = Field(default_factory=CallUsage)
    judge: CallUsage = Field(default_factory=CallUsage)

    def add_calls(self, result: ScenarioResult) -> None:
        before = self.usage.cost_usd
        if self.usage.calls == 0 and before is None:
            before = 0.0
        self.usage.add(result.trace.llm_calls if result.trace else [])
        self.usage.add(result.judge_calls)
        trace = result.trace
        if trace is not None and trace.agent is not None and trace.agent.cost_source == "agent":
            # The item's cost as its record has it: the agent CLI's own figure.
            spent = CallUsage.of_run(trace, result.judge_calls).cost_usd
            self.usage.cost_usd = None if spent is None or before is None else before + spent
        self.judge.add(result.judge_calls)


class TrialSummary(BaseModel):
    """Repeated trials of one model on one kind's tasks (`--llm-trials`; `stats/trials.py`).

    pass@k (some of k attempts pass, unbiased) and pass^k (all k pass) are averaged over the
    `tasks_at_k[k]` tasks with at least k scored attempts; pass@1 is the mean success rate.
    `flaky` names the tasks whose attempts disagree, by node id without the trial suffix."""

    trials: int
    tasks: int = 0
    attempts: int = 0
    passed: int = 0
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    pass_hat_k: dict[int, float] = Field(default_factory=dict)
    tasks_at_k: dict[int, int] = Field(default_factory=dict)
    # 95% intervals over the per-task values behind `pass_at_k` and `pass_hat_k`.
    pass_at_k_ci: dict[int, Interval] = Field(default_factory=dict)
    pass_hat_k_ci: dict[int, Interval] = Field(default_factory=dict)
    flaky: list[str] = Field(default_factory=list)


TaskVerdictValue = Literal["pass", "fail", "undecided"]


class TaskVerdict(BaseModel):
    """One task's verdict over its trials (`--llm-trials`, `--llm-task-pass`;
    `stats/task_verdicts.py`): passed k of the N asked, against the rule's `need`.

    `verdict` is "pass" once `passed >= need`, "fail" once the failures leave fewer than
    `need` passes possible, else "undecided" (errored or cut-short trials left it open): an
    undecided task never counts as meeting its rule. `not_needed` trials were skipped by
    `--llm-early-stop` after the verdict was decided and count as neither pass nor fail;
    `stopped` trials were stopped by `--llm-max-cost`, which says nothing of the model, so
    they are neither failures nor errors."""

    kind: str
    model: str
    task: str  # the node id without its trial suffix, as `TrialSummary.flaky` names tasks
    task_id: str
    category: str = ""
    trials: int  # N: the attempts asked
    need: int  # passes the rule needs of N
    passed: int = 0  # k
    failed: int = 0
    errored: int = 0
    stopped: int = 0
    not_needed: int = 0
    verdict: TaskVerdictValue
    reason: str = ""
    flaky: bool = False
    # Over this task's scored attempts: the unbiased pass@k and pass^k (k = 1 and N).
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    pass_hat_k: dict[int, float] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def shown(self) -> str:
        """k/N as every output shows it: `8/10`, `3/10 (7 not needed)`."""
        extra = [
            f"{n} {what}"
            for n, what in (
                (self.errored, "errored"),
                (self.stopped, "stopped by the cost limit"),
                (self.not_needed, "not needed"),
            )
            if n
        ]
        return f"{self.passed}/{self.trials}" + (f" ({', '.join(extra)})" if extra else "")


class SequentialDecision(BaseModel):
    """An anytime-valid comparison of two arms over trials (`--llm-early-stop`;
    `stats/sequential.py`): its e-value may be read after every paired outcome, and the
    comparison is decided once it reaches 1/alpha (Ville's inequality bounds the chance
    of that under no difference by alpha, however often it is looked at)."""

    subject: str  # "model" or "baseline"
    a: str
    b: str
    alpha: float
    pairs: int = 0  # paired outcomes seen
    discordant: int = 0  # pairs where exactly one arm passed
    a_wins: int = 0  # discordant pairs won by `a`
    e_value: float = 1.0
    decided: bool = False
    better: str | None = None  # the arm the decision favours, once decided
    rule: str = ""  # the rule's name and parameters, as the docs state it


class SkippedTrial(BaseModel):
    """A trial `--llm-early-stop` did not run: reported as skipped ("not needed"), never as
    a pass or a failure."""

    nodeid: str
    kind: str
    model: str
    task: str  # as `TaskVerdict.task`
    trial: int
    reason: str
    by: Literal["task", "comparison"] = "task"  # what was decided, so the trial was not needed


class EarlyStopSummary(BaseModel):
    """What `--llm-early-stop` skipped and what that saved: `calls_saved` and
    `cost_saved_usd` are estimates from the same task's trials that ran (their mean),
    labelled as such wherever shown; None when no ran trial had a price."""

    modes: list[str] = Field(default_factory=list)  # "tasks", "compare"
    trials_skipped: int = 0
    skipped: list[SkippedTrial] = Field(default_factory=list)
    calls_saved: float = 0.0
    cost_saved_usd: float | None = None
    comparisons: list[SequentialDecision] = Field(default_factory=list)

    def line(self) -> str:
        """What stopping saved in one sentence, for the terminal and `report.md`."""
        # Named by what skipped a trial, not by the modes asked for: a comparison decided in
        # the first round may skip every trial before any task is decided.
        decided = {s.by for s in self.skipped}
        reasons = ["tasks decided"] if "task" in decided else []
        reasons += ["comparison decided"] if "comparison" in decided else []
        why = f" ({', '.join(reasons)})" if reasons and self.trials_skipped else ""
        trials = "trial" if self.trials_skipped == 1 else "trials"
        cost = "" if self.cost_saved_usd is None else f" and ~${self.cost_saved_usd:.2f}"
        return (
            f"early stop: {self.trials_skipped} {trials} not needed{why}; saved "
            f"~{self.calls_saved:g} model calls{cost} (estimated from the trials that ran)"
        )


class Comparison(BaseModel):
    """A paired comparison of `a` and `b` over the tasks both ran (`stats/compare.py`): two models,
    two guidance documents of one model's scenarios, the two tool modes (`scripted`,
    `baseline`) of one model's scripting-tool tasks, or an agent variant of one model's Harbor
    tasks and its base variant (`variant`; the score is the reward cut to [0, 1]).

    Per task, attempts are averaged (pass rate, score: the weighted check score of a bash
    task, the gates-passed ratio of a scenario); differences are `a - b`. McNemar counts a
    task as passed when most of its attempts passed. `a_only` lists the tasks `a` passes and
    `b` fails, `b_only` the reverse. One rule (docs/results.md): the verdict names a
    winner when `test` (McNemar's score test with one attempt per task, else the paired t
    test) gives p < 0.05; `mcnemar_p` holds that p (its name is older than the t test), and
    `pass_difference` is the interval that test inverts, so it excludes 0 exactly then.
    `tasks_to_detect`: about how many shared tasks would detect the difference seen at 80%
    power (None when there is none)."""

    kind: str
    subject: Literal["model", "guidance", "tool_mode", "variant"]
    a: str
    b: str
    model: str | None = None
    tasks: int
    a_pass_rate: float
    b_pass_rate: float
    pass_difference: Interval
    score_difference: Interval
    a_only: list[str] = Field(default_factory=list)
    b_only: list[str] = Field(default_factory=list)
    mcnemar_p: float
    test: str = "McNemar"
    tasks_to_detect: int | None = None
    better: str | None = None
    verdict: str


class Diagnostics(BaseModel):
    """Seed 000's cross-model diagnostics for one kind, over two or more models: tasks every
    model fails (a gap in the tool, or a broken task), tasks only one model fails (a
    capability difference: model -> tasks) and categories below 50% for every model."""

    models: list[str]
    tasks: int
    failed_by_all: list[str] = Field(default_factory=list)
    failed_by_one: dict[str, list[str]] = Field(default_factory=dict)
    weak_categories: dict[str, dict[str, float]] = Field(default_factory=dict)


class PytestSummary(BaseModel):
    """Test counts of one optimization run (JUnit XML or pytest's summary line)."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failures(self) -> int:
        """What FC-Eval counts against a run: failed plus errored tests."""
        return self.failed + self.errors


class SnapshotSummary(BaseModel):
    """The snapshot check of an optimization run: did the outputs the baseline produced
    stay the same? `pass_to_fail` counts checks that passed before and fail now."""

    status: str
    pass_to_fail: int = 0


class SpeedupInterval(BaseModel):
    """A 95% interval of a speedup, computed on log ratios and exponentiated (`n` rounds).

    `paired-log-t`: a t interval of log(nop/agent) over rounds paired by index (interleaved
    rounds share the machine's drift); `welch-log-t` when the round counts differ. For a
    task it combines its benchmarks' log-ratio errors (`combined-log-t`). `estimate` is the
    geometric mean of the ratios, so it may differ a little from the ratio of medians."""

    estimate: float
    low: float
    high: float
    n: int
    method: Literal["paired-log-t", "welch-log-t", "combined-log-t"]


class BenchmarkSpeedup(BaseModel):
    """One benchmark of an optimization task: the three medians and FC-Eval's ratios.

    `agent_nop` = median(nop)/median(agent) (above 1: faster), `oracle_nop` the same for the
    human solution, `advantage` = agent_nop - oracle_nop. None where a median is missing or
    not positive; `valid` when all three medians are (with the baseline fallback, the agent
    counts as the untouched baseline, so nop's and oracle's are enough)."""

    name: str
    nop_median: float | None = None
    oracle_median: float | None = None
    agent_median: float | None = None
    agent_nop: float | None = None
    oracle_nop: float | None = None
    advantage: float | None = None
    valid: bool
    agent_nop_ci: SpeedupInterval | None = None


class AgentTaskMetrics(BaseModel):
    """FC-Eval's per-agent task payload (`agent_metrics_by_agent[agent:model]`).

    Speedup and advantages are None when no benchmark is valid. `task_speedup_ci` is ours:
    the 95% interval of `task_speedup`, None with fewer than two rounds or on fallback.
    `tampered` (the agent changed the harness) and `measurement_failed` (its benchmark run
    gave nothing usable) are ours too: either makes the attempt a failure."""

    per_benchmark_speedups: list[BenchmarkSpeedup]
    pytest_summary: PytestSummary
    snapshot_summary: SnapshotSummary | None = None
    pytest_failed: bool
    snapshot_failed: bool
    success: bool
    fallback_to_baseline: bool
    agent_advantage: float | None = None
    agent_advantage_level1: float | None = None
    agent_advantage_level2: float | None = None
    agent_advantage_level3: float | None = None
    agent_advantage_level4: float | None = None
    num_benchmarks: int
    num_valid_benchmarks: int
    task_speedup: float | None = None
    task_speedup_ci: SpeedupInterval | None = None
    task_cost_usd: float = 0.0
    trajectory_length: int = 0
    tampered: bool = False
    measurement_failed: bool = False


class AgentRunSummary(BaseModel):
    """FC-Eval's run-level aggregation for one `agent:model` over its task attempts.

    Means skip the attempts where a value is None (no valid benchmark); `attempts` counts
    them all. `accuracy` is resolved attempts over attempts, so it equals
    `mean_success_rate`; pass@k uses FC-Eval's ks (no k = 1) over tasks with at least k
    attempts. `cost_weighted_advantage` is `agent_advantage / mean_cost_per_task`, 0 when
    the cost is 0. `mean_speedup_ci` is the 95% `log-t` interval of the geometric mean over
    tasks (each task's attempts combined first), its estimate that geometric mean; None below
    two tasks."""

    tasks: int
    attempts: int
    mean_speedup: float | None = None
    mean_speedup_ci: Interval | None = None
    mean_success_rate: float
    num_benchmarks: int
    num_valid_benchmarks: int
    agent_advantage: float | None = None
    agent_advantage_level1: float | None = None
    agent_advantage_level2: float | None = None
    agent_advantage_level3: float | None = None
    agent_advantage_level4: float | None = None
    mean_cost_per_task: float
    cost_weighted_advantage: float | None = None
    mean_trajectory_length: float
    accuracy: float
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    total_cost: float


def agent_model(agent: str) -> str:
    """The model of an optimization agent key, `agent:model` (`OptimizationRunSummary`)."""
    return agent.split(":", 1)[-1]


class OptimizationRunSummary(BaseModel):
    """FC-Eval's `agent_metrics_summary` by `agent:model`, and what the run cost in all."""

    by_agent: dict[str, AgentRunSummary] = Field(default_factory=dict)
    total_cost: float = 0.0
    cost_by_agent_model: dict[str, float] = Field(default_factory=dict)


class OptimizationResult(ItemResult):
    """One optimization item: an agent's attempt at a task, scored as FC-Eval scores it.

    `agent` is FC-Eval's `agent:model` key (`builtin:haiku`, `oracle:oracle`, `nop:nop`).
    Passed (`passed`, the one rule every output follows) when the attempt succeeded (tests
    and snapshot held) and its task speedup's 95% interval lies above the task's
    `min_speedup`. `tampered_files` are the harness files the agent changed
    (`kinds/optimization/harness.py`). `trajectory` holds the task's trajectory assertions'
    results: each is a guardrail, so one failed fails the item whatever the speedup."""

    task_id: str
    category: str
    agent: str
    min_speedup: float
    metrics: AgentTaskMetrics
    oracle_pytest: PytestSummary | None = None
    trace: AgentTrace | None = None
    notes: list[str] = Field(default_factory=list)
    tampered_files: list[str] = Field(default_factory=list)
    # The agent left the project as it found it: its speedup is the noise of an untouched
    # copy, whatever the interval says, so it is never a pass.
    unchanged: bool = False
    trajectory: list[GateResult] = Field(default_factory=list)
    artifacts: str
    duration_ms: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """Every trajectory assertion held, success, and the speedup and its 95% interval's
        lower bound above `min_speedup`.

        The point speedup alone is not enough: an untouched copy's is noise around 1x and can
        land above any threshold (the nop once read 1.79x [0.66, 3.85] against 1.5x), while
        its interval reaches below it. No interval (fewer than two rounds, rounds without
        spread) is not a pass: the speedup cannot be told from noise, so it fails closed.
        An agent that changed no file of the project (the nop) never passes: the interval
        rule alone would let noise through about once in 40 at `min_speedup: 1`."""
        m, ci = self.metrics, self.metrics.task_speedup_ci
        if self.unchanged or not all(g.passed for g in self.trajectory):
            return False
        if not m.success or m.task_speedup is None or ci is None:
            return False
        return m.task_speedup > self.min_speedup and ci.low > self.min_speedup


class ContainerInfo(BaseModel):
    """The container an item ran in: which engine and daemon, which image (its id, so a
    rebuilt image is told from the old), the network it had and the limits, each with how it
    was enforced (`sandbox/container/limits.py`)."""

    engine: str  # "docker 28.2.2 (server 20.10.24)"
    endpoint: str  # where the CLI pointed: "default", a context, or DOCKER_HOST sans credentials
    image: str
    image_id: str
    built: bool = False  # built by this run (False: found present)
    network: str = "none"
    limits: dict[str, float] = Field(default_factory=dict)
    limits_enforced: dict[str, str] = Field(default_factory=dict)


class PhaseTiming(BaseModel):
    """One phase of a Harbor trial (`TimingInfo`): ISO 8601 times in UTC."""

    started_at: str | None = None
    finished_at: str | None = None


class ExceptionInfo(BaseModel):
    """What went wrong in a Harbor trial, as Harbor's `exception_info` says it."""

    exception_type: str
    exception_message: str
    exception_traceback: str = ""
    occurred_at: str | None = None


class HarborAgentResult(BaseModel):
    """Harbor's `agent_result` (`AgentContext`): the agent's tokens and cost; None where
    unknown (never 0 for unknown). `n_input_tokens` includes cached tokens."""

    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    model_usage: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)


class HarborStepResult(BaseModel):
    """One step of a multi-step Harbor task (Harbor's `step_results` entry)."""

    step_name: str
    rewards: dict[str, float] | None = None
    reward_source: Literal["reward.json", "reward.txt"] | None = None
    # Why the step has no reward (no file, empty, unparsable, verifier timeout): graded as 0.
    reward_error: str | None = None
    agent_timed_out: bool = False
    agent_exit_code: int | None = None
    exception_info: ExceptionInfo | None = None
    agent_execution: PhaseTiming | None = None
    verifier: PhaseTiming | None = None


class HarborResult(ItemResult):
    """One Harbor task item: an agent's trial of a task in its container, rewarded by the
    task's verifier as Harbor rewards it.

    `rewards` are the trial's (a multi-step task's rolled up by its strategy); None when the
    verifier gave none, a graded failure (`reward_error` says why). Passed when the reward
    `reward_key` reaches `threshold`. `details` keeps what `reward.json` held beside numbers
    (FormulaCode's `patch`, `lsv`, `tamper_precheck` blocks) verbatim."""

    task_id: str
    task_name: str  # task.toml's [task].name, else the directory's name
    category: str
    agent: str  # "oracle", "nop", "builtin", or an agent CLI's name
    variant: str = ""  # --llm-harbor-variants: the variant's id ("" without variants)
    variant_kind: Literal["base", "mcp", "skills"] | None = None
    reward_key: str = "reward"
    threshold: float = 1.0
    rewards: dict[str, float] | None = None
    reward_source: Literal["reward.json", "reward.txt"] | None = None
    reward_error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    steps: list[HarborStepResult] = Field(default_factory=list)
    agent_timed_out: bool = False
    agent_exit_code: int | None = None
    agent_result: HarborAgentResult | None = None
    exception_info: ExceptionInfo | None = None
    environment_setup: PhaseTiming | None = None
    agent_setup: PhaseTiming | None = None
    agent_execution: PhaseTiming | None = None
    verifier: PhaseTiming | None = None
    container: ContainerInfo | None = None
    trace: AgentTrace | None = None
    duration_ms: int = 0
    # The tail of the verifier's `test-stdout.txt` (the last step's), and the host directory
    # the container's `/logs` was copied to (`logs/`; a multi-step task's earlier steps' under
    # `steps/<name>/logs/`).
    verifier_output: str | None = None
    artifacts: str | None = None
    # `[[metadata.llmtool_trajectory]]`'s results: guardrails, one failed fails the item.
    trajectory: list[GateResult] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reward(self) -> float | None:
        """The reward that decides the item; None when the verifier gave none."""
        return None if self.rewards is None else self.rewards.get(self.reward_key)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        reward = self.reward
        held = all(g.passed for g in self.trajectory)
        return held and reward is not None and reward >= self.threshold


class HarborMetric(BaseModel):
    """One reward key over a summary's items: its mean and 95% interval over tasks (each
    task's attempts averaged first) among the items whose rewards hold it (`n`); `missing`
    counts the graded items without it (no reward at all, or not that key), which Harbor's
    own mean would count as 0 and this one leaves out. The interval is `wilson-cc` when every
    value lies in [0, 1], else a t interval (`t`; rewards such as FormulaCode's advantages
    are unbounded); None for a t interval below two tasks or without spread."""

    n: int = 0
    missing: int = 0
    mean: float | None = None
    interval: Interval | None = None
    min: float | None = None
    max: float | None = None


class HarborSummary(StopTally):
    """One model's Harbor items (under one variant: keyed `model-variant` then): passes with
    their interval over tasks, every reward key as a metric under its own name, graded
    failures by reason, errors by type, tokens and cost (None when some item's are unknown,
    never a partial sum read as the whole; `tokens_known` items had theirs), and the mean
    time of each trial phase (`environment_setup`, `agent_setup`, `agent_execution`,
    `verifier`) in milliseconds over the items that ran it."""

    agent: str = ""
    variant: str = ""
    items: int = 0
    passed: int = 0
    pass_rate: float = 0.0
    pass_rate_ci: Interval | None = None
    metrics: dict[str, HarborMetric] = Field(default_factory=dict)
    # Why graded items failed: `RewardFileNotFoundError`, `below threshold`, `no reward key`...
    failures: dict[str, int] = Field(default_factory=dict)
    # Harbor's `exception_info` types of the graded items (`AgentTimeoutError`...), and
    # `infrastructure` for the items that errored without a result (no image, no daemon).
    errors: dict[str, int] = Field(default_factory=dict)
    agent_timeouts: int = 0
    input_tokens: int | None = None
    cache_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    tokens_known: int = 0
    phase_ms: dict[str, float] = Field(default_factory=dict)


class HarborVariantSummary(BaseModel):
    """One model's Harbor items under one agent variant, aggregated as ot-harness reports a
    variant (`kinds/harbor/variants.py`). A trial is `invalid` when the verifier gave no
    reward (or the item errored before it), `partial` when its tokens or cost are unknown;
    `pass_rate` and `mean_score` are over the trials that are not invalid; a tooling failure
    is an item that errored (the container, the image, the agent's start). Means of tokens,
    cost and wall time are over the trials that have them: None when none does, never 0."""

    kind: Literal["base", "mcp", "skills"] = "base"
    trial_count: int = 0
    task_count: int = 0
    passed: int = 0
    pass_rate: float | None = None
    pass_rate_ci: Interval | None = None
    partial_rate: float = 0.0
    invalid_rate: float = 0.0
    tooling_failure_rate: float = 0.0
    mean_score: float | None = None
    mean_wall_time_seconds: float | None = None
    median_wall_time_seconds: float | None = None
    mean_tokens: float | None = None
    mean_cost_usd: float | None = None
    total_cost_usd: float | None = None
    mean_tool_calls: float | None = None


# The version of `report.json`'s format: raised when a field is removed or changes meaning
# (adding one does not), so a reader of an older report knows what it holds.
SCHEMA_VERSION = 1


class ModelInfo(BaseModel):
    """A model of the run as `--llm-model` named it, and what that resolved to: a baseline
    compares these to notice an alias that now means another model.

    `endpoint` is the base URL calls went to, without credentials, query or fragment (None:
    the provider's default); `params` what every call was sent (None for a model the plugin
    does not call: the offline agents, an external agent). Never a key or a header. Reports
    from before these were recorded have `resolved` False: endpoint and params unknown, not
    the defaults.

    A model the plugin calls also records its table protocol (`anthropic`, `openai-chat`,
    `openai-responses`), the SDK client when not the plain one (`bedrock (region ...)`), its
    headers' names (never their values), the variable its key came from, whether reasoning
    went back to it (`kept` or `dropped`), and `digest`, a digest of all that decides its
    answers (name and key variable aside). Records from before these have them None: a
    baseline compares them on what they have."""

    name: str
    provider: str
    model_id: str
    endpoint: str | None = None
    params: ModelParams | None = None
    resolved: bool = False
    protocol: str | None = None
    client: str | None = None
    headers: list[str] = Field(default_factory=list)
    api_key_env: str | None = None
    reasoning: Literal["kept", "dropped"] | None = None
    digest: str | None = None
    # The agent CLI that drove the model (`--llm-agent`, a table entry's `agent`) and what
    # its `--version` printed; None for the built-in loop (and the version when it could
    # not say). Part of the digest when set.
    agent: str | None = None
    agent_version: str | None = None


class RunMetadata(BaseModel):
    """Where a report came from: versions, models, settings that change scores, and when."""

    plugin: str
    pytest: str
    python: str
    bashkit: str | None = None
    # The runtimes every bash task's sandbox offers, and what each one is.
    bashkit_runtimes: dict[str, str] = Field(default_factory=dict)
    # Where bash tasks ran (`--llm-bash`): "bashkit", "container", "container:IMAGE".
    bash_shells: list[str] = Field(default_factory=lambda: ["bashkit"])
    sdks: dict[str, str] = Field(default_factory=dict)
    models: list[ModelInfo]
    # The agent CLIs that drove the run's models (`--llm-agent`, a table entry's `agent`)
    # and what each one's `--version` printed (None: it could not say).
    agents: dict[str, str | None] = Field(default_factory=dict)
    max_turns: int
    trials: int = 1
    command_line: list[str] = Field(default_factory=list)
    started: str
    finished: str
    exit_status: int
    # What each command run for a scenario or optimization task may consume: the defaults
    # with --llm-limits over them (a task's own `limits:` sets what --llm-limits leaves), and
    # how this machine enforced each (rlimit, cgroup, watch or not enforced).
    limits: dict[str, int] = Field(default_factory=dict)
    limits_enforced: dict[str, str] = Field(default_factory=dict)
    # The run's dataset: per kind, a digest of its selected tasks' ids and content. A
    # baseline chosen by `last` must have the same one.
    fingerprint: dict[str, str] = Field(default_factory=dict)
    # Items collected (resumed ones included) and those that finished. `complete` is False
    # when some never ran (interrupted, the cost limit, -x), and `stopped` says why; None in
    # a record from before these fields.
    collected: int | None = None
    ran: int | None = None
    complete: bool | None = None
    stopped: str | None = None
    # Items taken from the journal of the stopped run this one resumed.
    resumed: int = 0
    # Wall time of this session, in seconds (not the sum of item durations).
    wall_s: float | None = None

    def partial_line(self) -> str | None:
        """`PARTIAL: 4 of 40 items ran (interrupted)`, said first wherever a run is shown;
        None for a complete run."""
        if self.complete is not False:
            return None
        why = f" ({self.stopped})" if self.stopped else ""
        return f"PARTIAL: {self.ran} of {self.collected} items ran{why}"


class StoppedTask(BaseModel):
    """An item `--llm-max-cost` stopped: before it started, or before one of its model calls
    (`agents/budget.py`). Not scored, so no pass rate counts it; the calls it made are in
    `trace` (the agent's, so far) and in the run's spend. Resuming the run runs it again."""

    nodeid: str
    kind: str
    task_id: str
    model: str
    category: str
    trial: int = 0
    reason: str
    trace: AgentTrace | None = None
    # The judges' calls it made before the limit stopped it.
    judge_calls: list[LLMCallMetrics] = Field(default_factory=list)


class BudgetSummary(BaseModel):
    """`--llm-max-cost` and what the run spent on model calls, agents' and judges'.

    A call starts only when its worst case fits in what is left, so `spent_usd` passes
    `limit_usd` only under xdist, where processes reserving at the same moment can each
    take the room left; `overshoot_usd` says by how much. `stopped` counts the items the
    limit stopped (`EvalReport.stopped`)."""

    limit_usd: float
    spent_usd: float
    stopped: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reached(self) -> bool:
        """The limit stopped an item, or the run spent all of it."""
        return self.stopped > 0 or self.spent_usd >= self.limit_usd

    @computed_field  # type: ignore[prop-decorator]
    @property
    def overshoot_usd(self) -> float:
        return max(0.0, self.spent_usd - self.limit_usd)

    def line(self) -> str:
        """The budget in one sentence, for the terminal and `report.md`."""
        said = f"--llm-max-cost: ${self.spent_usd:.4f} spent of ${self.limit_usd:.4f}"
        over = f", over by ${self.overshoot_usd:.4f}" if self.overshoot_usd else ""
        if not self.stopped:
            return said + over
        tasks = "task" if self.stopped == 1 else "tasks"
        return f"{said}{over}: {self.stopped} {tasks} stopped by the cost limit (not scored)"


class BaselineChange(BaseModel):
    """One model against the baseline over the tasks both runs scored (`stats/baseline.py`).

    Tasks are node ids without the trial suffix; attempts are averaged per task, differences
    are current - baseline. `worse`/`better` list the tasks whose pass rate fell/rose (with
    one attempt each: pass -> fail and fail -> pass, McNemar's discordant pairs); `added` and
    `removed` tasks are left out of the test. `detectable_change` is the smallest change in
    pass rate this many tasks could detect (80% power at 5%, `stats.detectable_change`); None
    when not even 100 pp could be. `identity` and `baseline_identity` are what the model's
    name resolved to in each run; `identity_change` says how they differ (None: the same, as
    far as the baseline recorded); `identity_unknown` names what the baseline did not record."""

    model: str
    tasks: int
    # Tasks this run has for the model (compared or not): more than `tasks` when some are
    # missing from the baseline, and the report says so with both numbers.
    run_tasks: int | None = None
    baseline_pass_rate: float
    current_pass_rate: float
    pass_rate_change: Interval | None = None
    score_change: Interval | None = None
    mcnemar_p: float | None = None
    detectable_change: float | None = None
    worse: list[str] = Field(default_factory=list)
    better: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    regressed: bool
    verdict: str
    identity: ModelInfo | None = None
    baseline_identity: ModelInfo | None = None
    identity_change: str | None = None
    identity_unknown: list[str] = Field(default_factory=list)


class BaselineComparison(BaseModel):
    """`--llm-baseline`: where the baseline came from and each shared model's change.

    `source` is empty when `last` found no earlier complete run with the same models and
    dataset fingerprint, or when the history could not be read (`problem`)."""

    ref: str
    source: str = ""
    run_id: int | None = None
    models: list[BaselineChange] = Field(default_factory=list)
    # Models of this run the baseline did not run: nothing to compare them with.
    unmatched: list[str] = Field(default_factory=list)
    gate: bool = False
    # Why there is no baseline although one may exist: the history or report could not be
    # read. Never the same as "no earlier run".
    problem: str | None = None
    # `last`: the newer runs it passed over, each with why (partial, another dataset).
    passed_over: list[str] = Field(default_factory=list)
    # --llm-allow-model-change: a model whose identity changed is compared all the same.
    model_change_allowed: bool = False

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regressed(self) -> bool:
        return any(m.regressed for m in self.models)


class EvalReport(BaseModel):
    """The run record (`report.json`): every kind's results and summaries, and the errors."""

    # What `report/figures.py` counted of the results along the summaries' pass, for every
    # output of the run to read rather than decode every result again; not written.
    _tally: Any = PrivateAttr(default=None)
    schema_version: int = SCHEMA_VERSION
    # `PARTIAL: 4 of 40 items ran (interrupted)` when not every collected item ran: first,
    # so that no reader takes the figures below for the whole dataset's.
    partial: str | None = None
    metadata: RunMetadata
    summary: EvalSummary = Field(default_factory=EvalSummary)
    by_model: dict[str, EvalSummary] = Field(default_factory=dict)
    results: Sequence[TaskResult] = Field(default_factory=list)
    # Scripting-tool tasks: model -> tool mode -> its items' numbers; the paired scripted
    # against baseline comparison of each model is in `comparisons` (subject `tool_mode`).
    tool_modes: dict[str, dict[str, ToolModeSummary]] = Field(default_factory=dict)
    errors: list[ErrorRecord] = Field(default_factory=list)
    scenarios: Sequence[ScenarioResult] = Field(default_factory=list)
    scenario_summary: dict[str, ScenarioSummary] = Field(default_factory=dict)
    # With --llm-trials above 1: kind name -> model -> statistics of the repeated attempts.
    trials: dict[str, dict[str, TrialSummary]] = Field(default_factory=dict)
    # With --llm-trials above 1: one verdict per task, model and kind against the stated
    # per-task rule (`task_rule`, e.g. "8/10"); see `TaskVerdict`.
    task_rule: str | None = None
    task_verdicts: list[TaskVerdict] = Field(default_factory=list)
    # With --llm-early-stop: the trials not run and what that saved.
    early_stop: EarlyStopSummary | None = None
    # With --llm-judge-when: "always" or "undecided", and the judge calls not made.
    judge_when: str = "always"
    judge_calls_saved: int = 0
    # With two or more models, or guidance documents: paired comparisons (`stats/compare.py`).
    comparisons: list[Comparison] = Field(default_factory=list)
    # With two or more models: kind name -> cross-model diagnostics.
    diagnostics: dict[str, Diagnostics] = Field(default_factory=dict)
    optimization_results: Sequence[OptimizationResult] = Field(default_factory=list)
    # FC-Eval's run-level summary of the optimization tasks, by `agent:model`.
    optimization: OptimizationRunSummary | None = None
    harbor_results: Sequence[HarborResult] = Field(default_factory=list)
    # Harbor tasks: per model (`model-variant` under a variant), passes, every reward key,
    # failures by reason, errors, tokens, cost and phase times (`kinds/harbor/summary.py`).
    harbor: dict[str, HarborSummary] = Field(default_factory=dict)
    # With --llm-harbor-variants: model -> variant -> ot-harness's aggregates; each variant
    # against the base is in `comparisons` (subject `variant`).
    harbor_variants: dict[str, dict[str, HarborVariantSummary]] = Field(default_factory=dict)
    # Sections of kinds added by other plugins, by kind name.
    extensions: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # With --llm-max-cost: the limit and the whole run's spend.
    budget: BudgetSummary | None = None
    # Items the cost limit stopped, with what they did before it (not scored).
    stopped: list[StoppedTask] = Field(default_factory=list)
    # With --llm-baseline: this run against the baseline, per model.
    baseline: BaselineComparison | None = None
    # With --llm-fail-on-regression or --llm-fail-under: the gate's decision in one sentence
    # (what was decided, and with what power), as every output's headline says it.
    gate: str | None = None
    # What the models were given (system prompt, tools, parameters), each distinct one once,
    # by the key each trace's `setup` names.
    setups: dict[str, ModelSetup] = Field(default_factory=dict)


# Shipped with the package so that readers of `report.json` can validate it without this code.
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")


def report_schema() -> str:
    """`report.json`'s JSON Schema as written (computed fields included), as shipped.

    Regenerate the shipped file after changing a model: `python -m pytest_llmtool.records`.
    """
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **EvalReport.model_json_schema(mode="serialization"),
    }
    return json.dumps(schema, indent=2) + "\n"


if __name__ == "__main__":  # kept last: every model must be defined before the schema is made
    SCHEMA_PATH.write_text(report_schema(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
