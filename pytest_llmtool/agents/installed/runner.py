"""One run of an agent CLI, the same for every CLI: found on PATH, its version asked once,
a fresh HOME with its config files, its network routed to the model endpoint
(`sandbox/egress.py`), run in the item's jail under the item's timeout and limits, and its
stream read into our trace, with the endpoint's own figures for each model call and the
cost by the CLI's word or the price table's (which, is recorded).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import shutil
import signal
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pytest_llmtool.agents.installed.base import Endpoint, InstalledAgent, McpServer, Reading
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import AgentInfo, AgentTrace, LLMCallMetrics, Usage
from pytest_llmtool.sandbox import SandboxError, egress, hostio
from pytest_llmtool.sandbox.egress import Route, ServedCall
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.process import TRUNCATED, ShellResult, run_shell

VERSION_TIMEOUT_SECONDS = 60.0
# The CLI's stream is read from a pipe the host holds (a file in the jail could be rewritten
# by the agent's own commands); more than this is a flood, an infrastructure error.
STREAM_LIMIT = 64 * 1024 * 1024


class AgentCliError(SandboxError):
    """The agent CLI could not be run, crashed, hung or flooded: an infrastructure error that
    names the agent, never a model failure."""


@dataclass(frozen=True)
class CliRun:
    """What one run of a CLI left: its trace (with `AgentTrace.agent` filled in), its MCP
    calls, the raw stream for the artifacts, and the notes the item must carry."""

    trace: AgentTrace
    reading: Reading
    stdout: str
    stderr: str
    # What the item's notes must say of the run: where the CLI's own figures disagree with
    # what the endpoint served.
    notes: tuple[str, ...] = ()
    # Every request the route passed or refused, as the endpoint answered it.
    served: tuple[ServedCall, ...] = ()


def refuse_mcp(agent: InstalledAgent, mcp: McpServer | None) -> None:
    """For a CLI whose MCP calls are not read from its stream yet: an MCP target under it is
    an `AgentCliError` naming it, never a run graded on no MCP calls."""
    if mcp is not None:
        raise AgentCliError(
            f"{agent.name}: an MCP target is not handed to it yet (its MCP calls are not "
            "read from its stream): run MCP scenarios under claude-code or codex"
        )


def find(agent: InstalledAgent, path: str) -> str:
    """The CLI's program on `path`; `AgentCliError` saying how to install it otherwise."""
    found = shutil.which(agent.binary, path=path)
    if found is None:
        raise AgentCliError(
            f"{agent.name}: `{agent.binary}` is not on PATH; install it with "
            f"`npm install -g {agent.package}`"
        )
    return found


def visible(executable: str) -> list[Path]:
    """What the jail must show read-only for the CLI to run: the package the program links
    into (its `node_modules`, whole: its dependencies are beside it) and Node.js itself."""
    real = Path(os.path.realpath(executable))
    shown = [real.parent]
    for parent in real.parents:
        if parent.name == "node_modules":
            shown = [parent]
            break
    node = shutil.which("node")
    if node is not None:
        shown.append(Path(os.path.realpath(node)).parent.parent)
    return shown


