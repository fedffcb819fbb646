#!/bin/bash
bash /tests/check.sh /app/first.txt one
