"""One event loop per pytest process, run by pytest's own thread while it waits for a task.

Async SDK clients are bound to the loop they were created on, so a loop per item
(`asyncio.run`) would force a new client per item. The loop runs in pytest's thread, not a
thread of its own: handing each task to another thread and its result back cost a wake-up
and a fight over the GIL both ways (a sixth of a `nop` run's time). Tasks started ahead
(`--llm-concurrency`) progress whenever pytest waits for any of them; in between, pytest
only reports the item it just finished, and the roles start no task ahead of an item that
could keep pytest's thread away longer (`roles.Runner.pytest_runtest_protocol`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Runtime:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Schedule a coroutine; it runs while pytest waits for this or any other task."""
        return self._ensure_started().create_task(coro)

    def wait(self, task: asyncio.Task[T]) -> T:
        """Run the loop until the task is done and return its result; Ctrl-C cancels it.
        A task that finished while pytest waited for an earlier one is taken as it is:
        entering the loop costs more than a small task's whole run."""
        if task.done():
            return task.result()
        try:
            return self._ensure_started().run_until_complete(task)
        except BaseException:
            task.cancel()
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.wait(self.submit(coro))

    def close(self) -> None:
        """Cancel what is still running (a stopped run's tasks started ahead) and close."""
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def _drain() -> None:
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await loop.shutdown_asyncgens()

        try:
            loop.run_until_complete(_drain())
        finally:
            loop.close()
