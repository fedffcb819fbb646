"""The model table: each model configured once, by name, with its endpoint, key, headers,
parameters, price and concurrency.

Entries come from `[tool.llmtool.models.NAME]` tables in the rootdir's `pyproject.toml` and
from `[models.NAME]` tables in the file `--llm-models` names (which wins for a name both
define). A bad entry is a `TableError` naming the file, the table and the key. The built-in
aliases (`haiku`, ...) and the `provider:model-id` names are entries too, with only a protocol
and a model id; a table entry of the same name replaces the built-in one.

What a model's name resolved to (`identity`) is what the run records and a baseline compares:
never a key, never a header's value.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_llmtool.agents.installed import AGENT_NAMES
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import ModelInfo, ModelParams

# The table's protocol names, and the provider names the run has always recorded for them.
PROTOCOLS = {
    "anthropic": "anthropic",
    "openai-chat": "openai",
    "openai-responses": "openai-responses",
    # Gemini's generateContent: spoken by agent CLIs (Gemini CLI), not the built-in loop.
    "gemini": "gemini",
}
# The variable an SDK client reads its key from when the entry names none.
DEFAULT_KEY_ENVS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
}
# The SDK's own base URL variables, read when neither the entry nor --llm-base-url names one.
URL_VARIABLES = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}
# The SDKs' other clients, and the extra each needs beyond the SDK itself.
CLIENTS = {
    "bedrock": ("anthropic", "boto3", "anthropic[bedrock]"),
    "vertex": ("anthropic", "google.auth", "anthropic[vertex]"),
    "azure": ("openai", None, None),
}
AZURE_KEY_ENV = "AZURE_OPENAI_API_KEY"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SIZE = 16  # bytes of blake2b in an identity's digest


class TableError(ValueError):
    """A model table the run cannot use; the message names the file, table and key."""


def family(provider: str) -> str:
    """The SDK a provider's calls go through: `anthropic` or `openai`; `gemini` for Gemini's
    protocol, which only agent CLIs speak."""
    return provider if provider in ("anthropic", "gemini") else "openai"


# ------------------------------------------------------------------ the entry, as written


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: str | None = Field(default=None, min_length=1)
    thinking_budget: int | Literal["adaptive"] | None = None
    keep_reasoning: bool | None = None
    stream: bool | None = None
    extra_body: dict[str, Any] | None = None

    @field_validator("temperature", "top_p")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("extra_body")
    @classmethod
    def _no_credential(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # The body is part of the model's identity, written to every report and the history.
        found = _credential(value or {})
        if found is not None:
            raise ValueError(
                f"{found} looks like a credential, and extra_body is written to the report and "
                "the history as given: send it as a header with ${VAR} (header values are "
                "never recorded)"
            )
        return value

    @field_validator("thinking_budget")
    @classmethod
    def _budget(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be a number of tokens >= 1, or 'adaptive'")
        return value


# Body keys that carry a credential (compared lower-case, `-` as `_`).
CREDENTIAL_KEYS = frozenset(
    {"api_key", "apikey", "key", "token", "access_token", "secret", "password", "authorization"}
)


def _credential(body: dict[str, Any], path: str = "") -> str | None:
    """The first key of `body` (nested tables included) named like a credential, dotted."""
    for key, value in body.items():
        dotted = f"{path}{key}"
        if str(key).lower().replace("-", "_") in CREDENTIAL_KEYS:
            return dotted
        if isinstance(value, dict) and (found := _credential(value, f"{dotted}.")) is not None:
            return found
    return None


class _Price(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)

    @field_validator("input", "output", "cache_read", "cache_write")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    protocol: Literal["anthropic", "openai-chat", "openai-responses", "gemini"]
    model: str | None = Field(default=None, min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    params: _Params = Field(default_factory=_Params)
    price: _Price | None = None
    concurrency: int | None = Field(default=None, ge=1)
    client: Literal["bedrock", "vertex", "azure"] | None = None
    region: str | None = None
    project: str | None = None
    api_version: str | None = None
    # The agent that always runs this model (`--llm-agent`'s names); None: `--llm-agent`'s.
    agent: str | None = None

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str | None) -> str | None:
        if value is not None and value not in AGENT_NAMES:
            close = difflib.get_close_matches(value, AGENT_NAMES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"unknown agent {value!r} (one of {', '.join(AGENT_NAMES)}){hint}")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urllib.parse.urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(f"expected an environment variable's name, got {value!r}")
        return value

    @model_validator(mode="after")
    def _client(self) -> _Entry:
        wanted = CLIENTS[self.client][0] if self.client else None
        if wanted and family(PROTOCOLS[self.protocol]) != wanted:
            raise ValueError(
                f"client {self.client!r} takes protocol {wanted}-*, not {self.protocol}"
            )
        allowed = {"bedrock": {"region"}, "vertex": {"region", "project"}, "azure": {"api_version"}}
        for key in ("region", "project", "api_version"):
            if getattr(self, key) is not None and key not in allowed.get(self.client or "", ()):
                raise ValueError(f"{key} is a key of client = {_owner(key)} only")
        return self


def _owner(key: str) -> str:
    return {"region": '"bedrock" or "vertex"', "project": '"vertex"'}.get(key, '"azure"')


# ------------------------------------------------------------------ the entry, resolved


@dataclass(frozen=True)
class ModelEntry:
    """A model as configured: `provider` is the name the record has always used (`anthropic`,
    `openai` for Chat Completions, `openai-responses`); `headers` as written, `${VAR}` kept;
    `source` where it was defined (None: a built-in alias or a `provider:model-id` name)."""

    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    params: ModelParams = field(default_factory=ModelParams, hash=False)
    price: Price | None = None
    concurrency: int | None = None
    client: str | None = None
    region: str | None = None
    project: str | None = None
    api_version: str | None = None
    source: str | None = None
    agent: str | None = None

    @property
    def key_env(self) -> str | None:
        """The variable holding this model's key (None: the client takes its own
        credentials, as Bedrock's and Vertex's do)."""
        if self.api_key_env:
            return self.api_key_env
        if self.client in ("bedrock", "vertex"):
            return None
        return AZURE_KEY_ENV if self.client == "azure" else DEFAULT_KEY_ENVS[self.provider]

    @property
    def credentials(self) -> str:
        """What an authentication error tells the user to check."""
        if self.key_env:
            return self.key_env
        return "your AWS credentials" if self.client == "bedrock" else "your Google credentials"

    @property
    def header_variables(self) -> list[str]:
        """The variables `${VAR}` in the headers read: their values are secrets."""
        return [name for _, value in self.headers for name in _VARIABLE.findall(value)]

    def headers_from(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The headers with each `${VAR}` replaced by its value (KeyError: one is unset)."""
        return {
            name: _VARIABLE.sub(lambda m: environ[m.group(1)], value)
            for name, value in self.headers
        }

    def overridden(self, params: ModelParams, base_urls: Mapping[str, str]) -> ModelEntry:
        """This entry with the command line's values over it: each parameter it gives
        (`--llm-temperature`, `--llm-max-tokens`), the base URL of its family
        (`--llm-base-url`). What the command line does not give stays the entry's."""
        given = params.model_dump(exclude_none=True)
        merged = self.params.model_copy(update=given) if given else self.params
        url = base_urls.get(family(self.provider)) or self.base_url
        if merged is self.params and url == self.base_url:
            return self
        return replace(self, params=merged, base_url=url)


