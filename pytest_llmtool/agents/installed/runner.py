"""One run of an agent CLI, the same for every CLI: found on PATH, its version asked once,
a fresh HOME with its config files, its network routed to the model endpoint
(`sandbox/egress.py`), run in the item's jail under the item's timeout and limits, and its
stream read into our trace, with the endpoint's own figures for each model call and the
cost by the CLI's word or the price table's (which, is recorded).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pytest_llmtool.agents.installed.base import Endpoint, InstalledAgent, McpServer, Reading
from pytest_llmtool.agents.pricing import Price
from pytest_llmtool.records import AgentInfo, AgentTrace, LLMCallMetrics, Usage
from pytest_llmtool.sandbox import SandboxError, egress, hostio
from pytest_llmtool.sandbox.egress import Route, ServedCall
from pytest_llmtool.sandbox.isolated import Jail
from pytest_llmtool.sandbox.process import run_shell

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
    calls, and the raw stream for the artifacts."""

    trace: AgentTrace
    reading: Reading
    stdout: str
    stderr: str


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
) -> CliRun:
    """Run `agent` on `prompt` in `workdir` and read what it did. Raises `AgentCliError` for
    a CLI that is missing, crashed before any model call, or reported an endpoint error."""
    executable = find(agent, env.get("PATH", ""))
    version = version_of(agent, executable)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with egress.route(endpoint.base_url, endpoint.api_key, endpoint.protocol) as way:
        routed = Endpoint(
            endpoint.protocol, endpoint.model, way.base_url, way.api_key, endpoint.headers
        )
        call = agent.invocation(
            executable=executable,
            prompt=prompt,
            endpoint=routed,
            home=home,
            workdir=workdir,
            mcp=mcp,
        )
        _write_files(home, call.files)
        result = await run_shell(
            "exec " + shlex.join(way.wrap(call.argv)),
            cwd=workdir,
            env={**env, "HOME": str(home), **call.env},
            timeout=timeout,
            max_output=STREAM_LIMIT,
            jail=jail,
            network=way.share_network,
        )
    reading = agent.read(result.stdout, result.stderr)
    if reading.error is not None and not reading.trace.llm_calls and not way.served:
        raise AgentCliError(f"{agent.name}: {reading.error}")
    trace = _traced(agent, reading, way, version, result.exit_code, result.timed_out, price)
    trace = trace.model_copy(update={"duration_ms": round((loop.time() - started) * 1000)})
    return CliRun(trace, reading, result.stdout, result.stderr)


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
    saw them) and the agent's record."""
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
    if served:
        update |= {
            "llm_calls": served,
            "total_input_tokens": sum(c.input_tokens for c in served),
            "total_output_tokens": sum(c.output_tokens for c in served),
        }
    return _costed(trace.model_copy(update=update), reading, price)
