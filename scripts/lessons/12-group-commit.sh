#!/usr/bin/env bash
# Lesson 12: one grant sells to every buyer waiting in the instance's queue. The redis and
# mysql locks, each without and with --group-commit, one crowd run each.
# Needs: make services (MariaDB)
BENCH_RUNS=1 scripts/bench.sh redis redis+group-commit mysql mysql+group-commit
echo "scripts/bench.sh exited with code $?"