def _entry(name: str, raw: _Entry, source: str) -> ModelEntry:
    price = None
    if raw.price is not None:
        p = raw.price
        price = Price(p.input, p.output, p.cache_write, p.cache_read)
    return ModelEntry(
        provider=PROTOCOLS[raw.protocol],
        model=raw.model or name,
        base_url=raw.base_url,
        api_key_env=raw.api_key_env,
        headers=tuple(raw.headers.items()),
        params=ModelParams(**raw.params.model_dump(exclude_none=True)),
        price=price,
        concurrency=raw.concurrency,
        client=raw.client,
        region=raw.region,
        project=raw.project,
        api_version=raw.api_version,
        source=source,
        agent=raw.agent,
    )


# ------------------------------------------------------------------ reading the tables


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table accepts where `loc` points (for a 'did you mean')."""
    model: type[BaseModel] = _Entry
    for part in loc[:-1]:
        inner = model.model_fields.get(str(part))
        annotation = getattr(inner, "annotation", None)
        found = [t for t in getattr(annotation, "__args__", (annotation,)) if isinstance(t, type)]
        nested = [t for t in found if issubclass(t, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)


# The parts of an error's location that name a member of a union, not a key.
_UNION_MEMBERS = {"int", "float", "str", "bool", "dict", "list"}


def _member(part: int | str) -> bool:
    return str(part) in _UNION_MEMBERS or str(part).startswith(("literal[", "function-"))


def _problem(error: Any) -> str:
    loc = tuple(part for part in error["loc"] if not _member(part))
    where = ".".join(str(part) for part in loc) or "(the table)"
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{where}: unknown key{hint}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}"


def _line(text: str, header: str) -> int | None:
    """The line of `[header]` in the file's text, where the table is written as one."""
    pattern = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(_key_pattern, header.split("."))))
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return None


