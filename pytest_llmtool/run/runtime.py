"""One long-lived event loop per pytest process, in a daemon thread.

Async SDK clients are bound to the loop they were created on, so a loop per item
(`asyncio.run`) would force a new client per item. A background loop also keeps submitted
agent runs progressing while pytest's own thread is busy reporting, which is what lets
several tasks overlap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Runtime:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="pytest-llmtool-loop", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_started())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop and wait for it; Ctrl-C cancels it."""
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None

        async def _drain() -> None:
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(_drain(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
