#!/usr/bin/env bash
# Lesson 2: the same crowd, both instances behind the Redis lock.
# Needs: redis
seckill serve --port 8080 --lock redis &
seckill serve --port 8090 --lock redis &
loadtest
echo "loadtest exited with code $?"
kill %1 %2; wait
