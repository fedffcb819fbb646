"""What the agent did, in a few lines under a failed item: its last tool calls (command,
exit code, the ends of stdout and stderr) and its final words, as assertion introspection
shows the values a failed assert compared.

Three sizes, by pytest's verbosity: the last 3 calls with the ends of their output by
default, the last 10 with more of it at `-v`, everything at `-vv`.

An agent CLI's run (`--llm-agent`) opens with one line, which the HTML report and the Inspect
logs show too (`agent_line`): which agent ran, where its network could go, which cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_llmtool.records import AgentInfo, AgentTrace
from pytest_llmtool.report.costs import cost_cell


@dataclass(frozen=True)
class _Size:
    calls: int | None  # the last this many calls; None: all
    command_lines: int | None
    output_lines: int | None
    final_lines: int | None


_SIZES = (_Size(3, 3, 5, 5), _Size(10, 10, 20, 20), _Size(None, None, None, None))


def _ends(text: str, keep: int | None, head: bool = False) -> list[str]:
    lines = text.rstrip("\n").splitlines()
    if keep is None or len(lines) <= keep:
        return lines
    cut = len(lines) - keep
    if head:
        return [*lines[:keep], f"... ({cut} more lines)"]
    return [f"... ({cut} lines before)", *lines[-keep:]]


# What an agent CLI's sandbox let it reach (`AgentInfo.network`), as every output says it.
NETWORK = {
    "endpoint": "the model endpoint only (enforced)",
    "host": "the host's network (nothing enforced)",
    "none": "none",
}


def final_words(trace: AgentTrace) -> str:
    """The text of the model's last answer; an agent CLI's own final text when its stream
    held no reply ('' when it said nothing)."""
    text = next((m.text() for m in reversed(trace.messages) if m.role == "assistant"), "")
    if not text and trace.agent is not None:
        return trace.agent.final_text
    return text


def who_ran(agent: AgentInfo) -> str:
    """`claude-code 2.1.332, exit 0`: which agent ran, as it named itself."""
    version = agent.version or "version unknown"
    exited = "" if agent.exit_code is None else f", exit {agent.exit_code}"
    return f"{agent.name} {version}{exited}"


def cost_said(trace: AgentTrace) -> str:
    """Which cost the record holds: the agent's own figure (with the price table's beside it
    where the calls had prices), its tokens at the price table's prices, or unknown."""
    agent = trace.agent
    priced = [c.cost_usd for c in trace.llm_calls]
    table = sum(c for c in priced if c is not None) if priced and None not in priced else None
    if agent is not None and agent.cost_source == "agent":
        beside = "" if table is None else f" (at the price table's prices: {cost_cell(table)})"
        return f"{cost_cell(trace.cost_usd)}, the agent's own figure{beside}"
    if table is not None:
        return f"{cost_cell(table)}, its tokens at the price table's prices"
    return "unknown (no figure from the agent, and not every call has a price)"


def agent_line(trace: AgentTrace) -> str:
    """One line on the agent CLI (or external command) that ran the item: its name and
    version, where its network could go, which cost; '' for the built-in loop."""
    agent = trace.agent
    if agent is None:
        return ""
    parts = [f"Agent: {who_ran(agent)}"]
    if agent.network is not None:
        parts.append(f"network: {NETWORK[agent.network]}")
    parts.append(f"cost: {cost_said(trace)}")
    return "; ".join(parts)


def trace_lines(trace: AgentTrace | None, verbosity: int, noun: str = "tool calls") -> list[str]:
    """The end of what the agent did, sized by `verbosity` (pytest's `-v` count)."""
    if trace is None:
        return []
    size = _SIZES[min(max(verbosity, 0), 2)]
    calls = trace.tool_calls
    lines = [said] if (said := agent_line(trace)) else []
    if not calls:
        lines.append(f"The agent made no {noun}.")
    else:
        shown = calls if size.calls is None else calls[-size.calls :]
        skipped = len(calls) - len(shown)
        head = f"Last {len(shown)} of {len(calls)} {noun}" if skipped else f"{noun.capitalize()}"
        lines.append(f"{head} (more with -v, all with -vv):" if skipped else f"{head}:")
        for number, call in enumerate(shown, start=skipped + 1):
            command = _ends(call.commands, size.command_lines, head=True)
            lines.append(f"  [{number}] $ {command[0] if command else ''}")
            lines += [f"        {line}" for line in command[1:]]
            lines.append(f"      exit {call.exit_code}")
            for name, text in (("stdout", call.stdout), ("stderr", call.stderr)):
                if text.strip():
                    lines.append(f"      {name}:")
                    lines += [f"        {line}" for line in _ends(text, size.output_lines)]
    words = final_words(trace).strip()
    if words:
        lines.append("Final words:")
        lines += [f"  {line}" for line in _ends(words, size.final_lines)]
    return lines
