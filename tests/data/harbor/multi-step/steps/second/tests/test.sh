#!/bin/bash
# The first step's tests are gone: each step gets its own /tests.
[ -e /tests/first-only ] && { echo 0 > /logs/verifier/reward.txt; exit 0; }
bash /tests/check.sh /app/second.txt two
