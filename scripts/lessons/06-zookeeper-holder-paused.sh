#!/usr/bin/env bash
# Lesson 6: the `holder-paused` row of `make chaos` for zookeeper, fencing on and off:
# 8080 stopped for 7 s once 10 units are sold. The script starts its own cluster.
# Needs: make cluster's servers (the script starts them)
CHAOS_FAULTS="holder-paused" scripts/chaos.sh 1 zookeeper
echo "scripts/chaos.sh exited with code $?"
for fencing in on off; do
  run=.run/logs/chaos-holder-paused-zookeeper-fencing-$fencing-1
  echo "--- fencing $fencing: the lines of the load test's report this lesson reads"
  grep -E '^  (holders overlapped|fence refused|units sold twice|fencing regressions|errors|checks) |^verdict:' $run-loadtest.log
  echo "--- fencing $fencing: what 8080 logged about its lease and session"
  grep -E 'granted another session timeout|lock lost|lock expired before release|session ended|new session established|refused a write' \
    $run-8080.log | cut -c1-200
done
