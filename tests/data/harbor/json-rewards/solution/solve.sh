#!/bin/bash
# LINES comes from [solution].env, TASK_ENV from [environment].env.
[ "$TASK_ENV" = set ] || exit 1
seq 1 "$LINES" > numbers.txt
