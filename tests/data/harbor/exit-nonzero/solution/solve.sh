#!/bin/bash
mkdir -p /app/out
