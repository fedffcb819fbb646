"""task.toml, as Harbor 0.25 reads it (`harbor/models/task/config.py`): its keys, defaults
and deprecated spellings. Unknown keys are ignored, as Harbor ignores them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NetworkMode = Literal["public", "no-network", "allowlist"]


class _Table(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Healthcheck(_Table):
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class McpServer(_Table):
    name: str
    transport: Literal["sse", "streamable-http", "stdio"] = "streamable-http"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)


class EnvironmentConfig(_Table):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    mcp_servers: list[McpServer] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    workdir: str | None = None
    healthcheck: Healthcheck | None = None
    # Harbor's default is "public"; ours is no network unless the task sets it (`network`).
    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _deprecated(cls, data: Any) -> Any:
        """`memory`/`storage` strings ("2G", "512M") and `allow_internet`, as Harbor still
        accepts them."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in data and new not in data:
                data[new] = _megabytes(data.pop(old))
        if "allow_internet" in data and "network_mode" not in data:
            data["network_mode"] = "public" if data.pop("allow_internet") else "no-network"
        return data

    def network(self) -> Literal["none", "bridge"]:
        """The container's network: `bridge` only when the task asks for the network
        (`network_mode = "public"` or `allow_internet = true` written in task.toml)."""
        asked = "network_mode" in self.model_fields_set and self.network_mode == "public"
        return "bridge" if asked else "none"


def _megabytes(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip().upper().removesuffix("B")
    factor = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(text[-1:])
    if factor is None:
        return value
    try:
        return int(float(text[:-1]) * factor)
    except ValueError:
        return value


class PhaseConfig(_Table):
    timeout_sec: float | None = None
    user: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class AgentConfig(PhaseConfig):
    """`[agent]`: no timeout unless set (Harbor's template writes 900)."""


class VerifierConfig(PhaseConfig):
    timeout_sec: float | None = 600.0
    environment_mode: Literal["shared", "separate"] = "shared"


class SolutionConfig(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class StepConfig(_Table):
    name: str
    agent: AgentConfig | None = None
    verifier: VerifierConfig | None = None
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None


class TaskInfo(_Table):
    name: str
    version: str | None = None
    description: str | None = None
    keywords: list[str] = Field(default_factory=list)


class TaskConfig(_Table):
    schema_version: str = "1.4"
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    task: TaskInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[StepConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data and "schema_version" not in data:
            data = dict(data)
            data["schema_version"] = str(data.pop("version"))
        return data
