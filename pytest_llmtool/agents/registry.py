"""Model names: offline agents, aliases and explicit `provider:model-id` names.

`--llm-model` takes `oracle`, `nop`, an alias (`haiku`, `gpt-5.2`, …; `llm_model_aliases` in
the ini file adds more) or `anthropic:<id>`, `openai:<id>`, `openai-responses:<id>`.
Real models share one SDK client per provider per process, created lazily on the event loop
that all agent runs use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_llmtool.agents.base import (
    REQUIRED_MAX_TOKENS,
    Agent,
    AgentError,
    ModelSpec,
    UnknownModel,
    Work,
)
from pytest_llmtool.agents.offline import NopModel, OracleModel
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.agents.ratelimit import Limiter, identity, shown_url
from pytest_llmtool.agents.replay import CallStore, RecordingAgent, ReplayAgent
from pytest_llmtool.agents.retry import RetryPolicy
from pytest_llmtool.records import ModelParams

if TYPE_CHECKING:
    import anthropic
    import openai

OFFLINE = ("oracle", "nop")
PROVIDERS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
}
DEFAULT_ALIASES = {
    "haiku": "anthropic:claude-haiku-4-5",
    "sonnet": "anthropic:claude-sonnet-4-6",
    "opus": "anthropic:claude-opus-4-8",
    "gpt-5": "openai:gpt-5",
    "gpt-5-mini": "openai:gpt-5-mini",
    "gpt-5.2": "openai:gpt-5.2",
    "gpt-4.1": "openai:gpt-4.1",
    "gpt-4o-mini": "openai:gpt-4o-mini",
    "gpt-5.3-codex": "openai-responses:gpt-5.3-codex",
}
# Connect fast; the read timeout is `--llm-call-timeout` (bashkit-eval's harness uses 300 s).
CONNECT_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class ModelRef:
    """A resolved name: `provider` is "offline" for oracle and nop."""

    name: str
    provider: str
    model_id: str

    @property
    def key_env(self) -> str | None:
        return PROVIDERS.get(self.provider)


def parse_aliases(lines: list[str]) -> dict[str, str]:
    aliases = dict(DEFAULT_ALIASES)
    for line in lines:
        alias, sep, target = (part.strip() for part in line.partition("="))
        provider = target.partition(":")[0]
        if not sep or not alias or provider not in PROVIDERS or ":" not in target:
            raise ValueError(
                f"llm_model_aliases: expected 'alias = provider:model-id' with provider one of "
                f"{', '.join(PROVIDERS)}, got {line!r}"
            )
        aliases[alias] = target
    return aliases


def resolve(name: str, aliases: dict[str, str]) -> ModelRef:
    if name in OFFLINE:
        return ModelRef(name, "offline", name)
    target = aliases.get(name, name)
    provider, sep, model_id = target.partition(":")
    if sep and provider in PROVIDERS and model_id:
        return ModelRef(name, provider, model_id)
    known = [*OFFLINE, *aliases, *(f"{p}:<model-id>" for p in PROVIDERS)]
    raise UnknownModel(name, tuple(known))


@dataclass
class ClientPool:
    """One SDK client per provider family, shared by every task in this process.

    The SDKs are imported on first use: they take over a second to import, which an offline
    run (or any pytest run in an environment where the plugin is installed) should not pay.
    """

    base_urls: dict[str, str]
    call_timeout: float = 300.0
    # Adaptive concurrency: one limiter per provider (base URL and key), at most `concurrency`
    # calls in flight each; with `adaptive` off, calls are bounded by `--llm-concurrency` only.
    concurrency: int = 8
    adaptive: bool = True
    _clients: dict[str, Any] = field(default_factory=dict)
    _limiters: dict[str, Limiter] = field(default_factory=dict)

    def limiter(self, family: str) -> Limiter | None:
        """The limiter of the provider the `family` client talks to (created with the client)."""
        if not self.adaptive:
            return None
        client = self.anthropic() if family == "anthropic" else self.openai()
        base_url = str(client.base_url)
        key = identity(family, base_url, client.api_key)
        if key not in self._limiters:
            self._limiters[key] = Limiter(f"{family} {shown_url(base_url)}", self.concurrency)
        return self._limiters[key]

    @property
    def limiters(self) -> list[Limiter]:
        return list(self._limiters.values())

    def anthropic(self) -> anthropic.AsyncAnthropic:
        if "anthropic" not in self._clients:
            import anthropic

            self._clients["anthropic"] = anthropic.AsyncAnthropic(
                api_key=os.environ.get("ANTHROPIC_API_KEY"),
                base_url=self.base_urls.get("anthropic"),
                max_retries=0,
                timeout=anthropic.Timeout(self.call_timeout, connect=CONNECT_TIMEOUT_SECONDS),
            )
        client: anthropic.AsyncAnthropic = self._clients["anthropic"]
        return client

    def openai(self) -> openai.AsyncOpenAI:
        if "openai" not in self._clients:
            import openai

            self._clients["openai"] = openai.AsyncOpenAI(
                api_key=os.environ.get("OPENAI_API_KEY"),
                base_url=self.base_urls.get("openai"),
                max_retries=0,
                timeout=openai.Timeout(self.call_timeout, connect=CONNECT_TIMEOUT_SECONDS),
            )
        client: openai.AsyncOpenAI = self._clients["openai"]
        return client

    @property
    def opened(self) -> bool:
        return bool(self._clients)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


@dataclass(frozen=True)
class ProviderModel:
    """A real model, or its recording when replaying."""

    ref: ModelRef
    price: Price | None
    pool: ClientPool
    policy: RetryPolicy
    prompt_cache: bool
    record: CallStore | None = None
    replay: CallStore | None = None
    params: ModelParams = field(default_factory=ModelParams)

    @property
    def name(self) -> str:
        return self.ref.name

    def skip_reason(self, task: Work) -> str | None:
        return None

    def _live(self) -> Agent:
        model_id = self.ref.model_id
        if self.ref.provider == "anthropic":
            from pytest_llmtool.agents.anthropic_messages import AnthropicAgent

            return AnthropicAgent(
                self.pool.anthropic(),
                model_id,
                self.policy,
                self.prompt_cache,
                self.pool.limiter("anthropic"),
                self.params,
            )
        limiter = self.pool.limiter("openai")
        if self.ref.provider == "openai":
            from pytest_llmtool.agents.openai_chat import OpenAIChatAgent

            return OpenAIChatAgent(self.pool.openai(), model_id, self.policy, limiter, self.params)
        from pytest_llmtool.agents.openai_responses import OpenAIResponsesAgent

        return OpenAIResponsesAgent(self.pool.openai(), model_id, self.policy, limiter, self.params)

    def create(self, task: Work, trial: int = 0) -> Agent:
        target = f"{self.ref.provider}:{self.ref.model_id}"
        if self.replay is not None:
            return ReplayAgent(self.replay, target, task.id, trial)
        agent = self._live()
        if self.record is not None:
            return RecordingAgent(agent, self.record, target, task.id, trial)
        return agent


@dataclass(frozen=True)
class ExternalModel:
    """A model name handed to an external agent (`--llm-agent-cmd`), which runs it itself."""

    name: str
    price: Price | None = None

    def skip_reason(self, task: Work) -> str | None:
        return "an external agent (--llm-agent-cmd) runs scenarios, not bashkit tasks"

    def create(self, task: Work, trial: int = 0) -> Agent:
        raise AgentError("an external agent is launched as a command, not called in-process")


def build_model(
    ref: ModelRef,
    *,
    price: Price | None,
    pool: ClientPool,
    policy: RetryPolicy,
    prompt_cache: bool,
    record: CallStore | None,
    replay: CallStore | None,
    params: ModelParams | None = None,
) -> ModelSpec:
    if ref.provider == "offline":
        return OracleModel() if ref.name == "oracle" else NopModel()
    if ref.provider == "external":
        return ExternalModel(ref.name)
    given = params or ModelParams()
    cap = given.max_tokens or REQUIRED_MAX_TOKENS.get(ref.provider)
    capped = replace(price, max_output=cap) if price is not None and cap else price
    return ProviderModel(ref, capped, pool, policy, prompt_cache, record, replay, given)


def cost_bound_problem(model: ModelSpec) -> str | None:
    """Why `--llm-max-cost` cannot bound the calls of `model` (a limit the run could not
    enforce), or None. Offline agents cost nothing; an external agent makes its own calls."""
    if not isinstance(model, ProviderModel):
        return None
    target = f"{model.ref.provider}:{model.ref.model_id}"
    if model.price is None:
        return f"--llm-max-cost cannot bound {target}: no price (set llm_prices)"
    if model.price.max_output is None:
        return (
            f"--llm-max-cost cannot bound {target}: nothing caps its output tokens "
            "(set --llm-max-tokens)"
        )
    return None
