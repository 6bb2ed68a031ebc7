#!/usr/bin/env bash
# Lesson 2: the watchdog. A lease of 1 s, one buyer whose sale lingers 3 s before its
# write, and the lock key's remaining lease read every half second.
# Needs: redis
seckill serve --port 8080 --lock redis --lock-ttl-ms 1000 --chaos-pause-before-write-ms 3000 &
sleep 1   # until the instance listens
curl -s -X POST -H 'content-type: application/json' -d '{"stock": 300}' localhost:8080/stock/reset; echo
{ curl -s localhost:8080/stock/reduce; echo; } &   # the buyer; its answer lands among the lines below
for i in $(seq 8); do
  sleep 0.5
  echo "t+$((i * 500))ms  pttl $(redis-cli pttl lock:stock)  holder $(redis-cli get lock:stock)"
done
wait %2
kill %1; wait
