"""Repository-wide pytest configuration: the plugin tests drive pytest through pytester."""

pytest_plugins = ["pytester"]
