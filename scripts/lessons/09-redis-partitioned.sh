#!/usr/bin/env bash
# Lesson 9: the `holder-partitioned` row of `make chaos` for redis, fencing on and off:
# once 10 units are sold and 8080 holds, its nemesis cuts it off from the lock Redis for
# 1.5 s. The script starts its own cluster.
# Needs: make cluster's servers
CHAOS_FAULTS="holder-partitioned" scripts/chaos.sh 1 redis
echo "scripts/chaos.sh exited with code $?"
run=.run/logs/chaos-holder-partitioned-redis-fencing-off-1
echo "--- fencing off: 8080's nemesis"
cat $run-nemesis-8080.log
echo "--- fencing off: what 8080 logged"
cut -c1-220 $run-8080.log
