#!/bin/bash
echo one > /app/first.txt
