"""Serves the notes MCP server over Streamable HTTP for `notes_mcp_http.yaml`.

The server listens on a free loopback port (the socket is bound here, so there is no race for
the port) in a thread of this pytest process, one per xdist worker; each MCP session has its
own notes, so items running side by side do not see each other's. Its URL and a random bearer
token (the one already there, if any) are put in the environment, where the scenario's
`${env:...}` values find them.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

URL, TOKEN = "LLMTOOL_NOTES_MCP_URL", "LLMTOOL_NOTES_MCP_TOKEN"
_SERVER = pytest.StashKey[tuple[object, threading.Thread, dict[str, str | None]]]()


def pytest_configure(config: pytest.Config) -> None:
    import uvicorn

    spec = importlib.util.spec_from_file_location(
        "notes_server", Path(__file__).parent / "mcp" / "notes_server.py"
    )
    assert spec is not None and spec.loader is not None
    notes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notes)
    token = os.environ.get(TOKEN) or secrets.token_urlsafe(24)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(notes.http_app(token), log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    saved = {name: os.environ.get(name) for name in (URL, TOKEN)}
    os.environ[URL] = f"http://127.0.0.1:{port}/mcp"
    os.environ[TOKEN] = token
    config.stash[_SERVER] = (server, thread, saved)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SERVER not in config.stash:  # pytest_configure failed
        return
    server, thread, saved = config.stash[_SERVER]
    server.should_exit = True  # type: ignore[attr-defined]
    thread.join(timeout=10)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
