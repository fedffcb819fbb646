"""Harbor tasks (Terminal-Bench 2.x, FormulaCode's datasmith template, ot-harness): a
directory with `task.toml` is a task, run in its own container as Harbor runs a trial.

`config.py` is task.toml's model; `load.py` finds tasks and datasets and checks them;
`trial.py` runs one trial (environment, agent, verifier, steps); `reward.py` reads the
verifier's reward files; `summary.py` and `report.py` aggregate and show the results;
`result_json.py` writes Harbor's `result.json` per item.
"""
