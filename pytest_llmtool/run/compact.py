"""pytest's own reports, kept small on the reporting process of a very large run.

pytest keeps every report (setup, call and teardown of every item) until the end of the
session, for its summary. Each report has its own copy of the item's keywords (a dict) and
`user_properties` (a list: our per-task metrics, a dozen pairs); under xdist it arrives as a
fresh copy of everything in it, every name a new string. At 100k items that is most of the
controller's memory. So, before any other plugin sees a report, its values are made to share
the equal ones of the item's first report, the common strings are interned, and the
property pairs that recur across items (a model's name, a category, `passed: True`) are one
tuple each. The values stay equal; only their identity changes: an item's reports share one
keywords dict and one `user_properties` list (pytest and the plugins we know read them and
never edit a report's after it is made).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Iterable
from typing import Any

import pytest

SHARING_KEY = pytest.StashKey["ReportSharing"]()
# A string longer than this is likely unique (an error message, captured output): not
# worth a place in the interned table.
SHORT = 200
# Scalars whose equal values of one type are the same value (not so `float`: -0.0 and NaN).
_EXACT = frozenset({str, int, bool, type(None)})


def _shared(value: Any) -> Any:
    return sys.intern(value) if type(value) is str and len(value) <= SHORT else value


def _exact(value: Any) -> tuple[type, str]:
    """What tells two values apart even where `==` does not: `1`, `True` and `1.0` are equal,
    and so are `0.0` and `-0.0`, but JUnit writes each its own way."""
    return type(value), repr(value)


def _properties(report: pytest.TestReport) -> list[tuple[Any, tuple[type, str]]]:
    return [(name, _exact(value)) for name, value in report.user_properties]


def _key(name: Any, value: Any) -> tuple[Any, ...] | None:
    """A property pair's place in the shared table, cheaper than `_exact`: a scalar is told
    apart by its type and value, a float by its value and sign (`0.0 == -0.0`); None for a
    pair not worth sharing (a long or non-scalar value, a name that is not text) and for
    NaN, never equal to itself."""
    if type(name) is not str:
        return None
    kind = type(value)
    if kind is float:
        return None if value != value else (name, value, math.copysign(1.0, value))
    if kind in _EXACT and (kind is not str or len(value) <= SHORT):
        return (name, kind, value)
    return None


class ReportSharing:
    """Registered on the reporting process; acts on its own items' reports and on those xdist
    workers send."""

    def __init__(self) -> None:
        # An item's first report (setup) until its teardown report arrives.
        self._first: dict[str, pytest.TestReport] = {}
        # One copy of each (name, value) property pair with a short scalar value: most recur
        # across items.
        self._pairs: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def _share(self, pair: tuple[Any, Any]) -> tuple[Any, Any]:
        key = _key(*pair)
        return pair if key is None else self._pairs.setdefault(key, pair)

    def _pair(self, name: Any, value: Any) -> tuple[Any, Any]:
        return self._share((_shared(name), _shared(value)))

    def pairs(self, properties: Iterable[tuple[str, Any]]) -> list[tuple[Any, Any]]:
        """An item's properties as it adds them, each recurring pair shared with the other
        items' (this process's items: their reports hold the item's own pairs)."""
        return [self._share(pair) for pair in properties]

    def _share_local(self, report: pytest.TestReport) -> None:
        """A report made in this process: its keywords and properties are copies of its
        item's, the pairs themselves the item's own, so identity tells them apart cheaply."""
        first = self._first.get(report.nodeid)
        if first is None:
            self._first[report.nodeid] = report
        else:
            if report.keywords == first.keywords:
                report.keywords = first.keywords
            mine, theirs = report.user_properties, first.user_properties
            if len(mine) == len(theirs) and all(map(operator.is_, mine, theirs)):
                report.user_properties = theirs
        if report.when == "teardown":
            self._first.pop(report.nodeid, None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "node", None) is None:
            self._share_local(report)
            return
        first = self._first.get(report.nodeid)
        if first is None:
            report.keywords = {_shared(k): v for k, v in report.keywords.items()}
            report.user_properties = [
                self._pair(name, value) for name, value in report.user_properties
            ]
            path, line, domain = report.location
            report.location = (_shared(path), line, domain)
            self._first[report.nodeid] = report
        else:
            if report.keywords == first.keywords:  # names, each with the value 1
                report.keywords = first.keywords
            if report.location == first.location:
                report.location = first.location
            if _properties(report) == _properties(first):
                report.user_properties = first.user_properties
        for name in ("outcome", "when", "worker_id", "testrun_uid"):
            value = report.__dict__.get(name)
            if type(value) is str:
                setattr(report, name, sys.intern(value))
        if report.when == "teardown":
            self._first.pop(report.nodeid, None)
