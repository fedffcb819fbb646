"""Agents that need no network: `oracle` replays a task's solution, `nop` does nothing.

They are stateless: the next step is derived from the conversation, so a run can be
replayed or resumed from any message list.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_llmtool.agents.base import Agent, ChatRequest, ChatResponse, SolutionStep, Work
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import Message, TextBlock, ToolUseBlock


@dataclass(frozen=True)
class OracleAgent:
    """Sends one solution step per turn as a tool call, then stops: a string as the `commands`
    of the first tool (`bash`), a `ToolStep` as a call of the tool it names."""

    solution: tuple[SolutionStep, ...]

    async def chat(self, request: ChatRequest) -> ChatResponse:
        step = sum(1 for m in request.messages if m.role == "assistant")
        if step >= len(self.solution):
            done = Message(role="assistant", content=[TextBlock(text="Done.")])
            return ChatResponse(message=done, stop=True)
        given = self.solution[step]
        if not request.tools:  # generate mode: the one script, as a model would write it
            script = "\n".join(s for s in self.solution if isinstance(s, str))
            reply = Message(role="assistant", content=[TextBlock(text=f"```bash\n{script}\n```")])
            return ChatResponse(message=reply, stop=True)
        if isinstance(given, str):
            name, arguments = request.tools[0].name, {"commands": given}
        else:
            name, arguments = given.tool, dict(given.input)
        call = ToolUseBlock(id=f"oracle_{step}", name=name, input=arguments)
        return ChatResponse(message=Message(role="assistant", content=[call]), stop=False)


class NopAgent:
    """Answers without calling any tool: the floor every task's checks must fail."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        reply = Message(role="assistant", content=[TextBlock(text="I will not run anything.")])
        return ChatResponse(message=reply, stop=True)


@dataclass(frozen=True)
class OracleModel:
    name: str = "oracle"
    price: Price | None = None

    def skip_reason(self, task: Work) -> str | None:
        if not task.solution:
            return "no `solution`: the oracle agent replays the reference solution"
        return None

    def create(self, task: Work, trial: int = 0) -> Agent:
        return OracleAgent(tuple(task.solution or ()))


@dataclass(frozen=True)
class NopModel:
    name: str = "nop"
    price: Price | None = None

    def skip_reason(self, task: Work) -> str | None:
        return None

    def create(self, task: Work, trial: int = 0) -> Agent:
        return NopAgent()
