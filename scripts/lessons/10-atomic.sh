#!/usr/bin/env bash
# Lesson 10: the same crowd with no lock at all (one Lua script reads, checks and
# writes), then with the Redis lock, back to back, to compare.
# Needs: redis
for lock in atomic redis; do
  seckill serve --port 8080 --lock $lock &
  seckill serve --port 8090 --lock $lock &
  loadtest
  echo "loadtest exited with code $?"
  kill %1 %2; wait
done
