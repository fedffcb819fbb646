#!/bin/bash
# Runs in the working directory before the second step's agent.
echo two > /app/seed.txt
