"""pytest's own reports, kept small on the reporting process of a very large run.

pytest keeps every report (setup, call and teardown of every item) until the end of the
session, for its summary. Under xdist each report arrives as a fresh copy of everything in
it: an item's keywords, location and `user_properties` (our per-task metrics, a dozen
pairs) come three times, and every name in them is a new string. At 100k items that is most
of the controller's memory. So, before any other plugin sees a report, its values are made
to share the equal ones of the item's first report and the common strings are interned.
The values stay equal; only their identity changes: an item's reports share one keywords
dict and one `user_properties` list (pytest and the plugins we know read them and never
edit a report's after it is made).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

# A string longer than this is likely unique (an error message, captured output): not
# worth a place in the interned table.
SHORT = 200
SCALARS = (str, int, float, bool, type(None))


def _shared(value: Any) -> Any:
    return sys.intern(value) if type(value) is str and len(value) <= SHORT else value


def _exact(value: Any) -> tuple[type, str]:
    """What tells two values apart even where `==` does not: `1`, `True` and `1.0` are equal,
    and so are `0.0` and `-0.0`, but JUnit writes each its own way."""
    return type(value), repr(value)


def _properties(report: pytest.TestReport) -> list[tuple[Any, tuple[type, str]]]:
    return [(name, _exact(value)) for name, value in report.user_properties]


class ReportSharing:
    """Registered on the reporting process; acts on the reports xdist workers send."""

    def __init__(self) -> None:
        # An item's first report (setup) until its teardown report arrives.
        self._first: dict[str, pytest.TestReport] = {}
        # One copy of each (name, value) property pair with a short scalar value: most recur
        # across items.
        self._pairs: dict[tuple[Any, tuple[type, str]], tuple[Any, Any]] = {}

    def _pair(self, name: Any, value: Any) -> tuple[Any, Any]:
        pair = (_shared(name), _shared(value))
        if type(name) is not str or type(value) not in SCALARS or len(repr(value)) > SHORT:
            return pair
        return self._pairs.setdefault((pair[0], _exact(value)), pair)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "node", None) is None:
            return  # made in this process: its values are the item's own, shared already
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
