"""Optimization tasks: an agent makes a Python project faster, scored as FC-Eval scores it."""
