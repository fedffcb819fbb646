"""What the agent did, in a few lines under a failed item: its last tool calls (command,
exit code, the ends of stdout and stderr) and its final words, as assertion introspection
shows the values a failed assert compared.

Three sizes, by pytest's verbosity: the last 3 calls with the ends of their output by
default, the last 10 with more of it at `-v`, everything at `-vv`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_llmtool.records import AgentTrace


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


def final_words(trace: AgentTrace) -> str:
    """The text of the model's last answer ('' when it said nothing)."""
    for message in reversed(trace.messages):
        if message.role == "assistant":
            return message.text()
    return ""


def trace_lines(trace: AgentTrace | None, verbosity: int, noun: str = "tool calls") -> list[str]:
    """The end of what the agent did, sized by `verbosity` (pytest's `-v` count)."""
    if trace is None:
        return []
    size = _SIZES[min(max(verbosity, 0), 2)]
    calls = trace.tool_calls
    if not calls:
        lines = [f"The agent made no {noun}."]
    else:
        shown = calls if size.calls is None else calls[-size.calls :]
        skipped = len(calls) - len(shown)
        head = f"Last {len(shown)} of {len(calls)} {noun}" if skipped else f"{noun.capitalize()}"
        lines = [f"{head} (more with -v, all with -vv):" if skipped else f"{head}:"]
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
