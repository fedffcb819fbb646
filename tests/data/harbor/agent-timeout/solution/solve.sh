#!/bin/bash
touch /app/done
sleep 60
touch /app/late
