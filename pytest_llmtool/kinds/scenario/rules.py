"""The two rule sets that score a scenario, in one place.

`ax-eval` (the default): ax-eval's current rules. An action is a CLI target's subcommand or an
MCP target's (server, tool); the first-try success rate is the actions whose first call
succeeded over the distinct actions; the composite weighs the judge (.55) and the first-try
rate (.10), renormalized over the signals present, and is omitted when a guardrail failed.

`seed` (`llm_scenario_rules = seed`, or a file's `rules: seed`): seed 004's formulas as this
plugin applied them before ax-eval's. A command's identity is its whole text; the first-try
success rate is the distinct commands whose first run succeeded over all commands; the
composite weighs judge, gate pass ratio and first-try rate, each layer that did not run by
design dropping out.

Under both, the iteration ratio is unique / total, `tool_reuse_count` is total - unique, an
unknown exit status is a failure, and `interaction.target_commands` is a guardrail: broken, it
fails the item as a failed gate does. `interaction.py` finds the calls; this module only
counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_llmtool.kinds.scenario.interaction import Evidence, TargetEvent
from pytest_llmtool.kinds.scenario.load import Composite, TargetCommands
from pytest_llmtool.records import GateResult, InteractionMetrics, Rules, SubcommandMetrics

# ax-eval's composite weights of the judge and the interaction signal (first-try success).
AX_EVAL_JUDGE_WEIGHT = 0.55
AX_EVAL_INTERACTION_WEIGHT = 0.10


def interaction_metrics(evidence: Evidence, completed: bool, rules: Rules) -> InteractionMetrics:
    """Layer 1's figures from the target-tool calls, in the order they ran."""
    events = evidence.events
    total = len(events)
    by_sub: dict[str, SubcommandMetrics] = {}
    for event in events:
        if event.subcommand is not None:
            sub = by_sub.setdefault(event.subcommand, SubcommandMetrics())
            sub.total += 1
            sub.errors += event.failed
            sub.help_invocations += event.asks_help
    # Whether each distinct action (ax-eval) or command text (seed) succeeded the first time.
    first: dict[str, bool] = {}
    for event in events:
        first.setdefault(_identity(event, rules), not event.failed)
    unique = len(first)
    over = unique if rules == "ax-eval" else total
    return InteractionMetrics(
        total_commands=total,
        unique_commands=unique,
        error_count=sum(e.failed for e in events),
        tool_reuse_count=total - unique,
        help_invocations=sum(e.asks_help for e in events),
        first_try_success_rate=sum(first.values()) / over if over else 0.0,
        iteration_ratio=unique / total if total else 0.0,
        completed=completed,
        interaction_evidence_source=evidence.source,
        by_subcommand=by_sub,
    )


def _identity(event: TargetEvent, rules: Rules) -> str:
    return event.action if rules == "ax-eval" else event.text


def interaction_failure(
    evidence: Evidence, policy: TargetCommands, rules: Rules, target: str, completed: bool
) -> str | None:
    """Why the interaction evidence breaks a guardrail, or None.

    `interaction.target_commands` (both rules): `required` and no call of the target in a
    completed run (as ax-eval: a run cut short may have been stopped before it could; its
    gates decide), or `forbidden` and any call, completed or not (stricter than ax-eval: the
    use is proven either way), naming the first. Under ax-eval's rules also: transcript
    evidence from an agent that gives structured calls (an external agent whose events file
    could not be used), which ax-eval refuses rather than guess. `target` names the target.
    """
    if (
        rules == "ax-eval"
        and evidence.structured
        and evidence.source == "transcript_regex_fallback"
    ):
        why = f" ({evidence.note})" if evidence.note else ""
        return (
            "interaction evidence: the agent gives structured tool calls but they could not be "
            f"used{why}; ax-eval's rules do not score it from its transcript"
        )
    if policy == "required" and completed and not evidence.events:
        return (
            f"interaction.target_commands: required, but the agent never used the target {target}"
        )
    if policy == "forbidden" and evidence.events:
        first = evidence.events[0].text
        count = len(evidence.events)
        return (
            f"interaction.target_commands: forbidden, but the agent used the target {target} "
            f"{count} time{'s' if count != 1 else ''}, first: {first}"
        )
    return None


def seed_composite(
    weights: tuple[float, float, float],
    gates: Sequence[GateResult],
    judge_score: float | None,
    interaction: InteractionMetrics,
) -> float:
    """Seed 004's composite: the weighted sum of judge score, gate pass ratio and first-try
    success, clamped to 0..1.

    A layer that did not run by design (no gates; `judge_score` None: no judge configured or
    no judge model for the run) drops out and the remaining weights are scaled up, so a judge
    nobody asked for does not read as a score of zero. A layer that was meant to run and did
    not give a value is not absent: the caller passes it as 0 (`run.judge_layer`).
    """
    judge_w, gate_w, interaction_w = weights
    parts = [(interaction_w, interaction.first_try_success_rate)]
    if gates:
        parts.append((gate_w, sum(g.passed for g in gates) / len(gates)))
    if judge_score is not None:
        parts.append((judge_w, judge_score))
    value = _weighted(parts)
    return 0.0 if value is None else value


def ax_eval_composite(
    composite: Composite | None,
    judge_score: float | None,
    interaction: InteractionMetrics,
    guardrail_failed: bool,
) -> float | None:
    """ax-eval's composite: the judge (weight .55, or the scenario's `judge_weight`) and the
    first-try success rate (.10, or `interaction_weight`), renormalized over the signals
    present, clamped to 0..1.

    None when a guardrail failed (a gate, or the interaction evidence): a broken run has no
    quality score. The judge is absent when `judge_score` is None (see `run.judge_layer`: a
    judge asked and without a valid answer is 0, not absent); the interaction signal is
    absent when the target was never used (no action to rate). None when neither is present.
    """
    if guardrail_failed:
        return None
    judge_w = composite.judge_weight if composite else AX_EVAL_JUDGE_WEIGHT
    interaction_w = composite.interaction_weight if composite else AX_EVAL_INTERACTION_WEIGHT
    parts = []
    if judge_score is not None:
        parts.append((judge_w, judge_score))
    if interaction.unique_commands:
        parts.append((interaction_w, interaction.first_try_success_rate))
    return _weighted(parts)


def _weighted(parts: list[tuple[float, float]]) -> float | None:
    """The weighted mean of the parts, clamped to 0..1; None without any weight."""
    total = sum(w for w, _ in parts)
    if not total:
        return None
    return min(1.0, max(0.0, sum(w * v for w, v in parts) / total))
