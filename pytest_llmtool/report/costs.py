"""Each model's cost, and what is said when it cannot be known.

A call with no price (a model missing from the price table and `llm_prices`) has no cost, and
a sum that left it out would pass for the model's whole cost: a model any of whose calls (its
own or its judges') had no price has an unknown cost, and a note says why. Offline agents
(`oracle`, `nop`) call no provider and cost nothing. Every output that shows a model's cost
asks here; what it reads was counted once per report (`report/figures.py`).
"""

from __future__ import annotations

from pytest_llmtool.agents.pricing import NO_PRICE
from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.figures import tally

UNKNOWN = "unknown"


def _unpriced(report: EvalReport) -> dict[str, set[bool]]:
    """Per model, whose calls had no price: its own (True), its judges' (False); an offline
    agent's own calls have none and cost nothing."""
    offline = {m.name for m in report.metadata.models if m.provider == "offline"}
    found = {}
    for model, whose in tally(report).unpriced.items():
        whose = whose - {True} if model in offline else whose
        if whose:
            found[model] = whose
    return found


def model_costs(report: EvalReport) -> dict[str, float | None]:
    """Each model's cost over every kind, its judges' calls included; None when any of those
    calls had no price. A model of the run that made no call costs 0."""
    counted = tally(report)
    unknown = {*_unpriced(report), *counted.unreported}
    costs: dict[str, float | None] = {m.name: 0.0 for m in report.metadata.models}
    for model in {*costs, *counted.by_model, *counted.cost, *unknown}:
        costs[model] = None if model in unknown else counted.cost.get(model, 0.0)
    return costs


def _target(name: str, resolved: str) -> str:
    """A model as the user named it, with what that resolved to when they differ."""
    return resolved if name == resolved else f"{name} ({resolved})"


def cost_notes(report: EvalReport) -> list[str]:
    """One sentence per model whose cost is unknown, saying why and what to do."""
    targets = {
        m.name: _target(m.name, f"{m.provider}:{m.model_id}") for m in report.metadata.models
    }
    notes = []
    unpriced = _unpriced(report)
    named = [m.name for m in report.metadata.models]
    for model in [*(m for m in named if m in unpriced), *sorted(set(unpriced) - set(named))]:
        whose = unpriced[model]
        target = targets.get(model, model)
        if True in whose:
            notes.append(f"cost unknown for {target}: {NO_PRICE}")
        else:
            notes.append(f"cost unknown for {target}: its judge's calls have {NO_PRICE}")
    for model, calls in tally(report).unreported.items():
        target = targets.get(model, model)
        notes.append(f"cost unknown for {target}: {calls} of its calls came with no usage")
    return notes


def cost_cell(cost: float | None, calls: bool = True) -> str:
    """A cost cell: `$0.0123`, or `unknown` for calls that had no price (no calls: `$0`)."""
    if cost is None:
        return UNKNOWN if calls else "$0"
    return f"${cost:.4f}"
