"""Inputs: reading what a task author wrote, which may be hostile: bounded YAML and the
checks every file and path from a task goes through before use.

May import: nothing else of the plugin (it sits at the bottom, beside the record).
"""
