#!/bin/bash
# Reward 1 when /app/answer.txt holds the right count, else 0 (Harbor reads reward.txt).
if [ "$(tr -d ' \n' < /app/answer.txt 2>/dev/null)" = "3" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
