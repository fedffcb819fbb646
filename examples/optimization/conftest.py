# The optimization example's project is an ordinary Python package with its own tests and
# benchmarks, and solutions/ holds patches: neither is part of `pytest examples/`.
collect_ignore = ["project", "solutions"]
