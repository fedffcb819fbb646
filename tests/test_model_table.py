"""The model table: each model its own endpoint, key, headers, parameters and price, run
through the real SDK clients against fake servers; its identity on the record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, Fault, Turn
from helpers import TASKS, read_report, write_dataset

from pytest_llmtool.agents.models import ModelEntry, TableError, identity, read_tables
from pytest_llmtool.agents.registry import ClientPool, ModelRef, overridden, resolve
from pytest_llmtool.history import load_report
from pytest_llmtool.records import BaselineChange, ModelParams
from pytest_llmtool.run.digests import model_digests
from pytest_llmtool.settings import Settings
from pytest_llmtool.stats import baseline

ALPHA = TASKS[0]
XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
FAST_KEY, CAREFUL_KEY = "fast-key-0123456789", "careful-key-0123456789"
# Named so that no secret-looking pattern (`*_KEY`, `*TOKEN`) would redact them by name.
ROUTE_SECRET, FAST_AUTH = "route-secret-9f8e7d6c5b", "FAST_AUTH"
UNSET = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")


def _turns() -> list[Turn]:
    return [
        Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt", "wc -l < /out/b.txt"]),
        Turn(text="The file has 2 lines.", input_tokens=100, output_tokens=10),
    ]


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeLLMServer, FakeLLMServer]]:
    """Two fake servers; no provider variable in the environment, the table's keys set."""
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(FAST_AUTH, FAST_KEY)
    monkeypatch.setenv("CAREFUL_KEY", CAREFUL_KEY)
    monkeypatch.setenv("ROUTER_AUTH", ROUTE_SECRET)
    with FakeLLMServer() as one, FakeLLMServer() as two:
        for server in (one, two):
            server.script(ALPHA["prompt"], _turns())
        yield one, two


def _table(fast_url: str, careful_url: str, temperature: float = 0.25) -> str:
    return f"""\
[tool.pytest.ini_options]

[tool.llmtool.models.fast]
protocol = "openai-chat"
model = "fast-1"
base_url = "{fast_url}"
api_key_env = "{FAST_AUTH}"
headers = {{ X-Route = "fast", X-Secret = "${{ROUTER_AUTH}}" }}
params = {{ temperature = {temperature} }}
price = {{ input = 1.0, output = 2.0 }}

[tool.llmtool.models.careful]
protocol = "anthropic"
model = "careful-1"
base_url = "{careful_url}"
api_key_env = "CAREFUL_KEY"
params = {{ max_tokens = 777 }}
concurrency = 2
"""


def _project(pytester: pytest.Pytester, servers: tuple[FakeLLMServer, ...], **kw: Any) -> None:
    one, two = servers
    (pytester.path / "pyproject.toml").write_text(_table(one.openai_url, two.url, **kw))
    write_dataset(pytester, [ALPHA])


