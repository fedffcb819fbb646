"""Claude Code (`@anthropic-ai/claude-code`): `claude -p PROMPT --output-format stream-json`.

Its stream: a `system` line (`init`), then one `assistant` line per content block (several
lines share one message id: one model call), `user` lines with the tool results, and a last
`result` line with `num_turns`, `total_cost_usd` and the run's usage. Its per-message usage is
not reliable (`output_tokens: 1`, taken before the reply ended): the model calls' tokens come
from the endpoint (`runner.py`), the totals from `result`.

TODO(part A2): a first draft by the lead; part A2 owns and completes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_llmtool.agents.installed.base import (
    Endpoint,
    InstalledAgent,
    Invocation,
    McpServer,
    Reading,
)
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    Message,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

SHELL_TOOL = "Bash"


class ClaudeCode(InstalledAgent):
    name = "claude-code"
    binary = "claude"
    package = "@anthropic-ai/claude-code"
    protocols = ("anthropic",)

    def invocation(
        self,
        *,
        executable: str,
        prompt: str,
        endpoint: Endpoint,
        home: Path,
        workdir: Path,
        mcp: McpServer | None,
    ) -> Invocation:
        argv = [
            executable,
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--model",
            endpoint.model,
        ]
        env = {
            "ANTHROPIC_BASE_URL": endpoint.base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "IS_SANDBOX": "1",
        }
        return Invocation(argv, env)

    def read(self, stdout: str, stderr: str) -> Reading:
        messages: list[Message] = []
        calls: list[ToolCallResult] = []
        uses: dict[str, ToolUseBlock] = {}
        problems: list[str] = []
        final: dict[str, Any] | None = None
        last_id = None
        for number, line in enumerate(stdout.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                problems.append(f"stream line {number}: not JSON")
                continue
            kind = event.get("type")
            if kind == "assistant":
                message = event.get("message", {})
                blocks: list[ContentBlock] = [
                    ToolUseBlock(id=b["id"], name=b["name"], input=b.get("input", {}))
                    if b.get("type") == "tool_use"
                    else TextBlock(text=b.get("text", ""))
                    for b in message.get("content", [])
                    if b.get("type") in ("tool_use", "text")
                ]
                for block in blocks:
                    if isinstance(block, ToolUseBlock):
                        uses[block.id] = block
                if message.get("id") == last_id and messages:
                    messages[-1].content.extend(blocks)
                else:
                    messages.append(Message(role="assistant", content=blocks))
                last_id = message.get("id")
            elif kind == "user":
                results = [
                    b
                    for b in event.get("message", {}).get("content", [])
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
                replies: list[ContentBlock] = []
                for b in results:
                    content = b.get("content")
                    text = (
                        content
                        if isinstance(content, str)
                        else "\n".join(p.get("text", "") for p in content or [])
                    )
                    failed = bool(b.get("is_error"))
                    replies.append(
                        ToolResultBlock(tool_use_id=b["tool_use_id"], content=text, is_error=failed)
                    )
                    use = uses.get(b["tool_use_id"])
                    shown = (
                        str(use.input.get("command", ""))
                        if use is not None and use.name == SHELL_TOOL
                        else f"{use.name if use else '?'} {json.dumps(use.input if use else {})}"
                    )
                    calls.append(
                        ToolCallResult(
                            commands=shown, stdout=text, stderr="", exit_code=int(failed)
                        )
                    )
                if replies:
                    messages.append(Message(role="user", content=replies))
                last_id = None
            elif kind == "result":
                final = event
        turns = sum(1 for m in messages if m.role == "assistant")
        trace = AgentTrace(
            messages=messages,
            tool_calls=calls,
            turns=turns,
            natural_stop=final is not None and final.get("subtype") == "success",
            stop="end_turn" if final is not None and final.get("subtype") == "success" else None,
        )
        error = None
        if final is None:
            error = f"no result line in its stream (stderr: {stderr.strip()[-500:]!r})"
        elif final.get("is_error"):
            error = str(final.get("result", "error"))
        return Reading(
            trace=trace,
            final_text=str(final.get("result", "")) if final else "",
            cost_usd=final.get("total_cost_usd") if final else None,
            error=error,
            problems=problems,
        )


AGENT = ClaudeCode()
