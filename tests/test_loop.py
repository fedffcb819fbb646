"""Unit tests for `pytest_llmtool.agents.loop` with scripted fakes, plus the offline agents and the
bashkit sandbox they run against."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from bashkit import BuiltinResult

from pytest_llmtool.agents.base import Agent, AgentError, ChatRequest, ChatResponse
from pytest_llmtool.agents.loop import format_tool_output, run_agent_loop
from pytest_llmtool.agents.offline import NopModel, OracleModel
from pytest_llmtool.agents.retry import ProviderError, RetryPolicy, call_with_retries
from pytest_llmtool.kinds.bash.checks import score_task
from pytest_llmtool.kinds.bash.load import Task
from pytest_llmtool.records import (
    AgentTrace,
    LLMCallMetrics,
    Message,
    TextBlock,
    ToolCallResult,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from pytest_llmtool.sandbox import Sandbox
from pytest_llmtool.sandbox.vfs import CALL_TIMEOUT_SECONDS, BashPool, VfsSandbox, bash_tool

BASH = ToolSpec(name="bash", description="run bash", input_schema={"type": "object"})


class ScriptedAgent:
    """Replies with pre-made responses, one per `chat` call, and records every request."""

    def __init__(self, responses: list[ChatResponse]) -> None:
        self.responses = responses
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return self.responses[len(self.requests) - 1]


class FakeSandbox:
    """Records commands and answers each with a scripted (stdout, stderr, exit code)."""

    def __init__(self, outcomes: dict[str, tuple[str, str, int]] | None = None) -> None:
        self.outcomes = outcomes or {}
        self.commands: list[str] = []

    async def run(self, commands: str) -> ToolCallResult:
        self.commands.append(commands)
        stdout, stderr, exit_code = self.outcomes.get(commands, ("", "", 0))
        return ToolCallResult(commands=commands, stdout=stdout, stderr=stderr, exit_code=exit_code)

    def read_text(self, path: str) -> str | None:
        return None

    def is_dir(self, path: str) -> bool:
        return False

    def exists(self, path: str) -> bool:
        return False

    def read_link(self, path: str) -> str | None:
        return None


def use(call_id: str, commands: str | None = None, **extra: Any) -> ToolUseBlock:
    tool_input: dict[str, Any] = dict(extra)
    if commands is not None:
        tool_input["commands"] = commands
    return ToolUseBlock(id=call_id, name="bash", input=tool_input)


def reply(
    *blocks: TextBlock | ToolUseBlock, stop: bool = False, tokens: tuple[int, int] = (0, 0)
) -> ChatResponse:
    return ChatResponse(
        message=Message(role="assistant", content=list(blocks)),
        stop=stop,
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
    )


def done(tokens: tuple[int, int] = (0, 0)) -> ChatResponse:
    return reply(TextBlock(text="Done."), stop=True, tokens=tokens)


def run(
    agent: Agent,
    sandbox: Sandbox,
    *,
    max_turns: int = 10,
    tools: list[ToolSpec] | None = None,
    system: str = "sys",
) -> AgentTrace:
    return asyncio.run(
        run_agent_loop(
            agent,
            sandbox,
            prompt="do it",
            system=system,
            tools=[BASH] if tools is None else tools,
            max_turns=max_turns,
        )
    )


# --- format_tool_output -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "stderr", "exit_code", "text"),
    [
        ("out\n", "", 0, "out\n"),
        ("", "", 0, "(no output)"),
        ("", "bad\n", 0, "STDERR: bad\n"),
        ("", "", 2, "Exit code: 2"),
        ("", "", -1, "Exit code: -1"),
        ("out", "err", 0, "out\nSTDERR: err"),
        ("out", "", 1, "out\nExit code: 1"),
        ("", "err", 1, "STDERR: err\nExit code: 1"),
        ("out\n", "err\n", 127, "out\n\nSTDERR: err\n\nExit code: 127"),
    ],
)
def test_format_tool_output(stdout: str, stderr: str, exit_code: int, text: str) -> None:
    assert format_tool_output(stdout, stderr, exit_code) == text


# --- turns and natural stop -------------------------------------------------------------------


def test_stop_signal_ends_the_loop_naturally() -> None:
    agent = ScriptedAgent([reply(use("a", "ls")), done()])
    sandbox = FakeSandbox()
    trace = run(agent, sandbox)
    assert (trace.turns, trace.natural_stop, len(agent.requests)) == (2, True, 2)
    assert sandbox.commands == ["ls"]


def test_reply_without_tool_use_ends_naturally_even_without_stop() -> None:
    agent = ScriptedAgent([reply(TextBlock(text="I am done"), stop=False)])
    trace = run(agent, FakeSandbox())
    assert (trace.turns, trace.natural_stop, trace.tool_call_count) == (1, True, 0)


def test_stop_signal_wins_over_tool_use_in_the_same_reply() -> None:
    agent = ScriptedAgent([reply(use("a", "rm -rf /"), stop=True)])
    sandbox = FakeSandbox()
    trace = run(agent, sandbox)
    assert (trace.turns, trace.natural_stop) == (1, True)
    assert sandbox.commands == []
    assert [m.role for m in trace.messages] == ["user", "assistant"]


def test_max_turns_while_still_calling_tools_is_not_a_natural_stop() -> None:
    agent = ScriptedAgent([reply(use(f"c{i}", f"echo {i}")) for i in range(5)])
    sandbox = FakeSandbox()
    trace = run(agent, sandbox, max_turns=3)
    assert (trace.turns, trace.natural_stop, len(agent.requests)) == (3, False, 3)
    assert sandbox.commands == ["echo 0", "echo 1", "echo 2"]
    assert [m.role for m in trace.messages] == ["user"] + ["assistant", "user"] * 3


def test_stopping_on_the_last_allowed_turn_is_natural() -> None:
    agent = ScriptedAgent([reply(use("a", "ls")), done()])
    trace = run(agent, FakeSandbox(), max_turns=2)
    assert (trace.turns, trace.natural_stop) == (2, True)


# --- the conversation -------------------------------------------------------------------------


def test_requests_carry_system_tools_and_the_history_so_far() -> None:
    agent = ScriptedAgent([reply(use("a", "ls")), done()])
    trace = run(agent, FakeSandbox(), system="be careful")
    first, second = agent.requests
    assert (first.system, first.tools) == ("be careful", [BASH])
    assert first.messages == [Message(role="user", content=[TextBlock(text="do it")])]
    assert second.messages == trace.messages[:3]
    assert len(trace.messages) == 4


def test_batched_tool_calls_run_in_order_and_answer_in_one_message() -> None:
    sandbox = FakeSandbox(
        {
            "mkdir /a": ("", "", 0),
            "ls /nope": ("", "ls: /nope: No such file\n", 2),
            "echo hi": ("hi\n", "", 0),
        }
    )
    batch = reply(
        TextBlock(text="Running three things"),
        use("t1", "mkdir /a"),
        use("t2", "ls /nope"),
        use("t3", "echo hi"),
    )
    agent = ScriptedAgent([batch, done()])
    trace = run(agent, sandbox)
    assert sandbox.commands == ["mkdir /a", "ls /nope", "echo hi"]
    assert [c.commands for c in trace.tool_calls] == sandbox.commands
    assert trace.turns == 2
    assert trace.messages[2] == Message(
        role="user",
        content=[
            ToolResultBlock(tool_use_id="t1", content="(no output)", is_error=False),
            ToolResultBlock(
                tool_use_id="t2",
                content="STDERR: ls: /nope: No such file\n\nExit code: 2",
                is_error=True,
            ),
            ToolResultBlock(tool_use_id="t3", content="hi\n", is_error=False),
        ],
    )
    assert (trace.tool_calls_ok, trace.tool_calls_error) == (2, 1)
    assert trace.last_tool_response == ToolCallResult(
        commands="echo hi", stdout="hi\n", stderr="", exit_code=0
    )


@pytest.mark.parametrize(
    ("tool_input", "commands"),
    [
        ({"commands": "ls -la"}, "ls -la"),
        ({"script": "pwd"}, "pwd"),
        ({"commands": "a", "script": "b"}, "a"),
        ({"commands": "", "script": "b"}, ""),
        ({"commands": 5, "script": "b"}, "b"),
        ({"cmd": "ls"}, ""),
        ({}, ""),
    ],
)
def test_commands_come_from_commands_then_script(tool_input: dict[str, Any], commands: str) -> None:
    call = ToolUseBlock(id="x", name="python", input=tool_input)
    sandbox = FakeSandbox()
    trace = run(ScriptedAgent([reply(call), done()]), sandbox)
    assert sandbox.commands == [commands]
    assert trace.tool_calls[0].commands == commands


# --- metrics ----------------------------------------------------------------------------------


def test_per_call_metrics_and_trace_totals() -> None:
    agent = ScriptedAgent(
        [
            reply(use("a", "ls"), use("b", "pwd"), tokens=(100, 10)),
            reply(use("c", "cat x"), tokens=(250, 20)),
            done(tokens=(300, 5)),
        ]
    )
    trace = run(agent, FakeSandbox())
    assert all(c.latency_ms >= 0 for c in trace.llm_calls)
    assert [c.model_copy(update={"latency_ms": 0.0}) for c in trace.llm_calls] == [
        LLMCallMetrics(
            call_number=1,
            input_tokens=100,
            output_tokens=10,
            latency_ms=0.0,
            cumulative_input=100,
            tool_calls_made=2,
        ),
        LLMCallMetrics(
            call_number=2,
            input_tokens=250,
            output_tokens=20,
            latency_ms=0.0,
            cumulative_input=350,
            tool_calls_made=1,
        ),
        LLMCallMetrics(
            call_number=3,
            input_tokens=300,
            output_tokens=5,
            latency_ms=0.0,
            cumulative_input=650,
            tool_calls_made=0,
        ),
    ]
    assert (trace.total_input_tokens, trace.total_output_tokens) == (650, 35)
    assert (trace.turns, trace.tool_call_count) == (3, 3)
    assert trace.base_context == 100
    assert trace.context_growth_avg == 100.0
    assert isinstance(trace.duration_ms, int)
    assert trace.duration_ms >= 0


def test_single_call_has_no_context_growth() -> None:
    trace = run(ScriptedAgent([done(tokens=(420, 7))]), FakeSandbox())
    assert (trace.base_context, trace.context_growth_avg) == (420, 0.0)
    assert (trace.total_input_tokens, trace.total_output_tokens) == (420, 7)
    assert isinstance(trace.duration_ms, int)
    assert trace.duration_ms >= 0


@pytest.mark.parametrize(
    ("inputs", "growth"),
    [([100, 250, 300], 100.0), ([100, 50, 200], 50.0), ([10, 10], 0.0), ([1000, 1001, 1003], 1.5)],
)
def test_context_growth_is_the_mean_consecutive_increase(inputs: list[int], growth: float) -> None:
    responses = [reply(use(f"c{i}", "true"), tokens=(n, 1)) for i, n in enumerate(inputs[:-1])]
    responses.append(done(tokens=(inputs[-1], 1)))
    trace = run(ScriptedAgent(responses), FakeSandbox())
    assert trace.context_growth_avg == growth


def test_an_empty_trace_has_no_metrics() -> None:
    trace = AgentTrace()
    assert (trace.base_context, trace.context_growth_avg, trace.last_tool_response) == (
        0,
        0.0,
        None,
    )


# --- the offline agents against the real bashkit sandbox --------------------------------------


def make_task(solution: list[str] | None = None, **extra: Any) -> Task:
    return Task.model_validate(
        {
            "id": "t",
            "category": "files",
            "prompt": "write a report",
            "files": {"/data/in.txt": "alpha\nbeta\n"},
            "expectations": [
                {"check": "exit_code:0"},
                {"check": "stdout_contains:count=2"},
                {"check": "file_equals:/out/count.txt:2"},
            ],
            "solution": solution,
            **extra,
        }
    )


def run_real(agent: Agent, task: Task) -> tuple[AgentTrace, VfsSandbox]:
    tool, system = bash_tool()
    sandbox = VfsSandbox(task.files)
    trace = asyncio.run(
        run_agent_loop(
            agent, sandbox, prompt=task.prompt, system=system, tools=[tool], max_turns=10
        )
    )
    return trace, sandbox


def test_oracle_replays_the_solution() -> None:
    task = make_task(
        [
            "mkdir -p /out && wc -l < /data/in.txt > /out/count.txt",
            'echo "count=$(cat /out/count.txt)"',
        ]
    )
    trace, sandbox = run_real(OracleModel().create(task), task)
    assert (trace.turns, trace.tool_call_count, trace.natural_stop) == (3, 2, True)
    assert [c.exit_code for c in trace.tool_calls] == [0, 0]
    assert [b.id for m in trace.messages for b in m.tool_uses()] == ["oracle_0", "oracle_1"]
    assert sandbox.read_text("/out/count.txt") == "2\n"
    score = score_task(task.id, task.checks(), trace, sandbox)
    assert score.all_passed(), score.failed()


def test_nop_answers_without_calling_tools() -> None:
    task = make_task()
    trace, _ = run_real(NopModel().create(task), task)
    assert (trace.turns, trace.tool_call_count, trace.natural_stop) == (1, 0, True)
    score = score_task(task.id, task.checks(), trace, VfsSandbox(task.files))
    assert [r.passed for r in score.results] == [False, False, False]


def test_skip_reasons() -> None:
    assert OracleModel().skip_reason(make_task(["ls"])) is None
    assert OracleModel().skip_reason(make_task()) == (
        "no `solution`: the oracle agent replays the reference solution"
    )
    assert NopModel().skip_reason(make_task()) is None


# --- VfsSandbox -------------------------------------------------------------------------------


def test_vfs_sandbox_file_view() -> None:
    sandbox = VfsSandbox({"/data/a.txt": "hello\n", "/data/sub/b.txt": "b"})

    async def script() -> None:
        made = await sandbox.run("ln -s ../data/a.txt /tmp/rel && ln -s /data/a.txt /tmp/abs")
        assert made.exit_code == 0

    asyncio.run(script())
    assert sandbox.read_text("/data/a.txt") == "hello\n"
    assert sandbox.read_text("/data/sub/b.txt") == "b"
    assert sandbox.read_text("/data/missing.txt") is None
    assert sandbox.read_text("/data") is None
    assert (sandbox.is_dir("/data"), sandbox.is_dir("/data/sub")) == (True, True)
    assert (sandbox.is_dir("/data/a.txt"), sandbox.is_dir("/nope")) == (False, False)
    assert (sandbox.exists("/data"), sandbox.exists("/data/a.txt")) == (True, True)
    assert sandbox.exists("/nope") is False
    assert sandbox.read_link("/tmp/rel") == "../data/a.txt"
    assert sandbox.read_link("/tmp/abs") == "/data/a.txt"
    assert sandbox.read_link("/data/a.txt") is None
    assert sandbox.read_link("/nope") is None


def test_vfs_sandbox_runs_bash_as_eval_without_network() -> None:
    sandbox = VfsSandbox({})

    async def script() -> list[ToolCallResult]:
        return [
            await sandbox.run("whoami"),
            await sandbox.run("hostname"),
            await sandbox.run("curl -s http://example.com"),
            await sandbox.run("echo kept > /tmp/f"),
            await sandbox.run("cat /tmp/f"),
        ]

    whoami, hostname, curl, _, cat = asyncio.run(script())
    assert (whoami.stdout, whoami.exit_code) == ("eval\n", 0)
    assert hostname.stdout == "bashkit-eval\n"
    assert curl.exit_code != 0
    assert curl.stdout == ""
    assert cat.stdout == "kept\n"


def test_vfs_sandbox_has_no_session_cap_at_1000_calls() -> None:
    sandbox = VfsSandbox({})

    async def script() -> list[int]:
        codes = [(await sandbox.run("true")).exit_code for _ in range(1005)]
        last = await sandbox.run("echo still here")
        assert last.stdout == "still here\n"
        return codes

    codes = asyncio.run(script())
    assert codes == [0] * 1005


# --- deadlines and failing providers --------------------------------------------------------------


class HangingAgent:
    """Answers the first `answers` calls with a tool call, then never answers again."""

    def __init__(self, answers: int) -> None:
        self.answers = answers
        self.calls = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.calls <= self.answers:
            return reply(use(f"t{self.calls}", "true"))
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class FailingProviderAgent:
    """A provider answering 503 to every attempt, retried by the real retry policy."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        async def attempt() -> ChatResponse:
            raise ValueError("HTTP 503 from the fake provider")

        policy = RetryPolicy(max_attempts=1000, max_seconds=60, backoff=0.01, max_delay=0.01)
        response, _ = await call_with_retries(attempt, policy, "FAKE_KEY")
        return response


