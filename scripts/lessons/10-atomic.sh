#!/usr/bin/env bash
# Lesson 10: the same crowd with no lock at all (one Lua script reads, checks and
# writes), then with the Redis lock, back to back, to compare.
# Needs: redis
for lock in atomic redis; do
  seckill serve --port 8080 --lock $lock & first=$!
  seckill serve --port 8090 --lock $lock & second=$!
  loadtest
  echo "loadtest exited with code $?"
  kill $first $second; wait
done
