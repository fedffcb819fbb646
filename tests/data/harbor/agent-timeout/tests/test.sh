#!/bin/bash
# 1 when the work is there and the sleep was cut short (nothing written after it).
if [ -e /app/done ] && [ ! -e /app/late ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
