"""Test data, not tests: `tests/test_ax_eval_done.py` copies this folder and runs it through
pytester. Ignored here so that a run of the project's own tests never collects it."""

collect_ignore_glob = ["*"]