@cache
def version_of(agent: InstalledAgent, executable: str) -> str | None:
    """What the CLI says its version is (asked once per process); None when it cannot say."""
    import subprocess

    try:
        done = subprocess.run(
            [executable, *agent.version_args],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return agent.version(done.stdout) or None if done.returncode == 0 else None


def cli_version(name: str) -> str | None:
    """The version of the agent CLI `name` found on this process's PATH (asked once per
    process); None when it is not found or cannot say."""
    from pytest_llmtool.agents.installed import installed

    agent = installed(name)
    found = shutil.which(agent.binary, path=os.environ.get("PATH", ""))
    return None if found is None else version_of(agent, found)


def _write_files(home: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        hostio.write_text(home, path, text)


def call_metrics(served: list[ServedCall], price: Price | None) -> list[LLMCallMetrics]:
    """One `LLMCallMetrics` per model call the endpoint answered with usage, its tokens as
    served and its cost at `price` (None without one)."""
    metrics, cumulative = [], 0
    for number, call in enumerate((c for c in served if c.usage is not None), start=1):
        usage = call.usage or Usage()
        cumulative += usage.input_tokens
        metrics.append(
            LLMCallMetrics(
                call_number=number,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                latency_ms=call.latency_ms,
                cumulative_input=cumulative,
                tool_calls_made=0,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                stop_reason=call.stop_reason,
                cost_usd=price.cost(usage) if price is not None and usage.reported else None,
                reasoning_tokens=usage.reasoning_tokens,
                usage_reported=usage.reported,
            )
        )
    return metrics


def _costed(trace: AgentTrace, reading: Reading, price: Price | None) -> AgentTrace:
    """The trace with its calls priced and its cost source said: the CLI's own figure where
    it gives one, else the price table's (every call priced), else none."""
    calls = trace.llm_calls
    if price is not None:
        calls = [
            c.model_copy(
                update={
                    "cost_usd": price.cost(
                        Usage(
                            input_tokens=c.input_tokens,
                            output_tokens=c.output_tokens,
                            cache_read_tokens=c.cache_read_tokens,
                            cache_write_tokens=c.cache_write_tokens,
                        )
                    )
                }
            )
            if c.cost_usd is None and c.usage_reported
            else c
            for c in calls
        ]
    source = None
    if reading.cost_usd is not None:
        source = "agent"
    elif calls and all(c.cost_usd is not None for c in calls):
        source = "price_table"
    assert trace.agent is not None
    agent = trace.agent.model_copy(
        update={"reported_cost_usd": reading.cost_usd, "cost_source": source}
    )
    return trace.model_copy(update={"llm_calls": calls, "agent": agent})


async def run_cli(
    agent: InstalledAgent,
    *,
    prompt: str,
    endpoint: Endpoint,
    workdir: Path,
    home: Path,
    env: dict[str, str],
    jail: Jail | None,
    timeout: float,
    mcp: McpServer | None = None,
    price: Price | None = None,
    max_turns: int | None = None,
) -> CliRun:
    """Run `agent` on `prompt` in `workdir` and read what it did. Raises `AgentCliError` for
    a CLI that is missing, crashed, was killed, flooded its output, reported an endpoint error
    before any model call, or reached the timeout without calling the model (`_ended`)."""
    executable = find(agent, env.get("PATH", ""))
    version = version_of(agent, executable)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Jailed without the host's network, the route is the CLI's only way out.
    contained = jail is not None and jail.isolated and not jail.network
    async with egress.route(
        endpoint.base_url,
        endpoint.api_key,
        endpoint.protocol,
        headers=endpoint.headers,
        contained=contained,
        also=[mcp.url] if mcp is not None and mcp.url else [],
    ) as way:
        # The CLI holds the route's placeholder key; the route adds the key and headers. An
        # MCP server over HTTP is reached through the route too.
        routed = Endpoint(endpoint.protocol, endpoint.model, way.base_url, way.api_key)
        if mcp is not None and mcp.url:
            mcp = dataclasses.replace(mcp, url=way.urls[mcp.url])
        call = agent.invocation(
            executable=executable,
            prompt=prompt,
            endpoint=routed,
            home=home,
            workdir=workdir,
            mcp=mcp,
            max_turns=max_turns,
        )
        _write_files(home, call.files)
        if jail is not None and way.visible:
            jail = dataclasses.replace(jail, read_only=(*jail.read_only, *way.visible))
        result = await run_shell(
            "exec " + shlex.join(way.wrap(call.argv)),
            cwd=workdir,
            env={**env, "HOME": str(home), **call.env},
            timeout=timeout,
            max_output=STREAM_LIMIT,
            jail=jail,
            network=way.share_network,
        )
    reading = agent.completed(agent.read(result.stdout, result.stderr), home)
    return finished(agent, result, reading, way, endpoint, version, timeout, price, started)


def finished(
    agent: InstalledAgent,
    result: ShellResult,
    reading: Reading,
    way: Route,
    endpoint: Endpoint,
    version: str | None,
    timeout: float,
    price: Price | None,
    started: float,
) -> CliRun:
    """The run of a CLI that has exited, wherever it ran (the jail, a container): an
    `AgentCliError` unless it is one to grade (`_ended`), else its trace with the endpoint's
    figures, `started` (the loop's time) to now as its duration."""
    _ended(agent, result, reading, way, timeout, [endpoint.api_key, *endpoint.headers.values()])
    trace = _traced(agent, reading, way, version, result.exit_code, result.timed_out, price)
    elapsed = asyncio.get_running_loop().time() - started
    trace = trace.model_copy(update={"duration_ms": round(elapsed * 1000)})
    notes = tuple(_claims(agent, reading, way))
    return CliRun(trace, reading, result.stdout, result.stderr, notes, tuple(way.served))


def _ended(
    agent: InstalledAgent,
    result: ShellResult,
    reading: Reading,
    way: Route,
    timeout: float,
    secrets: list[str],
) -> None:
    """`AgentCliError` unless the CLI's run is one to grade: it did not flood, was not killed
    by a signal or a limit, its stream reports no error (a missing or forged result, an
    endpoint's error), it did not exit non-zero before any model call, and, when it reached
    the timeout, it had been calling the model (then it is a timed-out run, graded as the
    built-in loop's). A non-zero exit after model calls with a clean stream is graded (Claude
    Code exits 1 at its `--max-turns`)."""
    code, called = result.exit_code, bool(way.model_calls)
    if any(text.endswith(TRUNCATED) for text in (result.stdout, result.stderr)):
        why = f"wrote more than {STREAM_LIMIT} bytes of output"
    elif result.timed_out:
        if called:
            return
        asked = f" ({len(way.served)} requests, none answered)" if way.served else ""
        why = f"made no model call in {timeout:g} s{asked}"
    elif result.limit is not None:
        why = f"met a limit ({result.limit})"
    elif code < 0 or code - 128 in _SIGNALS:
        why = f"was killed by {_SIGNALS.get(-code, _SIGNALS.get(code - 128))}"
    elif reading.error is not None:
        # Its stream says the run failed or cannot be trusted (no result, a forged one).
        n = len(way.model_calls)
        when = f"after {n} model call{'s' * (n != 1)}" if called else "before any model call"
        why = f"{'exited' if code else 'failed'} {when}: {reading.error}"
    elif code != 0 and not called:
        why = "exited before any model call"
    else:
        return
    raise AgentCliError(f"{agent.name} {why} (exit status {code}){_tail(result.stderr, secrets)}")


# Signal numbers and names, for a status that says the CLI was killed (128 + N in the jail).
_SIGNALS = {s.value: s.name for s in signal.Signals}
STDERR_TAIL_CHARS = 2000


def _tail(stderr: str, secrets: list[str]) -> str:
    """The end of the CLI's stderr for its error, the endpoint's key and headers cut out."""
    tail = stderr.strip()[-STDERR_TAIL_CHARS:]
    for secret in filter(None, secrets):
        tail = tail.replace(secret, "[redacted]")
    return f"; stderr ends:\n{tail}" if tail else "; no stderr"


def _claims(agent: InstalledAgent, reading: Reading, way: Route) -> list[str]:
    """Notes where the CLI's own stream disagrees with what the endpoint served (a confused
    or cheating CLI): the endpoint's figures are the record's."""
    if way.served and not way.model_calls:
        return []  # answers of a protocol the route cannot read: nothing to hold it to
    served = [c.usage for c in way.model_calls if c.usage is not None]
    claimed = reading.trace
    notes = []
    if claimed.llm_calls and len(claimed.llm_calls) != len(served):
        notes.append(
            f"{agent.name} reported {len(claimed.llm_calls)} model calls; the endpoint "
            f"served {len(served)}: the endpoint's figures are on the record"
        )
    said = (claimed.total_input_tokens, claimed.total_output_tokens)
    counted = (sum(u.input_tokens for u in served), sum(u.output_tokens for u in served))
    if any(said) and all(u.reported for u in served) and said != counted:
        notes.append(
            f"{agent.name} reported {said[0]} input and {said[1]} output tokens; the "
            f"endpoint served {counted[0]} and {counted[1]}: the endpoint's figures are on "
            "the record"
        )
    return notes


def _traced(
    agent: InstalledAgent,
    reading: Reading,
    way: Route,
    version: str | None,
    exit_code: int,
    timed_out: bool,
    price: Price | None,
) -> AgentTrace:
    """The reading's trace with the endpoint's figures for its model calls (where the route
    could read them; none when nothing reached the endpoint, whatever the CLI claims) and the
    agent's record. A timed-out run stopped at the timeout."""
    trace = reading.trace
    served = call_metrics(way.served, None)
    update: dict[str, object] = {
        "timed_out": timed_out or trace.timed_out,
        "agent": AgentInfo(
            name=agent.name,
            version=version,
            exit_code=exit_code,
            network=way.kind,
            final_text=reading.final_text,
        ),
    }
    if timed_out:
        update |= {"stop": "timed_out", "natural_stop": False}
    if served or not way.served:
        # A turn is a model call, as the built-in loop counts them; a CLI's stream may not
        # say where one reply ends (Codex's), the endpoint does.
        update |= {
            "turns": len(served),
            "llm_calls": served,
            "total_input_tokens": sum(c.input_tokens for c in served),
            "total_output_tokens": sum(c.output_tokens for c in served),
        }
    return _costed(trace.model_copy(update=update), reading, price)
