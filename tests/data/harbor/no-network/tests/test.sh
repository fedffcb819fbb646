#!/bin/bash
# 1 only when the sole interface is lo and the routing table is empty.
interfaces=$(ls /sys/class/net | tr '\n' ' ')
routes=$(tail -n +2 /proc/net/route | wc -l)
echo "interfaces: $interfaces; routes: $routes"
if [ "$interfaces" = "lo " ] && [ "$routes" = 0 ]; then echo 1; else echo 0; fi \
  > /logs/verifier/reward.txt
