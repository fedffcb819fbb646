"""opencode (`opencode-ai`): `opencode run --format json --pure --auto PROMPT`.

Its configuration is `~/.config/opencode/opencode.json` under the fresh HOME: one provider
whose base URL is the endpoint (its Anthropic provider, an OpenAI-compatible one for Chat
Completions, its OpenAI provider for Responses), no sharing, no auto-update. What else calls
home is switched off by environment (checked against 1.18.33 by tracing its connections):
the models.dev list (`OPENCODE_DISABLE_MODELS_FETCH`), the install of `@opencode-ai/plugin`
into every config directory that it starts on each run (npm's own `offline`), LSP downloads,
and the title a second model call would make (`--title`).
`opencode run` has no limit on its model calls: `max_turns` is not passed on.

Its stream, one JSON object a line: `step_start`; `text`; `tool_use` (the tool, its call id,
and its `state`: status, input, output, and for `bash` the exit status in `metadata.exit`);
`step_finish` (one model call: its tokens, the prompt's without the cache's, and its cost);
`error` (the provider's error: a bad key, an outage).
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
    json_events,
)
from pytest_llmtool.agents.installed.runner import refuse_mcp
from pytest_llmtool.records import (
    AgentTrace,
    ContentBlock,
    LLMCallMetrics,
    Message,
    StopKind,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolUseBlock,
)

SHELL_TOOL = "bash"
TITLE = "llmtool"
CONFIG = ".config/opencode/opencode.json"
# The provider each endpoint protocol is reached through: its id in the config, the AI SDK
# package opencode drives it with (None: its built-in one), and the path under the base URL.
PROVIDERS = {
    "anthropic": ("anthropic", None, "/v1"),
    "openai-chat": ("llmtool", "@ai-sdk/openai-compatible", ""),
    "openai-responses": ("openai", None, ""),
}
# A step's `reason` (the AI SDK's finish reason) in the words of `StopKind`.
STOPS: dict[str, StopKind] = {
    "stop": "end_turn",
    "tool-calls": "tool_use",
    "length": "max_tokens",
    "content-filter": "content_filter",
}
# Switches that keep it from calling anything but the endpoint.
OFFLINE = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "npm_config_offline": "true",
}


class Opencode(InstalledAgent):
    name = "opencode"
    binary = "opencode"
    package = "opencode-ai"
    protocols = ("anthropic", "openai-chat", "openai-responses")
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
        provider, package, path = PROVIDERS[endpoint.protocol]
        model = f"{provider}/{endpoint.model}"
        options: dict[str, Any] = {
            "baseURL": endpoint.base_url.rstrip("/") + path,
            "apiKey": endpoint.api_key,
        }
        if endpoint.headers:
            options["headers"] = dict(endpoint.headers)
        entry: dict[str, Any] = {"options": options, "models": {endpoint.model: {}}}
        if package is not None:
            entry = {"npm": package, "name": provider, **entry}
        config: dict[str, Any] = {
            "share": "disabled",
            "autoupdate": False,
            "provider": {provider: entry},
            "model": model,
            "small_model": model,
        }
        argv = [executable, "run", "--format", "json", "--pure", "--auto", "--title", TITLE]
        argv += ["-m", model, "--", prompt]
        xdg = {
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_STATE_HOME": str(home / ".local/state"),
            "XDG_CACHE_HOME": str(home / ".cache"),
        }
        return Invocation(argv, {**OFFLINE, **xdg}, {CONFIG: json.dumps(config, indent=2)})

    def read(self, stdout: str, stderr: str) -> Reading:
        return _Stream().read(stdout, stderr)


class _Stream:
    """One reading of a stream: the messages and calls as its events come."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.calls: list[ToolCallResult] = []
        self.metrics: list[LLMCallMetrics] = []
        self.problems: list[str] = []
        self.costs: list[float] = []
        self.step: list[ContentBlock] = []
        self.results: list[ContentBlock] = []
        self.started: float | None = None
        self.first_tool: float | None = None
        self.text = ""
        self.reason: str | None = None
        self.error: str | None = None

    def read(self, stdout: str, stderr: str) -> Reading:
        for number, event in json_events(stdout, self.problems):
            self._event(number, event)
        self._close_step()
        return self._reading(stderr)

    def _event(self, number: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        part = _object(event.get("part"))
        if kind == "step_start":
            self._close_step()
            self.started = _number(event.get("timestamp"))
        elif kind == "text":
            text = str(part.get("text", ""))
            self.step.append(TextBlock(text=text))
            self.text = text
        elif kind == "tool_use":
            self._tool(number, part)
        elif kind == "step_finish":
            self._finish(event, part)
        elif kind == "error":
            error = _object(event.get("error"))
            data = _object(error.get("data"))
            self.error = str(data.get("message") or error.get("name") or "error")

    def _tool(self, number: int, part: dict[str, Any]) -> None:
        state = _object(part.get("state"))
        tool = str(part.get("tool", "?"))
        call_id = str(part.get("callID", f"call_{number}"))
        arguments = _object(state.get("input"))
        failed = state.get("status") == "error"
        metadata = _object(state.get("metadata"))
        # What the command printed as opencode keeps it (`metadata.output`; "(no output)"
        # for none, as the model was told).
        shown = metadata.get("output") if tool == SHELL_TOOL else None
        if not isinstance(shown, str):
            shown = state.get("error", "") if failed else state.get("output", "")
        output = str(shown)
        status = metadata.get("exit")
        if tool != SHELL_TOOL:
            exit_code = int(failed)
        elif isinstance(status, int):
            exit_code = status
        else:
            if not failed:
                self.problems.append(f"stream line {number}: bash call without an exit status")
            exit_code = 1
        start = _number(_object(state.get("time")).get("start"))
        if start is not None and self.first_tool is None:
            self.first_tool = start
        self.step.append(ToolUseBlock(id=call_id, name=tool, input=arguments))
        self.results.append(ToolResultBlock(tool_use_id=call_id, content=output, is_error=failed))
        command = (
            str(arguments.get("command", ""))
            if tool == SHELL_TOOL
            else f"{tool} {json.dumps(arguments)}"
        )
        self.calls.append(
            ToolCallResult(commands=command, stdout=output, stderr="", exit_code=exit_code)
        )

    def _finish(self, event: dict[str, Any], part: dict[str, Any]) -> None:
        tokens = _object(part.get("tokens"))
        cache = _object(tokens.get("cache"))
        read, written = _count(cache.get("read")), _count(cache.get("write"))
        # opencode's `input` leaves the cache out; ours is the whole prompt.
        prompt = _count(tokens.get("input")) + read + written
        reasoning = _count(tokens.get("reasoning"))
        reason = str(part.get("reason") or "") or None
        ended = _number(event.get("timestamp"))
        answered = self.first_tool if self.first_tool is not None else ended
        latency = answered - self.started if answered and self.started else 0.0
        cost = part.get("cost")
        if isinstance(cost, int | float):
            self.costs.append(float(cost))
        self.metrics.append(
            LLMCallMetrics(
                call_number=len(self.metrics) + 1,
                input_tokens=prompt,
                output_tokens=_count(tokens.get("output")) + reasoning,
                latency_ms=max(0.0, latency),
                cumulative_input=sum(m.input_tokens for m in self.metrics) + prompt,
                tool_calls_made=sum(isinstance(b, ToolUseBlock) for b in self.step),
                cache_read_tokens=read,
                cache_write_tokens=written,
                stop_reason=reason,
                stop=STOPS.get(reason or "", "other"),
                reasoning_tokens=reasoning,
            )
        )
        self.reason = reason
        self._close_step()

    def _close_step(self) -> None:
        """The step's reply and its tool results, as two messages."""
        if self.step:
            self.messages.append(Message(role="assistant", content=self.step))
        if self.results:
            self.messages.append(Message(role="user", content=self.results))
        self.step, self.results = [], []
        self.started = self.first_tool = None

    def _reading(self, stderr: str) -> Reading:
        ended = self.error is None and self.reason == "stop"
        trace = AgentTrace(
            messages=self.messages,
            tool_calls=self.calls,
            turns=len(self.metrics),
            natural_stop=ended,
            total_input_tokens=sum(m.input_tokens for m in self.metrics),
            total_output_tokens=sum(m.output_tokens for m in self.metrics),
            llm_calls=self.metrics,
            stop=STOPS.get(self.reason or "", "other") if self.metrics else None,
        )
        error = self.error
        if error is None and not self.metrics:
            error = f"no step in its stream (stderr: {stderr.strip()[-500:]!r})"
        # opencode prices a model it does not know at 0: no figure, not a free run.
        cost = sum(self.costs) if any(c > 0 for c in self.costs) else None
        return Reading(
            trace=trace, final_text=self.text, cost_usd=cost, error=error, problems=self.problems
        )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


AGENT = Opencode()
