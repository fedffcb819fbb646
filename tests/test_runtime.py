"""The per-process event loop: a finished task is taken without running the loop again."""

from __future__ import annotations

import pytest

from pytest_llmtool.run.runtime import Runtime


async def _value(value: int) -> int:
    return value


async def _mark(ran: list[str]) -> None:
    ran.append("loop")


async def _fails() -> int:
    raise ValueError("the task's own error")


def test_a_task_finished_during_an_earlier_wait_is_taken_as_it_is() -> None:
    runtime = Runtime()
    try:
        first, second = runtime.submit(_value(1)), runtime.submit(_value(2))
        assert runtime.wait(first) == 1
        assert second.done()  # it ran while pytest waited for the first
        ran: list[str] = []
        runtime.submit(_mark(ran))  # its first step runs when the loop next runs
        assert runtime.wait(second) == 2
        assert ran == []  # the loop was not entered for it
    finally:
        runtime.close()


def test_a_finished_task_that_raised_raises_its_error() -> None:
    runtime = Runtime()
    try:
        failing, other = runtime.submit(_fails()), runtime.submit(_value(1))
        assert runtime.wait(other) == 1
        assert failing.done()
        with pytest.raises(ValueError, match="the task's own error"):
            runtime.wait(failing)
    finally:
        runtime.close()
