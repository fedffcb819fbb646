#!/bin/bash
# reward: 1 when every .jpeg became a .jpg and nothing else changed; renamed: the share done.
cd /app/photos || exit 1
renamed=0
for name in beach "city at night"; do
    [ -f "$name.jpg" ] && [ ! -e "$name.jpeg" ] && renamed=$((renamed + 1))
done
others=0
[ -f cat.jpg ] && [ -f notes.txt ] && others=1
reward=0
[ "$renamed" = 2 ] && [ "$others" = 1 ] && [ "$(ls | wc -l)" = 4 ] && reward=1
printf '{"reward": %s, "renamed": %s, "others_kept": %s}\n' \
    "$reward" "$(awk "BEGIN {print $renamed / 2}")" "$others" > /logs/verifier/reward.json
