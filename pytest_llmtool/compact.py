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


def _shared(value: Any) -> Any:
    return sys.intern(value) if type(value) is str and len(value) <= SHORT else value


class ReportSharing:
    """Registered on the reporting process; acts on the reports xdist workers send."""

    def __init__(self) -> None:
        # An item's first report (setup) until its teardown report arrives.
        self._first: dict[str, pytest.TestReport] = {}
        # One copy of each (name, value) property pair: most recur across items.
        self._pairs: dict[tuple[Any, Any], tuple[Any, Any]] = {}

    def _pair(self, name: Any, value: Any) -> tuple[Any, Any]:
        pair = (_shared(name), _shared(value))
        try:
            return self._pairs.setdefault(pair, pair)
        except TypeError:  # an unhashable value (a list): kept as it is
            return pair

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
            for name in ("keywords", "user_properties", "location"):
                if getattr(report, name) == getattr(first, name):
                    setattr(report, name, getattr(first, name))
        for name in ("outcome", "when", "worker_id", "testrun_uid"):
            value = report.__dict__.get(name)
            if type(value) is str:
                setattr(report, name, sys.intern(value))
        if report.when == "teardown":
            self._first.pop(report.nodeid, None)
