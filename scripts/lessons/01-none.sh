#!/usr/bin/env bash
# Lesson 1: two instances with no lock, then the crowd.
# Needs: redis
seckill serve --port 8080 --lock none &
seckill serve --port 8090 --lock none &
loadtest   # resets the stock to 300, then 500 buyers, one request each, half on each instance
echo "loadtest exited with code $?"
kill %1 %2; wait
