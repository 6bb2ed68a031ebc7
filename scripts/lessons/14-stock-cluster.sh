#!/usr/bin/env bash
# Lesson 14, on a Redis Cluster: one shard of the stock failed over under load, without
# and with `--stock-wait-replicas 1`, then a slot moved during the sale: the
# `stock-shard-failover` and `stock-reshard` rows of `make chaos`, one run each; which
# master serves which segment afterwards; what `seckill reconcile` found after each
# failover. The script starts its own cluster.
# Needs: root (nftables cuts the replication link)
CHAOS_FAULTS="stock-shard-failover stock-shard-failover-wait stock-reshard" scripts/chaos.sh 1
echo "scripts/chaos.sh exited with code $?"
scripts/cluster.sh segments
for row in stock-shard-failover stock-shard-failover-wait; do
  echo "--- $row: what seckill reconcile found"
  cat .run/logs/chaos-$row-redis-fencing-on-1-reconcile.log
done
