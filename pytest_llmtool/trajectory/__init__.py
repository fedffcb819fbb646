"""Trajectory assertions: one vocabulary (`used`, `forbidden`, `order`, `args`, `max_calls`,
`max_turns`, `no_loop`, `all_ok`) over the structured calls an agent's run recorded, shared
by every kind (bash checks, scenario gates, optimization and Harbor task files). Pure: no
pytest, no I/O.

May import: the record (`records`) and `inputs` (the JSONPath assertion forms).
"""