def run_until(agent: Agent, seconds: float) -> AgentTrace:
    async def go() -> AgentTrace:
        return await run_agent_loop(
            agent,
            FakeSandbox(),
            prompt="do it",
            system="sys",
            tools=[BASH],
            max_turns=10,
            deadline=time.monotonic() + seconds,
        )

    return asyncio.run(go())


def test_a_model_cut_off_after_answering_has_timed_out() -> None:
    trace = run_until(HangingAgent(answers=2), 0.3)
    assert trace.timed_out and trace.turns == 2 and not trace.natural_stop


def test_a_model_that_never_answered_is_an_infrastructure_error_not_a_timeout() -> None:
    with pytest.raises(AgentError, match="did not answer its first call"):
        run_until(HangingAgent(answers=0), 0.2)


def test_a_provider_failing_at_the_deadline_is_a_provider_error() -> None:
    # Two seconds, not less: on a loaded machine the first attempt must fail before the
    # deadline, or the run reads as "never answered" (also an error, but not this one).
    with pytest.raises(ProviderError, match=r"still failing .* last: malformed response"):
        run_until(FailingProviderAgent(), 2.0)


def test_a_hung_attempt_is_bounded_by_the_call_timeout_then_retried() -> None:
    attempts: list[float] = []

    async def attempt() -> str:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            await asyncio.Event().wait()
        return "answer"

    policy = RetryPolicy(max_attempts=5, max_seconds=30, backoff=0.0, call_timeout=0.05)
    assert asyncio.run(call_with_retries(attempt, policy, "FAKE_KEY")) == ("answer", 2)


