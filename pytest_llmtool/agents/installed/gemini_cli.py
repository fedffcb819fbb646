"""Gemini CLI (`@google/gemini-cli`): `gemini --output-format stream-json --yolo -m MODEL -p
PROMPT`, with `GOOGLE_GEMINI_BASE_URL` and `GEMINI_API_KEY`.

Its settings are `~/.gemini/settings.json` under the fresh HOME: the API key's auth, folder
trust off (else headless mode in an untrusted folder drops `--yolo`), telemetry, usage
statistics and auto-update off (0.61.0, traced: its only connection is to the endpoint).
`gemini -p` has no limit on its model calls: `max_turns` is not passed on.

Its stream, one JSON object a line: `init`; `message` (the prompt, then the model's text in
deltas); `tool_use` (tool name, id, parameters); `tool_result` (status and the output as
shown, NOT the exit status: a command exiting 3 is a `success`); `error`; and `result`
(status, error, and `stats`: the run's tokens, tool calls, duration). Each model call's
tokens and each shell command's exit status are in the session log it writes under HOME
(`~/.gemini/tmp/<project>/chats/session-*.jsonl`), which `completed` reads. It gives no
cost: the price table's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_llmtool.agents.installed.base import (
    Endpoint,
    InstalledAgent,
    Invocation,
    McpServer,
    Reading,
    json_events,
)
from pytest_llmtool.agents.installed.runner import refuse_mcp
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    Message,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

SHELL_TOOL = "run_shell_command"
SETTINGS = ".gemini/settings.json"
SESSIONS = ".gemini/tmp/*/chats/session-*.jsonl"
# What the shell tool puts after a command's output in its answer to the model.
_TRAILER = re.compile(
    r"(?:Error|Exit Code|Signal|Background PIDs|Process Group PGID): [^\n]*", re.ASCII
)
_EXIT = re.compile(r"Exit Code: (-?\d+)")


class GeminiCli(InstalledAgent):
    name = "gemini-cli"
    binary = "gemini"
    package = "@google/gemini-cli"
    protocols = ("gemini",)
    shell_tools = (SHELL_TOOL,)

    def invocation(
        self,
        *,
        executable: str,
        prompt: str,
        endpoint: Endpoint,
        home: Path,
        workdir: Path,
        mcp: McpServer | None,
        max_turns: int | None = None,
    ) -> Invocation:
        refuse_mcp(self, mcp)
        settings: dict[str, Any] = {
            "security": {
                "auth": {"selectedType": "gemini-api-key"},
                "folderTrust": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False, "logPrompts": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        }
        argv = [executable, "--output-format", "stream-json", "--yolo", "-m", endpoint.model]
        env = {
            "GOOGLE_GEMINI_BASE_URL": endpoint.base_url.rstrip("/"),
            "GEMINI_API_KEY": endpoint.api_key,
        }
        return Invocation([*argv, "-p", prompt], env, {SETTINGS: json.dumps(settings, indent=2)})

    def read(self, stdout: str, stderr: str) -> Reading:
        return _Stream().read(stdout, stderr)

    def completed(self, reading: Reading, home: Path) -> Reading:
        logs = sorted(home.glob(SESSIONS))
        if len(logs) != 1:
            reading.problems.append(
                f"{len(logs)} session logs under its HOME: no exit statuses, no tokens per call"
            )
            return reading
        return with_session(reading, logs[0].read_text(encoding="utf-8", errors="replace"))


class _Stream:
    """One reading of a stream: the messages and calls as its events come."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.calls: list[ToolCallResult] = []
        self.uses: dict[str, ToolUseBlock] = {}
        self.problems: list[str] = []
        self.reply: list[ContentBlock] = []
        self.results: list[ContentBlock] = []
        self.text = ""
        self.result: dict[str, Any] | None = None
        self.error: str | None = None

    def read(self, stdout: str, stderr: str) -> Reading:
        for number, event in json_events(stdout, self.problems):
            self._event(number, event)
        self._close_reply()
        return self._reading(stderr)

    def _event(self, number: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            if self.results:
                self._close_reply()
            content = str(event.get("content", ""))
            last = self.reply[-1] if self.reply else None
            if event.get("delta") and isinstance(last, TextBlock):
                last.text += content
            else:
                self.reply.append(TextBlock(text=content))
        elif kind == "tool_use":
            if self.results:
                self._close_reply()
            parameters = event.get("parameters")
            use = ToolUseBlock(
                id=str(event.get("tool_id", f"call_{number}")),
                name=str(event.get("tool_name", "?")),
                input=parameters if isinstance(parameters, dict) else {},
            )
            self.uses[use.id] = use
            self.reply.append(use)
        elif kind == "tool_result":
            self._result(number, event)
        elif kind == "error" and event.get("severity") == "error":
            self.error = str(event.get("message", "error"))
        elif kind == "result":
            self.result = event

    def _result(self, number: int, event: dict[str, Any]) -> None:
        call_id = str(event.get("tool_id", ""))
        use = self.uses.get(call_id)
        if use is None:
            self.problems.append(f"stream line {number}: a result of no call ({call_id!r})")
            return
        failed = event.get("status") == "error"
        error = _object(event.get("error"))
        output = str(event.get("output") or error.get("message") or "")
        self.results.append(ToolResultBlock(tool_use_id=call_id, content=output, is_error=failed))
        shown = (
            str(use.input.get("command", ""))
            if use.name == SHELL_TOOL
            else f"{use.name} {json.dumps(use.input)}"
        )
        # A `success` says the tool ran, not how the command ended: `with_session` reads
        # the exit status; until then a shell command's is unknown, taken as a failure.
        exit_code = 1 if failed or use.name == SHELL_TOOL else 0
        self.calls.append(
            ToolCallResult(commands=shown, stdout=output, stderr="", exit_code=exit_code)
        )

    def _close_reply(self) -> None:
        if self.reply:
            self.messages.append(Message(role="assistant", content=self.reply))
            texts = [b.text for b in self.reply if isinstance(b, TextBlock)]
            if texts:
                self.text = texts[-1]
        if self.results:
            self.messages.append(Message(role="user", content=self.results))
        self.reply, self.results = [], []

    def _reading(self, stderr: str) -> Reading:
        final = self.result or {}
        stats = _object(final.get("stats"))
        succeeded = final.get("status") == "success" and self.error is None
        trace = AgentTrace(
            messages=self.messages,
            tool_calls=self.calls,
            turns=sum(1 for m in self.messages if m.role == "assistant"),
            natural_stop=succeeded,
            total_input_tokens=_count(stats.get("input_tokens")),
            total_output_tokens=_count(stats.get("output_tokens")),
            stop="end_turn" if succeeded else None,
        )
        error = self.error
        if self.result is None:
            error = error or f"no result line in its stream (stderr: {stderr.strip()[-500:]!r})"
        elif final.get("status") != "success":
            said = _object(final.get("error"))
            error = error or str(said.get("message") or f"status {final.get('status')!r}")
        return Reading(trace=trace, final_text=self.text, error=error, problems=self.problems)


def with_session(reading: Reading, log: str) -> Reading:
    """`reading` with each shell command's exit status and each model call's tokens from
    the session log (`completed`): a command whose answer cannot be found or read keeps
    the failure it was taken for, and says so."""
    answers: dict[str, str] = {}
    replies: dict[str, dict[str, Any]] = {}
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "gemini" and isinstance(entry.get("tokens"), dict):
            replies[str(entry.get("id"))] = entry["tokens"]  # a reply is logged again as it grows
        for call in entry.get("toolCalls") or []:
            parts = call.get("result") if isinstance(call, dict) else None
            for part in parts if isinstance(parts, list) else []:
                answer = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(answer, dict) and isinstance(answer.get("response"), dict):
                    answers[str(call.get("id"))] = str(answer["response"].get("output", ""))
    trace = reading.trace
    uses = [b for m in trace.messages for b in m.content if isinstance(b, ToolUseBlock)]
    calls = list(trace.tool_calls)
    for index, (use, call) in enumerate(zip(uses, calls, strict=False)):
        if use.name != SHELL_TOOL:
            continue
        code = _exit_status(answers.get(use.id), call.stdout)
        if code is None:
            reading.problems.append(f"tool call {index + 1}: no exit status in the session log")
        else:
            calls[index] = call.model_copy(update={"exit_code": code})
    metrics = _metrics(list(replies.values()))
    update: dict[str, Any] = {"tool_calls": calls}
    if metrics:
        update |= {
            "llm_calls": metrics,
            "total_input_tokens": sum(m.input_tokens for m in metrics),
            "total_output_tokens": sum(m.output_tokens for m in metrics),
        }
    reading.trace = trace.model_copy(update=update)
    return reading


def _exit_status(answer: str | None, shown: str) -> int | None:
    """The exit status in the shell tool's answer to the model: `Output: ...` then trailer
    lines, `Exit Code: N` only when not 0. The output is the one the stream showed (or, for
    a command that printed nothing, `(empty)`, the stream showing a summary), so a line of
    it that looks like a trailer is not taken for one; None when it cannot tell."""
    if answer is None:
        return None
    body = answer.removeprefix("<untrusted_context>\n").removesuffix("\n</untrusted_context>")
    opening = next(
        (o for o in (f"Output: {shown}\n", "Output: (empty)\n") if body.startswith(o)), None
    )
    if opening is None:
        return None
    trailers = body[len(opening) :].splitlines()
    if not all(_TRAILER.fullmatch(line) for line in trailers):
        return None
    codes = [int(m.group(1)) for line in trailers if (m := _EXIT.fullmatch(line))]
    return codes[-1] if codes else 0


def _metrics(replies: list[dict[str, Any]]) -> list[LLMCallMetrics]:
    """One `LLMCallMetrics` per model reply the session logged: its prompt (cached part
    included, as Gemini counts it) and its output, thoughts included (Gemini counts them
    beside it)."""
    metrics: list[LLMCallMetrics] = []
    for tokens in replies:
        prompt, thoughts = _count(tokens.get("input")), _count(tokens.get("thoughts"))
        metrics.append(
            LLMCallMetrics(
                call_number=len(metrics) + 1,
                input_tokens=prompt,
                output_tokens=_count(tokens.get("output")) + thoughts,
                latency_ms=0.0,
                cumulative_input=sum(m.input_tokens for m in metrics) + prompt,
                tool_calls_made=0,
                cache_read_tokens=_count(tokens.get("cached")),
                reasoning_tokens=thoughts,
            )
        )
    return metrics


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


AGENT = GeminiCli()
