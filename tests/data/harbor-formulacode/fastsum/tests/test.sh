#!/bin/bash
# FormulaCode's verifier, as datasmith's template runs it, small: the patch against the
# baseline, the tamper precheck, the project's tests, the snapshots, the benchmarks timed
# for the baseline, the agent and the reference, and the reward files.
mkdir -p /logs/verifier /logs/artifacts
cd /app || exit 1
python3 /tests/fc_verify.py --base base --repo /app --oracle /tests/oracle \
    --artifacts /logs/artifacts --out /logs/verifier
