#!/bin/bash
if [ -d /app/out ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
echo "the verifier exits 3 on purpose"
exit 3
