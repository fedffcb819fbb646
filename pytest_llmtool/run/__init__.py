"""A run's lifecycle under pytest: items and files, the run's state, the controller and
worker roles (xdist included), the journal and resume, the output paths and the report
directory's lock, signals, remote hosts, the pytest-html hooks, and the private pytest and
xdist attributes behind one module (`compat`).

May import: every package below it (the record, `inputs`, `stats`, `sandbox`, `agents`,
`settings`, `report`, `kinds`, `gaps`, `history`); the entry points import it.
"""
