#!/bin/bash
# The status is the ninth field (a path such as /404.html must not count).
awk '$9 == 404' /app/access.log | wc -l > /app/answer.txt
