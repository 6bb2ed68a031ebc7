#!/usr/bin/env bash
# Lesson 14: the stock's own Redis failed over under load, without and with
# `--stock-wait-replicas 1`: the `stock-redis-failover` rows of `make chaos`, one run each,
# then what each run's load test said, and what `seckill reconcile` found in the orders.
# The script starts its own cluster.
# Needs: root (nftables cuts the replication link)
CHAOS_FAULTS="stock-redis-failover stock-redis-failover-wait" scripts/chaos.sh 1
echo "scripts/chaos.sh exited with code $?"
for row in stock-redis-failover stock-redis-failover-wait; do
  echo "--- $row: the lines of the load test's report this lesson reads"
  grep -E '^  (sold \(lucky\)|answered sold|answered sold out|answered unknown|orders in MySQL|errors|checks) |^  - |^verdict:' \
    .run/logs/chaos-$row-redis-fencing-on-1-loadtest.log
  echo "--- $row: what seckill reconcile found"
  cat .run/logs/chaos-$row-redis-fencing-on-1-reconcile.log
done
