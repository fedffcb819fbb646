#!/bin/bash
# reward.json: `reward` 1 when /app/numbers.txt is 1..$WANTED; `lines` the lines found;
# `style` a fixed 0.5; `as_verifier_user` 1 when this runs as [verifier].user.
lines=$(wc -l < /app/numbers.txt 2>/dev/null || echo 0)
reward=0
[ "$(cat /app/numbers.txt 2>/dev/null)" = "$(seq 1 "$WANTED")" ] && reward=1
user=0
[ "$(id -un)" = nobody ] && user=1
printf '{"reward": %s, "lines": %s, "style": 0.5, "as_verifier_user": %s}\n' \
  "$reward" "$lines" "$user" > /logs/verifier/reward.json