def _leaks(root: Path) -> list[str]:
    """Files under `root` holding a key or a header's secret."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [
                f"{path}: {s}" for s in (FAST_KEY, CAREFUL_KEY, ROUTE_SECRET) if s.encode() in data
            ]
    return found


# ------------------------------------------------------------------ two models, one command


@XDIST
def test_two_models_on_two_servers_each_get_only_their_own_calls(
    pytester: pytest.Pytester, servers: tuple[FakeLLMServer, FakeLLMServer], xdist: list[str]
) -> None:
    fast_server, careful_server = servers
    _project(pytester, servers)
    result = pytester.runpytest(*xdist, "--llm-model=fast,careful", "--llm-report=out")
    result.assert_outcomes(passed=2)

    fast = fast_server.requests
    assert fast and {r.protocol for r in fast} == {"chat"}
    for request in fast:
        assert request.body["model"] == "fast-1"
        assert request.body["temperature"] == 0.25
        assert "max_tokens" not in request.body and "max_completion_tokens" not in request.body
        assert request.headers["authorization"] == f"Bearer {FAST_KEY}"
        assert request.headers["x-route"] == "fast"
        assert request.headers["x-secret"] == ROUTE_SECRET
    careful = careful_server.requests
    assert careful and {r.protocol for r in careful} == {"anthropic"}
    for request in careful:
        assert request.body["model"] == "careful-1"
        assert request.body["max_tokens"] == 777
        assert "temperature" not in request.body
        sent = request.headers.get("x-api-key") or request.headers["authorization"]
        assert CAREFUL_KEY in sent and "x-secret" not in request.headers

    report = read_report(pytester)
    models = {m["name"]: m for m in report["metadata"]["models"]}
    assert models["fast"] == {
        "name": "fast",
        "provider": "openai",
        "model_id": "fast-1",
        "endpoint": fast_server.openai_url,
        "params": {**ModelParams().model_dump(), "temperature": 0.25},
        "resolved": True,
        "protocol": "openai-chat",
        "client": None,
        "headers": ["X-Route", "X-Secret"],
        "api_key_env": FAST_AUTH,
        "reasoning": None,  # Chat Completions replies carry no reasoning to send back
        "digest": models["fast"]["digest"],
        "agent": None,  # the built-in loop
        "agent_version": None,
    }
    careful_info = models["careful"]
    assert (careful_info["protocol"], careful_info["endpoint"]) == ("anthropic", careful_server.url)
    assert careful_info["params"]["max_tokens"] == 777 and careful_info["digest"]
    # The entry's price, not the defaults (fast-1 has none): 2 calls' tokens at $1/$2 per MTok.
    fast_figures = report["by_model"]["fast"]
    tokens_in, tokens_out = fast_figures["total_input_tokens"], fast_figures["total_output_tokens"]
    assert tokens_in and fast_figures["total_cost_usd"] == pytest.approx(
        (tokens_in * 1.0 + tokens_out * 2.0) / 1e6
    )
    # The history keeps each one's identity too, and no secret anywhere.
    _, stored = load_report(pytester.path / ".llmtool" / "history.db", "last")
    assert [m.model_dump(mode="json") for m in stored.metadata.models] == report["metadata"][
        "models"
    ]
    assert _leaks(pytester.path) == []


def test_the_history_and_the_baseline_see_a_changed_entry(
    pytester: pytest.Pytester, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    """Editing the entry behind a name (its temperature, then its base URL) is said by the
    next run's baseline comparison, and the gate does not compare it silently."""
    fast_server, _ = servers
    _project(pytester, servers)
    args = ("--llm-model=fast,careful", "--llm-report=out")
    pytester.runpytest(*args).assert_outcomes(passed=2)
    _project(pytester, servers, temperature=0.5)
    result = pytester.runpytest(*args, "--llm-baseline=last")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"*fast was openai:fast-1 @ {fast_server.openai_url} (temperature 0.25, headers "
            f"X-Route, X-Secret), now openai:fast-1 @ {fast_server.openai_url} (temperature 0.5,*"
        ]
    )
    report = read_report(pytester)
    (changed,) = [c for c in report["baseline"]["models"] if c["identity_change"]]
    assert changed["model"] == "fast"

    # The same server under another address: the base URL changed, the rest did not.
    moved = fast_server.openai_url.replace("127.0.0.1", "localhost")
    text = (pytester.path / "pyproject.toml").read_text().replace(fast_server.openai_url, moved)
    (pytester.path / "pyproject.toml").write_text(text)
    gate = pytester.runpytest(*args, "--llm-baseline=last", "--llm-fail-on-regression")
    assert gate.ret == 7
    gate.stdout.fnmatch_lines(
        [f"*fast was openai:fast-1 @ {fast_server.openai_url} *now*@ {moved}*"]
    )
    gate.stdout.fnmatch_lines(["*(--llm-allow-model-change compares them anyway) (exit status 7)"])


