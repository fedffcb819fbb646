"""Model names: offline agents, the model table, aliases and `provider:model-id` names.

`--llm-model` takes `oracle`, `nop`, a model table entry's name (`agents/models.py`), an
alias (`haiku`, `gpt-5.2`, …; `llm_model_aliases` in the ini file adds more) or
`anthropic:<id>`, `openai:<id>`, `openai-responses:<id>`. Real models share SDK clients per
process: one per endpoint, key variable and headers, created lazily on the event loop that all
agent runs use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pytest_llmtool.agents.base import (
    REQUIRED_MAX_TOKENS,
    Agent,
    AgentError,
    ModelSpec,
    UnknownModel,
    Work,
)
from pytest_llmtool.agents.installed.base import Endpoint, EndpointProtocol
from pytest_llmtool.agents.models import DEFAULT_KEY_ENVS, PROTOCOLS, ModelEntry, family
from pytest_llmtool.agents.models import endpoint as endpoint_url
from pytest_llmtool.agents.offline import NopModel, OracleModel
from pytest_llmtool.agents.pricing import NO_PRICE, Price
from pytest_llmtool.agents.ratelimit import Limiter, identity, shown_url
from pytest_llmtool.agents.replay import CallStore, RecordingAgent, ReplayAgent
from pytest_llmtool.agents.retry import RetryPolicy
from pytest_llmtool.records import ModelParams

OFFLINE = ("oracle", "nop")
PROVIDERS = DEFAULT_KEY_ENVS
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
# What `resolve` looks names up in: aliases (`provider:model-id` text) and table entries.
Names = Mapping[str, "str | ModelEntry"]


@dataclass(frozen=True)
class ModelRef:
    """A resolved name: `provider` is "offline" for oracle and nop, "external" for a name an
    external agent resolves itself; `entry` the model's table entry (None: the defaults)."""

    name: str
    provider: str
    model_id: str
    entry: ModelEntry | None = None
    # The agent CLI that drives the model (`agents.installed.MODULES`); None: the built-in
    # loop, or an external agent.
    agent: str | None = None

    @property
    def setup(self) -> ModelEntry:
        """The entry, or the defaults of a name that is none."""
        return self.entry or ModelEntry(self.provider, self.model_id)

    @property
    def key_env(self) -> str | None:
        if self.provider not in PROVIDERS:
            return None
        return self.setup.key_env


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


def resolve(name: str, aliases: Names) -> ModelRef:
    """`name` as a table entry, an alias or a `provider:model-id` name."""
    if name in OFFLINE:
        return ModelRef(name, "offline", name)
    target = aliases.get(name, name)
    if isinstance(target, ModelEntry):
        return ModelRef(name, target.provider, target.model, target)
    provider, sep, model_id = target.partition(":")
    if sep and provider in PROVIDERS and model_id:
        return ModelRef(name, provider, model_id)
    known = [*OFFLINE, *aliases, *(f"{p}:<model-id>" for p in PROVIDERS)]
    raise UnknownModel(name, tuple(known))


def overridden(ref: ModelRef, params: ModelParams, base_urls: Mapping[str, str]) -> ModelRef:
    """`ref` with the command line's values over its entry (`ModelEntry.overridden`); a
    model the plugin does not call as it is."""
    if ref.provider not in PROVIDERS:
        return ref
    return replace(ref, entry=ref.setup.overridden(params, base_urls))


def _client_key(entry: ModelEntry) -> tuple[Any, ...]:
    """What makes two entries share a client: the SDK and its kind, where it sends, the key's
    variable and the headers (as written: their variables are read once per process)."""
    return (
        family(entry.provider),
        entry.client,
        entry.base_url,
        entry.key_env,
        entry.headers,
        entry.region,
        entry.project,
        entry.api_version,
    )


