#!/usr/bin/env bash
# Lesson 3: the holder stopped for three leases, with fencing off, then on. Two redis
# instances, a lease of 500 ms, every sale lingering 50 ms before its write; once 10
# of 100 units are sold and 8080 holds the lock, 8080 is stopped for 1.5 s.
# Needs: redis
for fencing in off on; do
  flags=(--lock redis --fencing "$fencing" --lock-ttl-ms 500 --chaos-pause-before-write-ms 50 --acquire-timeout-ms 30000)
  seckill serve --port 8080 "${flags[@]}" & holder=$!
  seckill serve --port 8090 "${flags[@]}" 2>/dev/null & other=$!
  sleep 1
  generation=$(redis-cli get stock:generation)
  loadtest --users 200 --stock 100 & crowd=$!
  until [ "$(redis-cli get stock:generation)" != "$generation" ] && [ "$(redis-cli get lucky)" -ge 10 ]; do sleep 0.01; done
  until redis-cli get lock:stock | grep -q '^seckill-8080:'; do sleep 0.01; done
  echo "--- 8080 holds the lock: stopped for 1.5 s (fencing $fencing)"
  kill -STOP $holder; sleep 1.5; kill -CONT $holder
  wait $crowd; echo "loadtest exited with code $?"
  kill $holder $other; wait
done