def _key_pattern(key: str) -> str:
    escaped = re.escape(key)
    return f"(?:{escaped}|\"{escaped}\"|'{escaped}')"


def _entries(path: Path, shown: str, prefix: tuple[str, ...]) -> dict[str, ModelEntry]:
    """The entries under `prefix` (`tool.llmtool.models`, or `models`) of the TOML file."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise TableError(f"{shown}: cannot read the model table: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TableError(f"{shown}: not valid TOML: {exc}") from None
    tables: Any = data
    for key in prefix:
        tables = tables.get(key, {}) if isinstance(tables, dict) else {}
    dotted = ".".join(prefix)
    if prefix == ("models",):
        unknown = sorted(set(data) - {"models"})
        if unknown:
            raise TableError(f"{shown}: {unknown[0]}: unknown key; the file holds [models.NAME]")
    if not isinstance(tables, dict):
        raise TableError(f"{shown} [{dotted}]: expected tables [{dotted}.NAME]")
    found = {}
    for name, table in tables.items():
        header = f"{dotted}.{name}"
        line = _line(text, header)
        place = f"{shown}:{line}" if line else shown
        where = f"{place} [{header}]"
        if not name or re.search(r"[\s,:]", name) or name in ("oracle", "nop"):
            raise TableError(
                f"{where}: {name!r} cannot name a model (no space, comma or colon; not "
                "oracle or nop)"
            )
        if not isinstance(table, dict):
            raise TableError(f"{where}: expected a table of keys (protocol, model, ...)")
        try:
            raw = _Entry.model_validate(table)
        except ValidationError as exc:
            raise TableError(f"{where} {_problem(exc.errors()[0])}") from None
        found[name] = _entry(name, raw, f"{shown} [{header}]")
    return found


def read_tables(
    pyprojects: Iterable[Path], models_file: Path | None, shown: Mapping[Path, str] | None = None
) -> dict[str, ModelEntry]:
    """Every entry of the `pyproject.toml` files (each read once) and of `models_file`, which
    wins for a name both define. `shown` names a path in messages (default: the path)."""
    said = shown or {}
    found: dict[str, ModelEntry] = {}
    for path in dict.fromkeys(p.resolve() for p in pyprojects if p.is_file()):
        name = said.get(path, str(path))
        found.update(_entries(path, name, ("tool", "llmtool", "models")))
    if models_file is not None:
        if not models_file.is_file():
            raise TableError(f"--llm-models: {models_file} is not a file")
        found.update(_entries(models_file, said.get(models_file, str(models_file)), ("models",)))
    return found


# ------------------------------------------------------------------ checks before the run


def problems(
    name: str, entry: ModelEntry, environ: Mapping[str, str], *, sends_params: bool = True
) -> list[str]:
    """Why the run cannot call `entry` (resolved, the command line over it): a header's
    variable unset, a client's missing extra, parameters its protocol refuses (unless
    the plugin does not send them: an agent CLI sends its own)."""
    said = entry.source or name
    found = [
        f"{said} headers: ${{{var}}} is not set in the environment"
        for var in entry.header_variables
        if var not in environ
    ]
    if entry.client in CLIENTS:
        _, module, extra = CLIENTS[entry.client]
        if module and not _importable(module):
            found.append(
                f"{said} client = {entry.client!r} needs {module}, which is not installed: "
                f"pip install '{extra}'"
            )
    if entry.client == "azure":
        for missing, key, variable in (
            (entry.api_version, "api_version", "OPENAI_API_VERSION"),
            (entry.base_url, "base_url", "AZURE_OPENAI_ENDPOINT"),
        ):
            if not missing and not environ.get(variable):
                found.append(f"{said} client = 'azure' needs {key} (or {variable} set)")
    if sends_params:
        found += [f"{said} params: {p}" for p in param_problems(entry)]
    return found


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def param_problems(entry: ModelEntry) -> list[str]:
    """What the entry's protocol says of its parameters (each provider module's check; an
    agent CLI speaking Gemini's sends its own)."""
    if entry.provider == "gemini":
        return []
    if entry.provider == "anthropic":
        from pytest_llmtool.agents import anthropic_messages as module
    elif entry.provider == "openai":
        from pytest_llmtool.agents import openai_chat as module  # type: ignore[no-redef]
    else:
        from pytest_llmtool.agents import openai_responses as module  # type: ignore[no-redef]
    return module.param_problems(entry.params)