@dataclass
class ClientPool:
    """SDK clients shared by every task in this process: one per endpoint, key variable and
    headers, so models that share them share a client (and its connections).

    The SDKs are imported on first use: they take over a second to import, which an offline
    run (or any pytest run in an environment where the plugin is installed) should not pay.
    `base_urls` (`--llm-base-url`) is where a model goes whose entry names no base URL.
    """

    base_urls: dict[str, str]
    call_timeout: float = 300.0
    # Adaptive concurrency: one limiter per provider (base URL and key), at most `concurrency`
    # calls in flight each; with `adaptive` off, calls are bounded by `--llm-concurrency` only.
    # A model whose entry sets `concurrency` has a limiter of its own with that ceiling (a
    # fixed window when `adaptive` is off).
    concurrency: int = 8
    adaptive: bool = True
    _clients: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _limiters: dict[str, Limiter] = field(default_factory=dict)

    def _default(self, provider: str) -> ModelEntry:
        return ModelEntry(provider, "", base_url=self.base_urls.get(family(provider)))

    def limiter(self, family_: str) -> Limiter | None:
        """The limiter of the provider the `family_` client talks to (created with the client)."""
        return self.limiter_for(self._default(family_))

    def limiter_for(self, entry: ModelEntry, name: str = "") -> Limiter | None:
        """The limiter of `entry`'s endpoint and key; its own (named after the model `name`)
        when the entry sets a `concurrency`."""
        if not self.adaptive and entry.concurrency is None:
            return None
        client = self.client(entry)
        base_url = str(client.base_url)
        # Vertex's client has no key: Google's credentials are its own.
        key = identity(family(entry.provider), base_url, getattr(client, "api_key", None))
        label = f"{family(entry.provider)} {shown_url(base_url)}"
        if entry.concurrency is not None:
            key, label = f"{key}|{name}", f"{name}: {label}"
        if key not in self._limiters:
            ceiling = entry.concurrency or self.concurrency
            # Under --llm-adaptive=false a model's own concurrency is a fixed window.
            self._limiters[key] = Limiter(label, ceiling, adaptive=self.adaptive)
        return self._limiters[key]

    @property
    def limiters(self) -> list[Limiter]:
        return list(self._limiters.values())

    def anthropic(self) -> Any:
        return self.client(self._default("anthropic"))

    def openai(self) -> Any:
        return self.client(self._default("openai"))

    def client(self, entry: ModelEntry) -> Any:
        """The SDK client for `entry` (its base URL, key variable, headers, client kind)."""
        key = _client_key(entry)
        if key not in self._clients:
            self._clients[key] = _make_client(entry, self.call_timeout)
        return self._clients[key]

    @property
    def opened(self) -> bool:
        return bool(self._clients)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def _make_client(entry: ModelEntry, call_timeout: float) -> Any:
    """A new SDK client: the plain one, or Bedrock's, Vertex's or Azure's as the entry says.
    Its key is read from the environment now; a `${VAR}` header's too."""
    api_key = os.environ.get(entry.key_env) if entry.key_env else None
    common: dict[str, Any] = {
        "base_url": entry.base_url,
        "max_retries": 0,
        "default_headers": entry.headers_from(os.environ) or None,
    }
    if family(entry.provider) == "anthropic":
        import anthropic

        common["timeout"] = anthropic.Timeout(call_timeout, connect=CONNECT_TIMEOUT_SECONDS)
        if entry.client == "bedrock":
            return anthropic.AsyncAnthropicBedrock(aws_region=entry.region, **common)
        if entry.client == "vertex":
            return anthropic.AsyncAnthropicVertex(
                region=entry.region or anthropic.NOT_GIVEN,
                project_id=entry.project or anthropic.NOT_GIVEN,
                **common,
            )
        return anthropic.AsyncAnthropic(api_key=api_key, **common)
    import openai

    common["timeout"] = openai.Timeout(call_timeout, connect=CONNECT_TIMEOUT_SECONDS)
    if entry.client == "azure":
        url = common.pop("base_url")
        return openai.AsyncAzureOpenAI(
            azure_endpoint=url, api_version=entry.api_version, api_key=api_key, **common
        )
    return openai.AsyncOpenAI(api_key=api_key, **common)


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
        """The provider's agent, on the client and limiter of the model's entry (the
        command line's values already over it), naming the entry's key variable in errors."""
        entry, model_id = self.ref.setup, self.ref.model_id
        client, key_env = self.pool.client(entry), entry.credentials
        limiter = self.pool.limiter_for(entry, self.ref.name)
        if self.ref.provider == "anthropic":
            from pytest_llmtool.agents.anthropic_messages import AnthropicAgent

            return AnthropicAgent(
                client,
                model_id,
                self.policy,
                self.prompt_cache,
                limiter,
                self.params,
                key_env=key_env,
            )
        if self.ref.provider == "openai":
            from pytest_llmtool.agents.openai_chat import OpenAIChatAgent

            return OpenAIChatAgent(
                client, model_id, self.policy, limiter, self.params, key_env=key_env
            )
        from pytest_llmtool.agents.openai_responses import OpenAIResponsesAgent

        return OpenAIResponsesAgent(
            client, model_id, self.policy, limiter, self.params, key_env=key_env
        )

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


# Where a model goes when neither its entry, --llm-base-url nor the SDK's variable says: the
# provider's public API, as its SDK writes it (an agent CLI must be told).
PUBLIC_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
}


@dataclass(frozen=True)
class CliModel:
    """A model an agent CLI drives (`--llm-agent`): the plugin does not call it; the CLI
    does, at the endpoint of the model's entry (the command line's values over it)."""

    ref: ModelRef
    price: Price | None = None

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def agent(self) -> str:
        assert self.ref.agent is not None
        return self.ref.agent

    def skip_reason(self, task: Work) -> str | None:
        return (
            f"an agent CLI ({self.agent}) runs scenarios and optimization tasks, not bashkit "
            "tasks: bashkit's virtual shell cannot host it"
        )

    def create(self, task: Work, trial: int = 0) -> Agent:
        raise AgentError(f"{self.agent} is launched as a command, not called in-process")

    def endpoint(self, environ: Mapping[str, str] | None = None) -> Endpoint:
        """Where the CLI's calls go: the entry's protocol and model id, its base URL (the
        entry's, --llm-base-url, the SDK's variable, else the provider's public API), the
        key's value from the entry's variable and its headers with their variables read."""
        environ = os.environ if environ is None else environ
        entry = self.ref.setup
        url = endpoint_url(entry, environ) or PUBLIC_URLS[family(entry.provider)]
        key = environ.get(entry.key_env, "") if entry.key_env else ""
        return Endpoint(
            protocol_of(entry),
            entry.model,
            url,
            key,
            entry.headers_from(environ),
        )


