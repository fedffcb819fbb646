"""Secrets never leave the run: every configured key is cut out of what the plugin writes.

A provider may echo the API key in an error message, an external agent may print its own;
from there it would reach the item's failure text, its result, the journal, JUnit, the
report files and the terminal. `redact_report` is the one choke point every item report
passes through (its failure text, captured output, properties and result), and the report
writers redact once more what they write.

The secrets are the values of the environment variables the plugin reads keys from
(`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`), of any variable whose name says it holds a secret
(`*_KEY`, `*TOKEN`, `*SECRET`, `*PASSWORD`), of those `--llm-agent-env` passes to an
external agent, and the passwords and query keys of the base URLs. Values shorter than
`MIN_SECRET` characters are left alone: cutting every "true" or "1" out of a report would
destroy it and hide nothing.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

KEY_ENVS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
URL_ENVS = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
MIN_SECRET = 8
SECRET_PARAM = re.compile(r"key|token|secret|password|sig", re.IGNORECASE)


class Redactor:
    """Replaces each secret by `[redacted NAME]`, longest first."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        pairs: dict[str, str] = {}
        for name, value in secrets.items():
            if len(value) >= MIN_SECRET:
                pairs.setdefault(value, name)
                escaped = json.dumps(value)[1:-1]  # as it appears inside JSON text
                pairs.setdefault(escaped, name)
        self._pairs = sorted(pairs.items(), key=lambda pair: -len(pair[0]))

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        names: Iterable[str] = (),
        urls: Mapping[str, str] | None = None,
    ) -> Redactor:
        """The secrets of `environ` (the process's), the variables `names`, and the passwords
        and query keys in the base URLs (the `*_BASE_URL` variables' and `urls`,
        `--llm-base-url`'s)."""
        environ = os.environ if environ is None else environ
        wanted = {*KEY_ENVS, *names, *(n for n in environ if SECRET_NAME.search(n))}
        secrets = {name: environ[name] for name in sorted(wanted) if environ.get(name)}
        given = {**{n: environ[n] for n in URL_ENVS if environ.get(n)}, **(urls or {})}
        for name, url in given.items():
            parts = urllib.parse.urlsplit(url)
            if parts.password:
                secrets[f"{name} password"] = parts.password
            # A key passed in the query (`?api-key=`, `?key=`, `?token=`), not `api-version`.
            for param, value in urllib.parse.parse_qsl(parts.query):
                if SECRET_PARAM.search(param):
                    secrets[f"{name} {param}"] = value
        return cls(secrets)

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __call__(self, text: str) -> str:
        for secret, name in self._pairs:
            if secret in text:
                text = text.replace(secret, f"[redacted {name}]")
        return text


def _value(redact: Redactor, value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


def redact_report(redact: Redactor, report: pytest.TestReport, attrs: Iterable[str]) -> None:
    """Cut the secrets out of everything an item report carries to the writers: its failure
    text (made plain text when it held one), captured sections, user properties, pytest-html
    extras, and the plugin's `attrs` (JSON text or dicts of text)."""
    if not redact:
        return
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason), kept a tuple
        path, line, reason = longrepr
        report.longrepr = (path, line, redact(reason))
    elif longrepr is not None:
        text = longrepr if isinstance(longrepr, str) else str(longrepr)
        if redact(text) != text:
            report.longrepr = redact(text)
    report.sections = [(title, redact(content)) for title, content in report.sections]
    # A pair with nothing to cut stays the same tuple (`run/compact.py` shares it).
    report.user_properties = [
        pair if (value := _value(redact, pair[1])) is pair[1] else (pair[0], value)
        for pair in report.user_properties
    ]
    extras = getattr(report, "extras", None)
    if isinstance(extras, list):
        for extra in extras:
            if isinstance(extra, dict) and isinstance(extra.get("content"), str):
                extra["content"] = redact(extra["content"])
    for attr in attrs:
        carried = getattr(report, attr, None)
        if isinstance(carried, dict):
            setattr(report, attr, {k: _value(redact, v) for k, v in carried.items()})