def secret_variables(names: Mapping[str, object]) -> list[str]:
    """The variables whose values are the table's secrets: every entry's key variable and
    every variable its headers read (the run's redactor cuts their values out)."""
    found: dict[str, None] = {}
    for entry in names.values():
        if isinstance(entry, ModelEntry):
            found.update(dict.fromkeys([*filter(None, [entry.key_env]), *entry.header_variables]))
    return list(found)


# ------------------------------------------------------------------ identity


def shown_endpoint(url: str | None) -> str | None:
    """A base URL without the credentials, query or fragment it may carry."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def endpoint(entry: ModelEntry, environ: Mapping[str, str] | None = None) -> str | None:
    """Where the entry's calls go, as its SDK client decides it: the entry's base URL (the
    command line's over it), else the SDK's variable; None: the provider's default."""
    environ = os.environ if environ is None else environ
    if entry.base_url:
        return entry.base_url
    if entry.client is not None:
        return None  # the client's own default (region, project, Azure's variables)
    return environ.get(URL_VARIABLES[family(entry.provider)]) or None


def _client_said(entry: ModelEntry) -> str | None:
    if entry.client is None:
        return None
    details = [
        f"{key} {value}"
        for key, value in (
            ("region", entry.region),
            ("project", entry.project),
            ("api version", entry.api_version),
        )
        if value
    ]
    return entry.client + (f" ({', '.join(details)})" if details else "")


def identity(name: str, entry: ModelEntry, environ: Mapping[str, str] | None = None) -> ModelInfo:
    """What `name` resolved to, for the record: protocol, model id, endpoint without
    credentials, the parameters every call is sent, the client, the headers' names (never
    their values), whether reasoning goes back to the model, and a digest of all of it."""
    protocol = next(p for p, provider in PROTOCOLS.items() if provider == entry.provider)
    info = ModelInfo(
        name=name,
        provider=entry.provider,
        model_id=entry.model,
        endpoint=shown_endpoint(endpoint(entry, environ)),
        params=entry.params,
        resolved=True,
        protocol=protocol,
        client=_client_said(entry),
        headers=sorted(name for name, _ in entry.headers),
        api_key_env=entry.key_env,
        reasoning=_reasoning(entry),
    )
    return info.model_copy(update={"digest": digest(info)})


def _reasoning(entry: ModelEntry) -> Literal["kept", "dropped"] | None:
    """Whether the model's reasoning goes back to it between tool turns, as its calls decide
    it: Anthropic's thinking blocks unless `keep_reasoning = false`; a Responses model's
    encrypted reasoning items only for the models that reason (`sent_params`); None on Chat
    Completions, whose replies carry nothing to send back."""
    if entry.provider == "openai":
        return None
    keep = entry.params.keep_reasoning
    if entry.provider == "openai-responses":
        from pytest_llmtool.agents.openai_responses import sent_params

        keep = sent_params(entry.model, entry.params).keep_reasoning
    return "dropped" if keep is False else "kept"


def driven_by(info: ModelInfo, agent: str, version: str | None) -> ModelInfo:
    """`info` as an agent CLI drives it: the agent and its version join the identity (and
    its digest), so a baseline notices another agent or another version of it."""
    driven = info.model_copy(update={"agent": agent, "agent_version": version})
    return driven.model_copy(update={"digest": digest(driven)})


def digest(info: ModelInfo) -> str:
    """A digest of what decides a model's answers (its name and key variable aside). The
    built-in loop's records leave the agent out, so their digests stay those of the records
    from before agent CLIs."""
    left_out = {"name", "digest", "api_key_env"}
    if info.agent is None:
        left_out |= {"agent", "agent_version"}
    fields = info.model_dump(mode="json", exclude=left_out)
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=SIZE).hexdigest()