def test_a_hung_call_gives_up_within_the_retry_budget() -> None:
    async def attempt() -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    policy = RetryPolicy(max_attempts=100, max_seconds=0.2, backoff=0.0, call_timeout=300)
    with pytest.raises(ProviderError, match=r"gave up after 1 attempts .* no answer within 0\.2 s"):
        asyncio.run(call_with_retries(attempt, policy, "FAKE_KEY"))


def test_a_deadline_stops_a_call_whose_every_attempt_fails_at_once() -> None:
    # On Python 3.11 `asyncio.wait_for` around each attempt lost the caller's cancellation
    # when an attempt failed in the same tick, and the retries ran on to their own limit.
    attempts = 0

    async def attempt() -> str:
        nonlocal attempts
        attempts += 1
        raise ValueError("HTTP 503 from the fake provider")

    async def go() -> int:
        policy = RetryPolicy(max_attempts=10**9, max_seconds=3600, backoff=0.0, max_delay=0.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call_with_retries(attempt, policy, "FAKE_KEY"), 0.05)
        stopped_at = attempts
        await asyncio.sleep(0.05)
        return attempts - stopped_at

    for _ in range(5):
        assert asyncio.run(go()) == 0


def test_the_backoff_of_a_very_late_attempt_is_still_a_number() -> None:
    policy = RetryPolicy(max_attempts=10**9, max_seconds=3600, backoff=0.5, max_delay=8.0)
    assert policy.delay(5000, None) == 8.0