def test_a_models_file_holds_the_same_tables(
    pytester: pytest.Pytester, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    one, _ = servers
    write_dataset(pytester, [ALPHA])
    (pytester.path / "models.toml").write_text(
        f'[models.local]\nprotocol = "openai-responses"\nmodel = "local-7b"\n'
        f'base_url = "{one.openai_url}"\napi_key_env = "{FAST_AUTH}"\n'
    )
    pytester.runpytest("--llm-models=models.toml", "--llm-model=local").assert_outcomes(passed=1)
    assert {(r.protocol, r.body["model"]) for r in one.requests} == {("responses", "local-7b")}


def test_the_command_line_overrides_only_what_it_gives(
    pytester: pytest.Pytester, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    fast_server, careful_server = servers
    _project(pytester, servers)
    result = pytester.runpytest("--llm-model=fast,careful", "--llm-temperature=0.9")
    result.assert_outcomes(passed=2)
    assert {r.body["temperature"] for r in fast_server.requests} == {0.9}
    assert {(r.body["temperature"], r.body["max_tokens"]) for r in careful_server.requests} == {
        (0.9, 777)
    }
    # --llm-base-url sends every model of its family there (the fast server speaks both).
    fast_server.reset()
    careful_server.reset()
    fast_server.script(ALPHA["prompt"], _turns())
    result = pytester.runpytest(
        "--llm-model=careful", f"--llm-base-url=anthropic={fast_server.url}"
    )
    result.assert_outcomes(passed=1)
    assert careful_server.requests == [] and fast_server.requests
    # An ini key counts as given, as its flag does.
    fast_server.reset()
    fast_server.script(ALPHA["prompt"], _turns())
    text = (pytester.path / "pyproject.toml").read_text()
    ini = text.replace("ini_options]\n", "ini_options]\nllm_max_tokens = 55\n")
    (pytester.path / "pyproject.toml").write_text(ini)
    pytester.runpytest("--llm-model=fast").assert_outcomes(passed=1)
    sent = {(r.body["temperature"], r.body.get("max_tokens")) for r in fast_server.requests}
    assert sent == {(0.25, 55)}


def test_a_header_and_a_key_a_server_echoes_reach_no_file(
    pytester: pytest.Pytester, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    """The attack: the provider echoes the header's secret and the key in its error; the
    variables' names say nothing secret, so only the table tells the redactor."""
    fast_server, _ = servers
    _project(pytester, servers)
    fast_server.fail_next(Fault.echo(f"bad header X-Secret: {ROUTE_SECRET}; key {FAST_KEY}"))
    result = pytester.runpytest("--llm-model=fast", "--llm-report=out", "--llm-retries=1")
    assert result.ret != 0
    assert ROUTE_SECRET not in result.stdout.str() + result.stderr.str()
    assert FAST_KEY not in result.stdout.str() + result.stderr.str()
    assert "[redacted ROUTER_AUTH]" in (pytester.path / "out" / "report.json").read_text()
    assert _leaks(pytester.path) == []


# ------------------------------------------------------------------ bad tables, missing keys


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            'protocol = "openai-chat"\nparams = { temprature = 0.5 }',
            "params.temprature: unknown key; did you mean temperature?",
        ),
        (
            'protocol = "openai-chat"\nbase_ur = "http://x"',
            "base_ur: unknown key; did you mean base_url?",
        ),
        (
            'protocol = "openai"',
            "protocol: Input should be 'anthropic', 'openai-chat', 'openai-responses' or 'gemini'*",
        ),
        ('protocol = "anthropic"\nparams = { temperature = "0.5" }', "params.temperature: *"),
        ('protocol = "anthropic"\nparams = { temperature = 3 }', "params.temperature: *2*"),
        ('protocol = "anthropic"\nconcurrency = 0', "concurrency: *1*"),
        ('protocol = "anthropic"\nclient = "azure"', "*client 'azure' takes protocol openai-*"),
        ('protocol = "openai-chat"\nregion = "eu"', "*region is a key of client*"),
        ('protocol = "anthropic"\nheaders = { X-A = 1 }', "headers.X-A: *"),
        ('protocol = "anthropic"\nprice = { input = 1 }', "price.output: *"),
        ('protocol = "anthropic"\napi_key_env = "A KEY"', "api_key_env: *variable*"),
        (
            'protocol = "anthropic"\nparams = { thinking_budget = "lots" }',
            "params.thinking_budget: *",
        ),
        (  # a literal key would reach the identity every report and the history keep
            'protocol = "openai-chat"\nparams = { extra_body = { auth = { Api-Key = "sk-1" } } }',
            "params.extra_body: auth.Api-Key looks like a credential, *header with ${VAR}*",
        ),
    ],
)
def test_a_bad_table_is_a_usage_error_naming_file_table_and_key(
    pytester: pytest.Pytester, entry: str, said: str
) -> None:
    write_dataset(pytester, [ALPHA])
    (pytester.path / "pyproject.toml").write_text(
        f"[tool.pytest.ini_options]\n\n[tool.llmtool.models.fast]\n{entry}\n"
    )
    result = pytester.runpytest("--llm-model=oracle")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pyproject.toml:3 [[]tool.llmtool.models.fast] {said}"])


