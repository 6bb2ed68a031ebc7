#!/usr/bin/env bash
# The servers of the chaos suite, replicated where the strategy is: a 3-member etcd
# cluster, a 3-member ZooKeeper ensemble, five Redlock masters, the stock Redis with
# every write fsynced to its append-only file (so a kill -9 loses no sale), a lock
# Redis for redis-degrade, a lock Redis with one replica that three Sentinels fail over
# (the failover group), a Redis Cluster of three masters with a replica each for the
# stock (the stock cluster), and a MariaDB. Each on its own ports, beside `make services`,
# with its data under .run/cluster/. The chaos runner kills, pauses and restarts them;
# it never touches the servers of `make services` or anyone else's.
#
#   scripts/cluster.sh start [NAME...]  start every member (or NAME...) that is not running
#   scripts/cluster.sh stop [NAME...]   stop what start started (all, or NAME...)
#   scripts/cluster.sh status           each member, its port, and who leads
#   scripts/cluster.sh env              the SECKILL_* settings that point seckill at the cluster:
#                                       eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh kill NAME        kill -9 one member
#   scripts/cluster.sh pause NAME | resume NAME     SIGSTOP / SIGCONT one member
#   scripts/cluster.sh restart NAME [--empty]       start a killed member again (--empty: without its data)
#   scripts/cluster.sh leader etcd|zookeeper|failover-redis
#                                       the name of the member that leads now (for failover-redis:
#                                       the one the Sentinels name master)
#   scripts/cluster.sh port NAME        the port of one member
#   scripts/cluster.sh segments         which master of the stock cluster holds which segment of the
#                                       sale the last reset made (SECKILL_KEY_PREFIX names the sale)
#   scripts/cluster.sh shard-master N   the member of the stock cluster that serves segment N now
#   scripts/cluster.sh move-segment N   migrate the hash slot of segment N, keys and all, to another
#                                       master of the stock cluster, as `redis-cli --cluster reshard`
#                                       moves each slot (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE)
#   scripts/cluster.sh heal-stock-cluster   form the stock cluster again, empty, when a node is not
#                                       ok or holds a slot half moved (the bench runs it first)
#
# NAME is stock-redis, lock-redis, redlock-6481 ... redlock-6485, sentinel-1 ... sentinel-3,
# failover-redis-a, failover-redis-b, stock-cluster-1 ... stock-cluster-6, etcd-1 ... etcd-3,
# zookeeper-1 ... zookeeper-3 or mysql.
#
# What each command does, and why each member runs as it does, is said in Rust, by the
# same code that starts, kills and pauses the tests' private servers: testkit/src/cluster/
# (the members and their ports in members.rs, the failover group and the stock cluster in
# files of their own), run as the `cluster` binary. This script only runs it.
#
# SECKILL_CLUSTER_BIN, when set, is the binary to run: a script that calls this one many
# times builds it once (build_the_cluster_binary, scripts/lib/servers.sh). Otherwise the
# release build, brought up to date first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=${SECKILL_CLUSTER_BIN:-$ROOT/target/release/cluster}
if [[ -z ${SECKILL_CLUSTER_BIN:-} ]]; then
  [[ -x $bin ]] || echo "[cluster] building $bin (the first build takes a few minutes)"
  (cd "$ROOT" && cargo build --release --quiet -p testkit --bin cluster) ||
    { echo "[cluster] error: could not build $bin (the output above says why)" >&2; exit 1; }
fi
exec "$bin" "$@"
