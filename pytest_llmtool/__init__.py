"""pytest-llmtool: LLM tool-use evaluations as ordinary pytest items.

May import: nothing (pytest loads this package in every run; `__version__` is read from
the installed metadata when first asked for, not at import).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("pytest-llmtool")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found
