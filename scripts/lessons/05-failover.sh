#!/usr/bin/env bash
# Lesson 5: a Sentinel failover that loses a lock, three rounds (`make demo-failover`).
# Needs: root (nftables cuts the replication link)
scripts/demo-failover.sh
echo "scripts/demo-failover.sh exited with code $?"
