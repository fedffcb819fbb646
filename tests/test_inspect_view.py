"""`--llm-inspect-log` logs in Inspect's own viewer: a static bundle in headless Chromium.

A run of the shared bash tasks by the offline oracle and by haiku (answered by the fake LLM
server, so tokens have numbers) writes its logs; `inspect view bundle` makes the viewer a
static site beside them, served from 127.0.0.1 (its scripts are ES modules, which Chromium
does not load from file:// URLs). What is checked is what a reader sees: the sample list with
our task ids and scores, and a sample's conversation with its tool calls and their output;
and that the page asked nothing of any other host.

Skipped when selenium, Chromium or chromedriver is missing, unless
`LLMTOOL_REQUIRE_BROWSER=1` (CI sets it). Screenshots go to `$LLMTOOL_ARTIFACTS/browser/`, or
`.artifacts/browser/` of the repository: `inspect-samples.png`, `inspect-sample.png`.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, write_dataset

pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed")

CHROMIUM = Path(os.environ.get("LLMTOOL_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("LLMTOOL_CHROMEDRIVER", "/usr/bin/chromedriver"))
REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 30.0  # seconds any one wait may take; nothing is timed
# haiku's tokens per call: each task's total is its input plus output over two calls.
INPUT, OUTPUT = 1_000, 20


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("LLMTOOL_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LLMTOOL_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _artifacts() -> Path:
    root = os.environ.get("LLMTOOL_ARTIFACTS")
    path = (Path(root) if root else REPO / ".artifacts") / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Files(http.server.SimpleHTTPRequestHandler):
    """A static host, as a web server is: files, with byte ranges (the viewer reads a log's
    zip directory from its end)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        path = Path(self.translate_path(self.path))
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted is None or not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        start = int(wanted[1])
        end = min(int(wanted[2]) if wanted[2] else len(data) - 1, len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return io.BytesIO(data[start : end + 1])


@pytest.fixture
def bundle(pytester: pytest.Pytester, server: FakeLLMServer) -> Path:
    """The viewer bundled with the logs of an oracle and a haiku run of `TASKS`."""
    write_dataset(pytester, TASKS)
    for task in TASKS:
        solution = task.get("solution") or []
        commands = [solution] if isinstance(solution, str) else solution
        server.script(
            task["prompt"],
            [
                Turn(tool_calls=commands, input_tokens=INPUT, output_tokens=OUTPUT),
                Turn(text="Done.", input_tokens=INPUT, output_tokens=OUTPUT),
            ]
            if commands
            else [Turn(text="Nothing to do.", input_tokens=INPUT, output_tokens=OUTPUT)],
        )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--llm-model=oracle,haiku", "--llm-inspect-log=logs"
    )
    result.assert_outcomes(passed=5, failed=2, skipped=1)
    out = pytester.path / "bundle"
    subprocess.run(
        [sys.executable, "-m", "inspect_ai", "view", "bundle", "--log-dir", "logs",
         "--output-dir", str(out)],
        cwd=pytester.path, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


@pytest.fixture
def site(bundle: Path) -> Iterator[str]:
    """The bundle served from 127.0.0.1; its URL."""
    handler = functools.partial(_Files, directory=str(bundle))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def driver() -> Iterator[Any]:
    """Headless Chromium through Debian's chromedriver (no Selenium Manager, no network)."""
    if importlib.util.find_spec("selenium") is None:
        _unavailable("selenium is not installed (pip install -e '.[dev]')")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            _unavailable(f"{path} is missing (apt-get install {package})")
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    try:
        chrome = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except WebDriverException as error:
        _unavailable(f"Chromium did not start: {error.msg}")
    try:
        yield chrome
    finally:
        chrome.quit()


def _text(driver: Any) -> str:
    text: str = driver.execute_script("return document.body ? document.body.innerText : ''")
    return text


def _wait_for(driver: Any, ready: Callable[[str], bool], what: str) -> str:
    """The page's text once `ready` holds of it."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    try:
        WebDriverWait(driver, TIMEOUT, poll_frequency=0.1).until(lambda d: ready(_text(d)))
    except TimeoutException:
        pytest.fail(f"waited {TIMEOUT:g} s for {what}; the page reads:\n{_text(driver)}")
    return _text(driver)


def _elsewhere(driver: Any, site: str) -> list[str]:
    """What the page fetched from anywhere but the site."""
    names: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
    )
    return [n for n in names if not n.startswith(site + "/")]


def test_the_viewer_shows_our_samples_their_scores_and_conversations(
    driver: Any, site: str, bundle: Path
) -> None:
    driver.get(f"{site}/index.html#/samples/")
    ids = ("alpha", "beta", "gamma", "delta")
    # oracle: alpha, beta, gamma (delta has no reference: skipped); haiku: all four.
    text = _wait_for(
        driver,
        lambda t: "7 rows" in t and all(re.search(rf"^{i}$", t, re.M) for i in ids),
        "the sample list",
    )
    lines = text.splitlines()
    assert lines.count("offline/oracle") == 3
    assert lines.count("anthropic/claude-haiku-4-5") == 4
    assert "CHECKS" in lines and "WEIGHTED" in lines
    assert "Copy /in/a.txt to /out/b.txt and print its line count." in lines
    assert "exit_code:0, file_exists:/out/b.txt, stdout_contains:2" in lines
    assert f"{2 * (INPUT + OUTPUT):,}" in lines  # a haiku task's tokens over its two calls
    driver.save_screenshot(str(_artifacts() / "inspect-samples.png"))
    assert not _elsewhere(driver, site)

    # One sample: the user's prompt, each bash call with its command and output, the reply.
    [log] = [p.name for p in (bundle / "logs").glob("*_bash_haiku.eval")]
    driver.get(f"{site}/index.html#/samples/{log}/sample/alpha/1/")
    # The header's ANSWER says "Done." before the conversation is drawn: wait for the reply.
    text = _wait_for(driver, lambda t: "ASSISTANT" in t.splitlines(), "the sample's conversation")
    lines = text.splitlines()
    assert "Sample alpha (Epoch 1)" in lines
    assert "anthropic/claude-haiku-4-5" in lines
    assert lines.count("Copy /in/a.txt to /out/b.txt and print its line count.") >= 2
    assert 'commands: "mkdir -p /out && cp /in/a.txt /out/b.txt"' in lines
    assert lines[lines.index('commands: "wc -l < /out/b.txt"') + 1] == "2"
    assert {"USER", "ASSISTANT", "CHECKS", "C"} <= set(lines)
    driver.save_screenshot(str(_artifacts() / "inspect-sample.png"))
    assert not _elsewhere(driver, site)

    # The log's sample list: its ANSWER column holds each sample's last reply.
    driver.get(f"{site}/index.html#/logs/{log}/samples")
    text = _wait_for(driver, lambda t: "ANSWER" in t.splitlines(), "the log's ANSWER column")
    lines = text.splitlines()
    assert lines.count("Done.") == 3 and "Nothing to do." in lines
    assert not _elsewhere(driver, site)
