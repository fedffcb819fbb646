#!/bin/bash
# Shared by both steps' test.sh: `check FILE TEXT` writes reward.txt.
if [ "$(cat "$1" 2>/dev/null)" = "$2" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