def test_a_bad_models_file_and_a_missing_key_are_usage_errors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset(pytester, [ALPHA])
    (pytester.path / "m.toml").write_text('[models.x]\nprotocol = "anthropic"\nmodle = "y"\n')
    result = pytester.runpytest("--llm-models=m.toml")
    result.stderr.fnmatch_lines(["*m.toml:1 [[]models.x] modle: unknown key; did you mean model?"])
    result = pytester.runpytest("--llm-models=nowhere.toml")
    result.stderr.fnmatch_lines(["*--llm-models: *nowhere.toml is not a file"])
    (pytester.path / "m.toml").write_text("[models.x\n")
    result = pytester.runpytest("--llm-models=m.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*m.toml: not valid TOML: *line 1*"])

    monkeypatch.delenv("MINE", raising=False)
    monkeypatch.delenv("ROUTE", raising=False)
    (pytester.path / "m.toml").write_text(
        '[models.x]\nprotocol = "openai-chat"\napi_key_env = "MINE"\nheaders = { A = "${ROUTE}" }\n'
    )
    result = pytester.runpytest("--llm-models=m.toml", "--llm-model=x")
    result.stderr.fnmatch_lines(["*--llm-model=x needs MINE in the environment*"])
    monkeypatch.setenv("MINE", "k" * 12)
    result = pytester.runpytest("--llm-models=m.toml", "--llm-model=x")
    result.stderr.fnmatch_lines(
        ["*--llm-model=x: m.toml [[]models.x] headers: ${ROUTE} is not set*"]
    )
    result = pytester.runpytest("--llm-models=m.toml", "--llm-judge-model=x", "--llm-model=oracle")
    result.stderr.fnmatch_lines(["*--llm-judge-model=x: * headers: ${ROUTE} is not set*"])


# ------------------------------------------------------------------ resolving names


def _entries(tmp_path: Path, text: str) -> dict[str, ModelEntry]:
    (tmp_path / "pyproject.toml").write_text(text)
    return read_tables([tmp_path / "pyproject.toml"], None)


def test_a_table_entry_replaces_a_builtin_alias_and_other_names_keep_their_meaning(
    tmp_path: Path,
) -> None:
    table: dict[str, str | ModelEntry] = {
        "haiku": "anthropic:claude-haiku-4-5",
        **_entries(tmp_path, '[tool.llmtool.models.haiku]\nprotocol = "openai-chat"\n'),
    }
    ref = resolve("haiku", table)
    assert (ref.provider, ref.model_id, ref.key_env) == ("openai", "haiku", "OPENAI_API_KEY")
    plain = resolve("openai-responses:gpt-5", table)
    assert (plain.provider, plain.model_id, plain.entry) == ("openai-responses", "gpt-5", None)
    assert resolve("oracle", table).provider == "offline"


def test_the_command_line_is_over_the_entry_only_where_given(tmp_path: Path) -> None:
    (entry,) = _entries(
        tmp_path,
        '[tool.llmtool.models.m]\nprotocol = "anthropic"\nbase_url = "http://a"\n'
        "params = { temperature = 0.1, max_tokens = 50, thinking_budget = 'adaptive' }\n",
    ).values()
    ref = ModelRef("m", entry.provider, entry.model, entry)
    same = overridden(ref, ModelParams(), {})
    assert same.setup == entry
    over = overridden(ref, ModelParams(max_tokens=99), {"openai": "http://b"}).setup
    assert (over.params.temperature, over.params.max_tokens, over.base_url) == (0.1, 99, "http://a")
    assert over.params.thinking_budget == "adaptive"
    assert overridden(ref, ModelParams(), {"anthropic": "http://c"}).setup.base_url == "http://c"


