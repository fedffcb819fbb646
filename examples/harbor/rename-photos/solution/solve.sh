#!/bin/bash
for f in /app/photos/*.jpeg; do
    mv -- "$f" "${f%.jpeg}.jpg"
done