# --- the pool of bashkit interpreters: what one task leaves, the next must not see ---------

LEAVE_BEHIND = """
echo planted > /tmp/left; mkdir -p /home/eval/.config && echo x > /home/eval/.config/rc
echo appended >> /in/a.txt; rm /in/b.txt
python3 -c "open('/tmp/by_python', 'w').write('p')"
sqlite3 /tmp/db.sqlite 'create table t(x); insert into t values(1);'
export LEFT=1; f() { echo hijacked; }; alias ls='echo hijacked'; set -e -o pipefail
trap 'echo trapped' EXIT; umask 077; cd /tmp
"""

LOOK = """
ls /tmp; cat /home/eval/.config/rc; echo "LEFT=$LEFT"; type f; alias
set -o | grep -E 'errexit|pipefail'; umask; pwd; cat /in/a.txt /in/b.txt; ls /in
"""


def _pooled_run(pool: BashPool, files: dict[str, str], commands: str) -> tuple[str, VfsSandbox]:
    async def go() -> tuple[str, VfsSandbox]:
        sandbox = VfsSandbox(files, pool=pool)
        result = await sandbox.run(commands)
        return result.stdout + result.stderr, sandbox

    return asyncio.run(go())


def test_a_pooled_interpreter_keeps_nothing_of_the_task_before() -> None:
    pool = BashPool()
    files = {"/in/a.txt": "one\n", "/in/b.txt": "two\n"}
    _, first = _pooled_run(pool, files, LEAVE_BEHIND)
    used = first._bash
    first.release()
    fresh, _ = _pooled_run(BashPool(), files, LOOK)  # a new interpreter, for reference
    reused, third = _pooled_run(pool, files, LOOK)
    assert third._bash is used, "the pool did not hand the interpreter back out"
    assert reused == fresh
    for trace in ("planted", "by_python", "db.sqlite", "hijacked", "LEFT=1", "appended", "077"):
        assert trace not in reused
    assert "one" in reused and "two" in reused


def test_a_pooled_interpreter_holds_only_the_next_tasks_files() -> None:
    pool = BashPool()
    _, first = _pooled_run(pool, {"/in/a.txt": "first task\n", "/etc/first": "x"}, "true")
    used = first._bash
    first.release()
    seen, second = _pooled_run(
        pool, {"/data/c.txt": "second task\n"}, "ls /in /etc/first; cat /data/c.txt"
    )
    assert second._bash is used
    assert "first" not in seen.replace("/etc/first", "")
    assert "No such file" in seen and "second task" in seen


def test_a_sandbox_with_custom_builtins_or_no_pool_is_never_pooled() -> None:
    pool = BashPool()
    sandbox = VfsSandbox({}, builtins={"mock": lambda ctx: BuiltinResult(stdout="m")}, pool=pool)
    asyncio.run(sandbox.run("mock"))
    sandbox.release()
    assert pool.take(CALL_TIMEOUT_SECONDS) is None