def test_the_models_file_wins_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.llmtool.models.m]\nprotocol = "anthropic"\n')
    (tmp_path / "more.toml").write_text('[models.m]\nprotocol = "openai-chat"\nmodel = "x"\n')
    found = read_tables([tmp_path / "pyproject.toml"], tmp_path / "more.toml")
    assert (found["m"].provider, found["m"].model) == ("openai", "x")
    with pytest.raises(TableError, match=r"comma"):
        _entries(tmp_path, '[tool.llmtool.models."a,b"]\nprotocol = "anthropic"\n')
    with pytest.raises(TableError, match="not valid TOML"):
        _entries(tmp_path, "[tool.llmtool.models.m\n")


# ------------------------------------------------------------------ identity


def _entry(**kw: Any) -> ModelEntry:
    return ModelEntry("openai", "m-1", **{"base_url": "https://u:pw@h.example/v1?k=s", **kw})


def test_the_identity_changes_with_anything_that_decides_the_answers() -> None:
    first = identity("m", _entry())
    assert first.endpoint == "https://h.example/v1" and "pw" not in first.model_dump_json()
    changes = [
        _entry(base_url="https://other.example/v1"),
        _entry(params=ModelParams(top_p=0.5)),
        _entry(params=ModelParams(keep_reasoning=False)),
        _entry(params=ModelParams(extra_body={"x": 1})),
        _entry(headers=(("X-A", "1"),)),
        ModelEntry("openai-responses", "m-1", base_url="https://h.example/v1"),
        ModelEntry("openai", "m-2", base_url="https://h.example/v1"),
        _entry(client="azure", api_version="2025-01-01"),
    ]
    digests = {identity("m", e).digest for e in changes}
    assert first.digest not in digests and len(digests) == len(changes)
    # Neither the key variable, nor a header's value, nor the URL's password is part of it.
    assert identity("m", _entry(api_key_env="OTHER")).digest == first.digest
    assert identity("m", _entry(base_url="https://h.example/v1")).digest == first.digest
    secret = identity("m", _entry(headers=(("X-A", "secret-value-123"),)))
    assert "secret-value-123" not in secret.model_dump_json()
    assert identity("m", _entry(headers=(("X-A", "other-value-456"),))).digest == secret.digest
    dropped = identity(
        "m", ModelEntry("anthropic", "m-1", params=ModelParams(keep_reasoning=False))
    )
    assert dropped.reasoning == "dropped" and "reasoning dropped" in baseline.describe(dropped)
    assert identity("m", ModelEntry("anthropic", "m-1")).reasoning == "kept"
    # A Responses model's reasoning goes back only when it reasons (a reasoning model, an effort).
    assert identity("m", ModelEntry("openai-responses", "gpt-4.1")).reasoning == "dropped"
    assert identity("m", ModelEntry("openai-responses", "gpt-5.2")).reasoning == "kept"
    assert identity("m", _entry(params=ModelParams(keep_reasoning=False))).reasoning is None


def _change() -> BaselineChange:
    return BaselineChange(
        model="m",
        tasks=1,
        baseline_pass_rate=1.0,
        current_pass_rate=1.0,
        regressed=False,
        verdict="",
    )


def test_the_baseline_says_a_new_parameter_and_the_gate_refuses_it() -> None:
    then = identity("m", _entry())
    now = identity("m", _entry(params=ModelParams(reasoning_effort="high")))
    change = baseline._identity(_change(), now, then)
    assert change.identity_change == (
        "m was openai:m-1 @ https://h.example/v1, now openai:m-1 @ https://h.example/v1 "
        "(reasoning effort high)"
    )
    comparison = baseline.BaselineComparison(ref="last", source="x", models=[change], gate=True)
    assert baseline.changed_identity(comparison)
    # A change the words do not show (a header's name) is still said, by its digests.
    headed = baseline._identity(_change(), identity("m", _entry(headers=(("X", "1"),))), then)
    assert headed.identity_change and "headers X" in headed.identity_change
    # A baseline from before the table (no digest) is compared on what it has, and says so.
    old = then.model_copy(update={"digest": None, "protocol": None, "headers": []})
    same = baseline._identity(_change(), then, old)
    assert same.identity_change is None and same.identity_unknown == ["client and headers"]
    assert "compared the rest" in "\n".join(
        baseline.notes(comparison.model_copy(update={"models": [same]}))
    )
    moved = baseline._identity(_change(), identity("m", _entry(base_url="http://x/v1")), old)
    assert moved.identity_change is not None


