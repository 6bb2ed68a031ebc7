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
echo "--- fencing off: from the stock Redis's grant log, in the order logged: 8080's grants begun"
echo "--- within 100 ms of the cut, and the first grant of 8090 after it"
cut_at=$(sed -n 's/.* at \([0-9]*\) ms (unix): Partition.*/\1/p' $run-nemesis-8080.log | head -n 1)
redis-cli -p 6479 lrange stock:grants 0 -1 | jq -c -s --argjson at "$cut_at" '
  (map(select(.instance == "seckill-8090" and .granted_at_us / 1000 > $at)) | min_by(.granted_at_us)) as $next
  | .[] | select(. == $next or (.instance == "seckill-8080" and (.granted_at_us / 1000 - $at | fabs) < 100))'
