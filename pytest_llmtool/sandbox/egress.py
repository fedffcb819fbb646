"""Where an agent CLI's network goes: the route from its sandbox to the run's model endpoint.

The CLI is told a base URL (`Route.endpoint`); what it may reach besides is what the route
enforces (`Route.kind`, recorded as `AgentInfo.network`). Each model call that passes is
recorded as it was served (`Route.served`), so the trace's tokens are the endpoint's figures,
not the CLI's claims.

TODO(part E): this is the pass-through placeholder: the jail shares the host's network and
the CLI holds the key. Part E replaces it with the endpoint-only relay.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from pytest_llmtool.records import Usage


@dataclass(frozen=True)
class ServedCall:
    """One request the route passed to the endpoint and what came back: its path, status,
    time, and the usage and stop reason the endpoint's answer carried (None: it gave none)."""

    path: str
    status: int
    latency_ms: float
    usage: Usage | None = None
    stop_reason: str | None = None


@dataclass
class Route:
    """The CLI's way out: the URL and key it is given, whether its jail shares the host's
    network, the argv wrapper that sets the route up inside the jail, and what was served."""

    base_url: str
    api_key: str
    share_network: bool
    kind: Literal["endpoint", "host", "none"]
    served: list[ServedCall] = field(default_factory=list)

    def wrap(self, argv: list[str]) -> list[str]:
        """The CLI's argv as it runs in the jail."""
        return argv


@contextlib.asynccontextmanager
async def route(base_url: str, api_key: str, protocol: str) -> AsyncIterator[Route]:
    """The route to `base_url` for one run of a CLI speaking `protocol`."""
    yield Route(base_url, api_key, share_network=True, kind="host")
