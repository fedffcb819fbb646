#!/usr/bin/env python3
"""notes: a tiny MCP server keeping titled, tagged notes; the example MCP scenarios' target.

Over stdio (the default) the notes live in a JSON file (`--store`, default `notes.json` in
the working directory), so they outlast the session and the work directory shows them. Over
Streamable HTTP (`--http HOST:PORT`) each MCP session has a store of its own in memory: one
server can serve scenario items side by side without one seeing another's notes. Given a
token (`NOTES_TOKEN`), the HTTP server answers only requests carrying `Authorization: Bearer
<token>`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

HELP = """notes keeps short notes, each with an id, a title, a body and tags.
- add_note(title, body="", tags=[]) adds one and returns it with its id.
- list_notes(tag=None) lists every note, or those carrying `tag`, oldest first.
- get_note(id) returns one note; delete_note(id) removes it.
Titles are unique: adding a title that exists is an error."""
MAX_SESSIONS = 1000  # HTTP: stores kept, the oldest dropped first


class Store:
    """The notes of one session (HTTP) or of the store file (stdio)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.notes: list[dict[str, Any]] = []
        if path is not None and path.is_file():
            self.notes = json.loads(path.read_text(encoding="utf-8"))

    def save(self) -> None:
        if self.path is not None:
            self.path.write_text(json.dumps(self.notes, indent=2) + "\n", encoding="utf-8")

    def find(self, note_id: int) -> dict[str, Any]:
        for note in self.notes:
            if note["id"] == note_id:
                return note
        raise ToolError(f"no note with id {note_id}; list_notes shows the ids")


def build(store_file: Path | None) -> MCPServer:
    server = MCPServer(
        "notes", instructions="Call help first if unsure how notes work.", log_level="WARNING"
    )
    shared = Store(store_file) if store_file is not None else None
    sessions: dict[str, Store] = {}

    def store(ctx: Context) -> Store:
        if shared is not None:
            return shared
        request = ctx.request_context.request
        session = request.headers.get("mcp-session-id", "") if request is not None else ""
        if session not in sessions and len(sessions) >= MAX_SESSIONS:
            del sessions[next(iter(sessions))]  # the oldest
        return sessions.setdefault(session, Store())

    @server.tool(description="How the notes tools work: call this when unsure.")
    def help() -> str:
        return HELP

    @server.tool(description="Add a note; titles are unique. Returns the note with its id.")
    def add_note(ctx: Context, title: str, body: str = "", tags: list[str] | None = None) -> str:
        notes = store(ctx)
        if not title.strip():
            raise ToolError("title is empty")
        if any(n["title"] == title for n in notes.notes):
            raise ToolError(f"a note titled {title!r} exists already")
        note_id = max((n["id"] for n in notes.notes), default=0) + 1
        note = {"id": note_id, "title": title, "body": body, "tags": sorted(set(tags or []))}
        notes.notes.append(note)
        notes.save()
        return json.dumps(note)

    @server.tool(description="List the notes (all, or those tagged `tag`) as a JSON array.")
    def list_notes(ctx: Context, tag: str | None = None) -> str:
        notes = store(ctx).notes
        return json.dumps([n for n in notes if tag is None or tag in n["tags"]])

    @server.tool(description="One note by id, as JSON.")
    def get_note(ctx: Context, id: int) -> str:
        return json.dumps(store(ctx).find(id))

    @server.tool(description="Delete a note by id.")
    def delete_note(ctx: Context, id: int) -> str:
        notes = store(ctx)
        notes.notes.remove(notes.find(id))
        notes.save()
        return f"deleted note {id}"

    return server


def http_app(token: str | None) -> Any:
    """The Streamable HTTP app, refusing requests without the bearer token when one is set."""
    app = build(None).streamable_http_app()
    if not token:
        return app
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default="notes.json", help="stdio: the notes file")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP instead")
    args = parser.parse_args()
    if args.http:
        import uvicorn

        host, port = args.http.rsplit(":", 1)
        app = http_app(os.environ.get("NOTES_TOKEN"))
        uvicorn.run(app, host=host, port=int(port), log_level="warning")
    else:
        build(Path(args.store)).run()


if __name__ == "__main__":
    main()
