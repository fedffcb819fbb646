"""Inputs: reading what a task author wrote, which may be hostile: bounded YAML and lines,
the checks every file and path from a task goes through before use, and the folders a task
names for its sandbox (never collected by the host).

May import: nothing else of the plugin (it sits at the bottom, beside the record).
"""