def protocol_of(entry: ModelEntry) -> EndpointProtocol:
    """The entry's table protocol (`anthropic`, `openai-chat`, ...), from its provider."""
    found = next(p for p, v in PROTOCOLS.items() if v == entry.provider)
    return cast(EndpointProtocol, found)


@dataclass(frozen=True)
class AgentRuns:
    """What `--llm-model` and `--llm-agent` make: the run's models, each with its agent, and
    the pairs left out (an agent that cannot speak the model's protocol), in words."""

    refs: tuple[ModelRef, ...]
    left_out: tuple[str, ...] = ()


def agent_runs(refs: Sequence[ModelRef], agents: Sequence[str]) -> AgentRuns:
    """Every model under every agent: the built-in loop's run of model `m` is named `m`, a
    CLI's `<agent>/<m>`; a model whose entry names an `agent` runs under it alone, named
    as it is. No `agents`: the built-in loop. A pair whose protocol the agent does not speak
    is left out (said); an offline model under a CLI, or an agent named (in `agents` or an
    entry) and left with no model, is a `ValueError`."""
    from pytest_llmtool.agents.installed import BUILTIN, installed

    made: list[ModelRef] = []
    left_out: list[tuple[str, str]] = []  # (agent, why)
    for ref in refs:
        pinned = ref.entry.agent if ref.entry is not None else None
        for agent in [pinned] if pinned else agents or [BUILTIN]:
            if agent == BUILTIN and ref.provider == "gemini":
                left_out.append(
                    (
                        agent,
                        f"{ref.name}: it speaks Gemini's protocol, which the built-in loop "
                        "cannot (run it with --llm-agent=gemini-cli, or give its entry "
                        'agent = "gemini-cli")',
                    )
                )
            elif agent == BUILTIN:
                made.append(ref)
            elif ref.provider not in PROVIDERS:
                raise ValueError(
                    f"{ref.name} cannot drive {agent}: an agent CLI needs a real model "
                    "(oracle, nop and external names run only under the built-in loop)"
                )
            elif (protocol := protocol_of(ref.setup)) not in installed(agent).protocols:
                spoken = ", ".join(installed(agent).protocols)
                why = f"{agent}/{ref.name}: {agent} speaks {spoken}, not {protocol}"
                left_out.append((agent, why))
            else:
                name = ref.name if pinned else f"{agent}/{ref.name}"
                made.append(replace(ref, name=name, agent=agent))
    entries = [r.entry.agent for r in refs if r.entry is not None and r.entry.agent]
    # Some model runs under `agents`, or under the built-in loop when none is named.
    free = [BUILTIN] if len(entries) < len(refs) else []
    for agent in dict.fromkeys([*(agents or free), *entries]):
        if not any((r.agent or BUILTIN) == agent for r in made):
            said = [text for whose, text in left_out if whose == agent]
            raise ValueError(
                f"no model left for {agent}: "
                + ("; ".join(said) or "every model named runs under its entry's own agent")
            )
    names = [r.name for r in made]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"two runs are named {twice[0]!r}: rename the model table entry")
    return AgentRuns(tuple(made), tuple(text for _, text in left_out))


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
    """The model `ref` names; its calls send `params`, by default its entry's."""
    if ref.provider == "offline":
        return OracleModel() if ref.name == "oracle" else NopModel()
    if ref.provider == "external":
        return ExternalModel(ref.name)
    if ref.agent is not None:
        return CliModel(ref, price)
    given = ref.setup.params if params is None else params
    cap = given.max_tokens or REQUIRED_MAX_TOKENS.get(ref.provider)
    capped = replace(price, max_output=cap) if price is not None and cap else price
    return ProviderModel(ref, capped, pool, policy, prompt_cache, record, replay, given)


def cost_bound_problem(model: ModelSpec) -> str | None:
    """Why `--llm-max-cost` cannot bound the calls of `model` (a limit the run could not
    enforce), or None. Offline agents cost nothing; an external agent makes its own calls."""
    if isinstance(model, CliModel):
        return (
            f"--llm-max-cost cannot bound {model.name}: {model.agent} makes its own model "
            "calls, which the run cannot stop halfway"
        )
    if not isinstance(model, ProviderModel):
        return None
    resolved = f"{model.ref.provider}:{model.ref.model_id}"
    # A table entry is named as the user wrote it: two entries may share a model id.
    target = resolved if model.ref.name == resolved else f"{model.ref.name} ({resolved})"
    if model.price is None:
        return f"--llm-max-cost cannot bound {target}: {NO_PRICE}"
    if model.price.max_output is None:
        return (
            f"--llm-max-cost cannot bound {target}: nothing caps its output tokens "
            "(set --llm-max-tokens, or params.max_tokens in its model table entry)"
        )
    return None
