"""Repository-wide pytest configuration: the plugin tests drive pytest through pytester."""

import contextlib
import importlib

pytest_plugins = ["pytester"]

# pytester drops the modules an in-process run imported first, but the SDKs' HTTP layer caches
# its transport's exception classes on first use: a module re-imported by a later run would
# raise classes the cache no longer recognises. Importing the transport here keeps one copy.
for _name in ("httpcore2", "httpcore"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)
