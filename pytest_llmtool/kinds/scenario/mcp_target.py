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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmtool.kinds.scenario.placeholders import env_refs

# What both providers accept as a tool name (Anthropic allows 128 characters, OpenAI 64).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# What `${env:NAME}` must name: a variable (`placeholders.py` reads it at run time).
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


class NoAuth(_Model):
    """`auth: {type: none}`: the same as no `auth`."""

    type: Literal["none"] = "none"


class BearerEnvAuth(_Model):
    """`auth: {type: bearer_env, env: NAME}`: `Authorization: Bearer <$NAME>` on every request."""

    type: Literal["bearer_env"] = "bearer_env"
    env: str


class HeadersAuth(_Model):
    """`auth: {type: headers, headers: {...}}`: sent with every request, over the transport's
    own headers; a value may be `${env:NAME}`."""

    type: Literal["headers"] = "headers"
    headers: dict[str, str]


# ax-eval's `host_session` (the host's cached MCP login) has no model: we never read it, so
# such a scenario is refused when it loads.
McpAuth = Annotated[NoAuth | BearerEnvAuth | HeadersAuth, Field(discriminator="type")]


class McpTarget(_Model):
    """`target: {kind: mcp, ...}`; `tools` is the declared surface, the only tools offered."""

    kind: Literal["mcp"] = "mcp"
    name: str
    transport: StdioTransport | HttpTransport = Field(discriminator="type")
    auth: McpAuth | None = None  # http only
    tools: list[str]
    env: dict[str, str] = Field(default_factory=dict)  # the server's private variables
    shell: bool = False
    health_check: str | None = None
    call_timeout_secs: float = DEFAULT_CALL_TIMEOUT


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
    auth = target.get("auth", {})
    problems += _auth_problems(auth, transport["type"])
    values = {
        **{f"target.env.{k}": v for k, v in target.get("env", {}).items()},
        **{f"target.transport.env.{k}": v for k, v in transport.get("env", {}).items()},
        **{f"target.transport.headers.{k}": v for k, v in transport.get("headers", {}).items()},
        **{f"target.auth.headers.{k}": v for k, v in auth.get("headers", {}).items()},
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


def _auth_problems(auth: dict[str, Any], transport: str) -> list[str]:
    """ax-eval's rules for `target.auth`, and the one form we refuse: `host_session` would
    use a login cached on the host, which the harness never reads."""
    if not auth:
        return []
    if transport == "stdio":
        return [
            "target.auth: a stdio server takes its credentials from target.env "
            "(e.g. TOKEN: ${env:NAME}); auth is for http servers"
        ]
    if auth["type"] == "host_session":
        return [
            "target.auth.type: host_session (the host's cached MCP login) is not supported: "
            "the harness does not read host logins; use bearer_env {env: NAME} or "
            "headers {headers: {...: ${env:NAME}}}"
        ]
    if auth["type"] == "bearer_env" and not is_env_name(auth["env"]):
        return [f"target.auth.env: {auth['env']!r} is not an environment variable name"]
    return []


def is_env_name(name: str) -> bool:
    """A portable environment variable name: a letter or `_`, then letters, digits, `_`."""
    return bool(_ENV_NAME.match(name))
