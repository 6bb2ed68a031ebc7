#!/usr/bin/env bash
# Lesson 1: the same crowd, each instance behind a mutex of its own process.
# Needs: redis
seckill serve --port 8080 --lock local &
seckill serve --port 8090 --lock local &
loadtest
echo "loadtest exited with code $?"
kill %1 %2; wait