def test_a_changed_entry_changes_the_models_digest(tmp_path: Path) -> None:
    def digest(text: str) -> str:
        table = _entries(tmp_path, "[tool.llmtool.models.m]\n" + text)
        settings = Settings(
            models=(resolve("m", table),),
            max_turns=1,
            report_dir=None,
            dataset_patterns=(),
            aliases=table,
        )
        return model_digests(settings)["m"]

    first = digest('protocol = "openai-chat"\nbase_url = "http://a/v1"\n')
    assert digest('protocol = "openai-chat"\nbase_url = "http://b/v1"\n') != first
    assert (
        digest('protocol = "openai-chat"\nbase_url = "http://a/v1"\nparams = { top_p = 0.5 }\n')
        != first
    )
    assert (
        digest(
            'protocol = "openai-chat"\nbase_url = "http://a/v1"\n'
            "price = { input = 1.0, output = 1.0 }\n"
        )
        == first
    )


# ------------------------------------------------------------------ clients


def test_models_share_a_client_only_when_endpoint_key_and_headers_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("K1", "key-one-123456")
    monkeypatch.setenv("H", "header-value-1")
    pool = ClientPool({}, concurrency=8)
    a = ModelEntry("openai", "a", base_url="http://127.0.0.1:9/v1", api_key_env="K1")
    b = ModelEntry("openai-responses", "b", base_url="http://127.0.0.1:9/v1", api_key_env="K1")
    c = ModelEntry(
        "openai", "c", base_url="http://127.0.0.1:9/v1", api_key_env="K1", headers=(("X", "${H}"),)
    )
    assert pool.client(a) is pool.client(b)
    assert pool.client(c) is not pool.client(a)
    assert pool.client(a).api_key == "key-one-123456"
    assert pool.client(c).default_headers["X"] == "header-value-1"
    # A model with its own concurrency has a limiter of its own, bounded by it.
    own = ModelEntry(
        "openai", "d", base_url="http://127.0.0.1:9/v1", api_key_env="K1", concurrency=1
    )
    limiter = pool.limiter_for(own, "d")
    assert limiter is not None and limiter.ceiling == 1 and limiter is not pool.limiter_for(a, "a")
    assert "key-one" not in limiter.name
    azure = ModelEntry(
        "openai",
        "dep",
        base_url="https://r.example",
        client="azure",
        api_version="2024-10-21",
        api_key_env="K1",
    )
    import anthropic
    import openai

    assert isinstance(pool.client(azure), openai.AsyncAzureOpenAI)
    # Bedrock's and Vertex's own clients, built offline (their calls need the platforms).
    bedrock = ModelEntry("anthropic", "m", client="bedrock", region="eu-west-1", concurrency=2)
    assert isinstance(pool.client(bedrock), anthropic.AsyncAnthropicBedrock)
    assert "eu-west-1" in str(pool.client(bedrock).base_url)
    vertex = ModelEntry("anthropic", "m", client="vertex", region="us-east5", project="p")
    assert isinstance(pool.client(vertex), anthropic.AsyncAnthropicVertex)
    assert pool.limiter_for(bedrock, "b") is not None and pool.limiter_for(vertex, "v") is not None
    asyncio.run(pool.aclose())


def test_a_client_whose_extra_is_missing_is_a_usage_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from pytest_llmtool.agents import models

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "boto3" else real(name, *a)
    )
    entry = ModelEntry("anthropic", "claude", client="bedrock", region="us-east-1", source="t [m]")
    assert models.problems("m", entry, {}) == [
        "t [m] client = 'bedrock' needs boto3, which is not installed: "
        "pip install 'anthropic[bedrock]'"
    ]
    assert entry.key_env is None and entry.credentials == "your AWS credentials"


def test_a_protocols_parameter_problems_name_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_llmtool.agents import models, openai_chat

    monkeypatch.setattr(openai_chat, "param_problems", lambda params: ["thinking_budget: not here"])
    entry = ModelEntry("openai", "x", source="pyproject.toml [tool.llmtool.models.x]")
    assert models.problems("x", entry, {}) == [
        "pyproject.toml [tool.llmtool.models.x] params: thinking_budget: not here"
    ]
