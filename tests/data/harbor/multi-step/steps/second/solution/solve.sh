#!/bin/bash
cp /app/seed.txt /app/second.txt
