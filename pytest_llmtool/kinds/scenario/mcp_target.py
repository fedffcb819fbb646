"""An MCP server as a scenario's target: its declaration, checked when the scenario loads.

ax-eval's design (`docs/mcp-targets.md`): `target` is a tagged union, `kind: mcp` naming the
server, how to reach it (stdio or Streamable HTTP; no SSE, which the protocol deprecated) and
the tool surface it is meant to have. Nothing here imports the `mcp` SDK: it is loaded only
when such a scenario runs (`mcp_client.py`).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# What both providers accept as a tool name (Anthropic allows 128 characters, OpenAI 64).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# `${env:NAME}`: a value taken from pytest's environment when the server is reached.
_ENV_REF = re.compile(r"\$\{env:([^}]*)\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SHELL_TOOL = "bash"
DEFAULT_CALL_TIMEOUT = 60.0
LOOPBACK_NAMES = ("localhost",)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StdioTransport(_Model):
    type: Literal["stdio"] = "stdio"
    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class HttpTransport(_Model):
    type: Literal["http"] = "http"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)


class McpTarget(_Model):
    """`target: {kind: mcp, ...}`; `tools` is the declared surface, the only tools offered."""

    kind: Literal["mcp"] = "mcp"
    name: str
    transport: StdioTransport | HttpTransport = Field(discriminator="type")
    tools: list[str]
    shell: bool = False
    health_check: str | None = None
    call_timeout_secs: float = DEFAULT_CALL_TIMEOUT


def env_refs(value: str) -> list[str]:
    """The variable names a value refers to with `${env:NAME}`."""
    return _ENV_REF.findall(value)


def resolve(value: str, environ: Mapping[str, str], where: str) -> tuple[str, dict[str, str]]:
    """`value` with each `${env:NAME}` replaced, and the values used (secrets to redact).

    Raises ValueError naming the variable (never a value) when one is unset."""
    used: dict[str, str] = {}

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ValueError(f"{where}: environment variable {name} is not set")
        used[name] = environ[name]
        return environ[name]

    return _ENV_REF.sub(one, value), used


def url_problem(url: str, network: bool) -> str | None:
    """Why the harness may not connect to `url`: not http(s), or not loopback while the
    scenario does not allow the network."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"{url!r} is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not host:
        return f"{url!r} is not an http:// or https:// URL"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed; send them in headers with ${env:NAME}"
    if network or is_loopback(host):
        return None
    return (
        f"{host} is not a loopback address: scenarios reach only servers on this machine "
        "unless they set `network: true`"
    )


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def mcp_problems(target: dict[str, Any], solution: Any, network: bool = False) -> list[str]:
    """What the schema cannot say about an MCP target (it has already passed the schema)."""
    problems: list[str] = []
    tools: list[str] = target["tools"]
    shell = target.get("shell", False)
    if shell and SHELL_TOOL in tools:
        index = tools.index(SHELL_TOOL)
        problems.append(
            f"target.tools[{index}]: {SHELL_TOOL!r} is the shell tool's name (target.shell); "
            "the server's tool cannot be offered under it"
        )
    transport = target["transport"]
    values = {
        **{f"target.transport.env.{k}": v for k, v in transport.get("env", {}).items()},
        **{f"target.transport.headers.{k}": v for k, v in transport.get("headers", {}).items()},
    }
    if "url" in transport:
        values["target.transport.url"] = transport["url"]
    for where, value in values.items():
        for name in env_refs(value):
            if not _ENV_NAME.match(name):
                problems.append(f"{where}: ${{env:{name}}} does not name a variable")
    if "url" in transport and not env_refs(transport["url"]):
        problem = url_problem(transport["url"], network)
        if problem:
            problems.append(f"target.transport.url: {problem}")
    steps = [solution] if isinstance(solution, str) else (solution or [])
    allowed = {*tools, *([SHELL_TOOL] if shell else [])}
    for index, step in enumerate(steps):
        if isinstance(step, str) and not shell:
            problems.append(
                f"solution[{index}]: a text step is a bash command, and this MCP scenario has "
                "no shell (target.shell); write {tool: <name>, input: {...}}"
            )
        elif isinstance(step, dict) and step["tool"] not in allowed:
            problems.append(
                f"solution[{index}].tool: {step['tool']!r} is not a declared tool "
                f"({', '.join(sorted(allowed))})"
            )
    return problems
