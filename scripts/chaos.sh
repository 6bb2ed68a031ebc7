#!/usr/bin/env bash
# Chaos under load: processes pause and die, servers and their leaders fail, and no
# strategy that claims safety may sell a unit twice or lose a sale.
#
#   scripts/chaos.sh [RUNS] [STRATEGY...]        default: 3 runs of every fault, on every strategy it applies to
#   CHAOS_FAULTS="etcd-leader-killed mysql-killed" scripts/chaos.sh 1     only those faults
#   DRY_RUN=1 scripts/chaos.sh                  prints the rows (FAULT STRATEGY FENCING), and does nothing else
#
# The faults (each row of the table; docs/results/chaos.md explains what each one shows):
#   holder-paused                   an instance holding the lock is stopped (SIGSTOP) past its lease,
#                                   then let go; fencing on and off. For ZooKeeper it is a session expiry.
#   holder-killed                   an instance holding the lock is killed (SIGKILL)
#   holder-paused-grouped           holder-paused with `--group-commit --group-max 8`: the holder
#                                   sells to a group of buyers under one grant (src/sale/group/mod.rs),
#                                   so a late write is a whole group's; fencing on and off
#   holder-killed-grouped           holder-killed with `--group-commit`: a group dies with its holder
#   etcd-leader-killed              the etcd leader of three is killed; restarted 3 s later
#   etcd-quorum-lost                two of three etcd members are killed; restarted 3 s later
#   zookeeper-leader-killed         the ZooKeeper leader of three is killed; restarted 3 s later
#   redlock-2-of-5-killed           two of the five Redlock masters are killed; restarted 3 s later
#   redlock-3-of-5-killed           three of them: no majority is left; restarted 3 s later
#   redlock-master-restarted-empty  a master is killed and comes back at once without its data
#   lock-redis-killed               redis-degrade's lock Redis is killed; restarted 3 s later
#   lock-redis-paused               it is stopped for 3 s (SIGSTOP)
#   stock-redis-killed              the stock Redis (AOF, fsync always) is killed and restarted
#   mysql-killed                    MariaDB is killed under the MySQL locks; restarted at once
#
# The order faults: `redis+orders`, each unit sold becomes an order written into MySQL
# through the stream stock:orders (src/orders/mod.rs); every instance takes over orders another
# left pending for 1 s (--orders-claim-idle-ms). The verdict waits for the orders and
# counts a missing one as a lost sale.
#   order-writer-killed             MariaDB is paused (SIGSTOP) for 3 s, so that each instance's
#                                   order writer hangs in its INSERT with a batch read and not
#                                   acknowledged; instance 1 is killed in the middle of that
#                                   batch, then MariaDB resumes
#   orders-mysql-killed             MariaDB is killed under the orders; restarted 3 s later
#
# The network faults: each instance reaches its lock backend through a nemesis of its own
# (scripts/lib/nemesis.sh), and only instance 1's is struck, so that instance runs on while
# its talk with the lock goes wrong. For redis the lock then lives in the lock Redis, apart
# from the stock, so that only the lock is cut off. Every lock strategy, fencing on and off.
#   holder-partitioned              instance 1, holding the lock, is cut off from its lock backend
#                                   past its lease (or session). Its lease must stop it by itself:
#                                   a unit sold twice counts as unsafe even with fencing off
#   waiters-partitioned             instance 1 is cut off for less than a session while its buyers
#                                   wait, and give up after 1 s; no lock may be left stranded
#   answers-delayed                 every answer of the lock backend reaches instance 1 1.2-1.5 s
#                                   late, past its 1 s acquire timeout and the renewal timeouts, for 3 s
#   connections-reset               every lock connection of instance 1 is reset (RST), and new ones
#                                   refused, for 300 ms; 5 times
# In these two, only instance 1's buyers give up after 1 s (`--acquire-timeout-ms 1000`);
# instance 2's wait, and show whether the lock is free after the heal. The table's column
# "time to first sale after the heal" says when anyone sold again.
#
# The failover faults: the redis lock lives in the cluster's replicated lock Redis (a master,
# its replica, three Sentinels) and follows its master through the Sentinels, with a lease
# of 6 s (Redisson's watchdog keeps 30 s) so that a holder's lease outlives the failover.
#   lock-redis-failover             the replication link is cut, instance 1 is granted the lock
#                                   (the replica never sees it) and paused mid-sale, the master
#                                   is killed, Sentinel promotes the replica, instance 2 is
#                                   granted the same lock; then instance 1 is let go, the link
#                                   healed and the old master restarted (it rejoins as a replica).
#                                   Fencing on and off: with it off, the double sale is expected
#   lock-redis-failover-wait        the same with `--lock-redis-wait-replicas 1`: a grant counts
#                                   only once the replica has it (Redisson's WAIT). No unit may be
#                                   sold twice, fenced or not
#
# The stock failover faults: the stock itself (and the redis lock beside it) lives in that
# replicated Redis, `--redis-url redis-sentinel://...`, as a shop keeps it. 400 buyers, and
# `--orders`: after each run `seckill reconcile` compares the orders in MySQL with the sale,
# and the column "units with two orders" is what it found (a shop runs it after a failover).
#   stock-redis-failover            the replication link is cut, the master sells for 1 s what its
#                                   replica never sees, the master is killed, Sentinel promotes the
#                                   replica, and the sale goes on there; the old master rejoins as a
#                                   replica. The promoted replica has the units the master sold in
#                                   that second, and sells them again: the column "units that did not
#                                   exist" (buyers told "sold" beyond the stock) shows them
#   stock-redis-failover-wait       the same with `--stock-wait-replicas 1`: a sale counts only once
#                                   the replica has it (WAIT); the buyers of that second hear that
#                                   the outcome is unknown. No unit may be sold that did not exist
#
# The stock cluster faults: the stock lives on the cluster's Redis Cluster (three masters with a
# replica each, `--redis-url redis-cluster://...`) in 6 segments, which spread over the masters;
# the redis lock lives in the lock Redis, since a lock cannot live on a cluster. 400 buyers.
#   stock-shard-failover            the replication link of the master that serves segment 0 is cut,
#                                   it sells for 1 s what its replica never sees, it is killed, the
#                                   cluster promotes the replica, and the sale goes on there; the old
#                                   master rejoins as a replica. Units that did not exist, as above,
#                                   now from one shard of three
#   stock-shard-failover-wait       the same with `--stock-wait-replicas 1` (WAIT at the segment's
#                                   master). No unit may be sold that did not exist
#   stock-reshard                   segment 0's hash slot migrates to another master during the
#                                   sale, keys and all (scripts/cluster.sh move-segment, the steps of
#                                   `redis-cli --cluster reshard`); the instances follow ASK and
#                                   MOVED. Nothing may be lost or sold twice
#
# The clock faults are the rows of scripts/clock-jump.sh (`make clock-jump`), played with its
# own servers after the others; their table follows this one:
#   redlock-clock-jump  redis-clock-jump  instance-clock-jump
#
# The servers are the cluster of scripts/cluster.sh (started here, left running; `make
# cluster-stop` stops it), never those of `make services`. Each run: two instances, 200
# buyers for 100 units, every sale lingering 50 ms between its lease check and its write
# (`--chaos-pause-before-write-ms`, a test-only option) so that faults land mid-sale. The
# fault strikes once 10 units are sold.
#
# This script starts, strikes and stops; it judges nothing. After each run it appends a line
# to .run/results/chaos/runs.jsonl (the row, the run, what the row expects: `expectation`),
# and `loadtest chaos-table` judges every run from its history (docs/reference/load-test.md)
# and writes the table, a column per check. Exit 1 when a row that must hold failed a check,
# sold a unit that did not exist or without a quorum, or left a unit in two orders. A row
# that exists to show an anomaly (a paused holder unfenced) never fails the suite; when a
# run did not show it, the table's note says so.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
RESULTS="$RUN/results/chaos"
LOGS="$RUN/logs"
PORTS=(8080 8090)
source "$ROOT/scripts/lib/publish.sh"   # publish_results, command_line
source "$ROOT/scripts/lib/safety-matrix.sh" # publish_safety_matrix
COMMAND=$(command_line CHAOS_FAULTS -- scripts/chaos.sh "$@")
RUNS=${1:-3}
shift || true
ONLY=("$@")
NETWORK_FAULTS="holder-partitioned waiters-partitioned answers-delayed connections-reset"
GROUPED_FAULTS="holder-paused-grouped holder-killed-grouped"
FAILOVER_FAULTS="lock-redis-failover lock-redis-failover-wait"
STOCK_FAILOVER_FAULTS="stock-redis-failover stock-redis-failover-wait"
SHARD_FAULTS="stock-shard-failover stock-shard-failover-wait stock-reshard"
# The unmitigated stock failovers: their units that did not exist are the lesson, not a failure.
UNMITIGATED_STOCK_FAULTS="stock-redis-failover stock-shard-failover"
CLOCK_FAULTS="redlock-clock-jump redis-clock-jump instance-clock-jump"
ALL_FAULTS="holder-paused holder-killed $GROUPED_FAULTS etcd-leader-killed etcd-quorum-lost zookeeper-leader-killed
  redlock-2-of-5-killed redlock-3-of-5-killed redlock-master-restarted-empty lock-redis-killed
  lock-redis-paused stock-redis-killed mysql-killed order-writer-killed orders-mysql-killed $NETWORK_FAULTS $FAILOVER_FAULTS
  $STOCK_FAILOVER_FAULTS $SHARD_FAULTS $CLOCK_FAULTS"
OUTAGE_SECONDS=3
# answers-delayed: every answer late by 1.2 s plus up to 0.3 s, past the 1 s acquire timeout
# and any renewal timeout.
ANSWER_DELAY="delay?ms=1200&jitter_ms=300&direction=to-client"
# Where `fault` writes; each run of a row names its own (see strike).
FAULTS=/dev/null
# connections-reset: this many resets, each healed 300 ms later.
RESETS=5
# The failover faults: the lease, longer than a failover (2.5-3 s); how long after the cut
# instance 1's lost grant comes; and how long instance 2 is given, once the replica is
# promoted, to be granted the lock while instance 1 sleeps.
FAILOVER_LOCK_TTL_MS=6000
CUT_BEFORE_GRANT_SECONDS=2
SECOND_HOLDER_SECONDS=5
# The stock failover faults: how long the master sells after the cut, before it is killed.
UNREPLICATED_SALES_SECONDS=1
# The stock cluster faults: segments, so that every master serves some, and a pause in
# every sale long enough that 100 units last past the failover (about 3 s at 6 at once).
SHARD_SEGMENTS=6
SHARD_PAUSE_BEFORE_WRITE_MS=200

say() { printf '[chaos] %s\n' "$*"; }
die() { printf '[chaos] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening, poll
source "$ROOT/scripts/lib/instances.sh" # start_instances, stop_instances, until_sold, ...
source "$ROOT/scripts/lib/nemesis.sh"   # start_nemeses, stop_nemeses, nemesis
source "$ROOT/scripts/lib/replication.sh" # cut_replication, heal_replication
source "$ROOT/scripts/lib/strategies.sh" # load_strategies, strategies, strategy_field
load_strategies
cluster() { "$ROOT/scripts/cluster.sh" "$@" >>"$LOGS/chaos-cluster.log" 2>&1; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a whole number of runs, got '$RUNS'"

# The strategies each fault applies to. The faults of any lock strike every strategy whose
# lock lives on a server (the binary says which: scripts/lib/strategies.sh).
strategies_for() {
  case $1 in
    holder-paused | holder-killed | holder-partitioned | waiters-partitioned | answers-delayed | connections-reset)
      strategies '.lock_flag != null' | xargs ;;
    *-grouped) echo redis etcd zookeeper mysql ;;
    etcd-*) echo etcd ;;
    zookeeper-*) echo zookeeper ;;
    redlock-*) echo redlock ;;
    lock-redis-failover*) echo redis ;;
    stock-redis-failover* | stock-shard-failover* | stock-reshard) echo redis ;;
    lock-redis-*) echo redis-degrade ;;
    stock-redis-killed) echo redis etcd ;;
    mysql-killed) echo mysql mysql-version ;;
    order-writer-killed | orders-mysql-killed) echo redis+orders ;;
    redis-clock-jump | instance-clock-jump) echo redis ;;
    *) die "unknown fault '$1'; the faults are: $(xargs <<<"$ALL_FAULTS")" ;;
  esac
}

# has_tokens STRATEGY: whether its grants carry fencing tokens (Redlock's do not).
has_tokens() { [[ $(strategy_field "$1" tokens) == true ]]; }

# rows: the rows this run plays, one a line: FAULT STRATEGY FENCING, or FAULT STRATEGY clock
# for the clock faults, which scripts/clock-jump.sh plays. A paused holder can write late,
# and a cut-off one must not; both run with fencing on and off. Every other fault runs with
# fencing on. Without tokens (Redlock), once is enough.
rows() {
  local fault strategy fencing fencings
  for fault in ${CHAOS_FAULTS:-$ALL_FAULTS}; do
    for strategy in $(strategies_for "$fault"); do
      if ((${#ONLY[@]} > 0)) && [[ " ${ONLY[*]} " != *" $strategy "* ]]; then continue; fi
      if is_clock_fault "$fault"; then echo "$fault $strategy clock"; continue; fi
      fencings=(on)
      if [[ $fault == holder-paused* ]] || is_network_fault "$fault" || is_failover_fault "$fault"; then fencings=(on off); fi
      has_tokens "$strategy" || fencings=(on)
      for fencing in "${fencings[@]}"; do echo "$fault $strategy $fencing"; done
    done
  done
}

is_grouped_fault() { [[ " $GROUPED_FAULTS " == *" $1 "* ]]; }
is_network_fault() { [[ " $NETWORK_FAULTS " == *" $1 "* ]]; }
is_failover_fault() { [[ " $FAILOVER_FAULTS " == *" $1 "* ]]; }
is_clock_fault() { [[ " $CLOCK_FAULTS " == *" $1 "* ]]; }
is_stock_failover_fault() { [[ " $STOCK_FAILOVER_FAULTS " == *" $1 "* ]]; }
is_shard_fault() { [[ " $SHARD_FAULTS " == *" $1 "* ]]; }
is_unmitigated_stock_fault() { [[ " $UNMITIGATED_STOCK_FAULTS " == *" $1 "* ]]; }

# The stock failover faults: the stock, and the redis lock beside it, in the replicated
# Redis, found through its Sentinels; -wait adds the WAIT after every sale. The stock is
# read there too (stock_cli), wherever the Sentinels have moved its master.
STOCK_ON_SENTINELS=
stock_on_sentinels() {
  STOCK_ON_SENTINELS=
  is_stock_failover_fault "$1" || return 0
  STOCK_ON_SENTINELS=yes
  local i extra="--redis-url $SECKILL_FAILOVER_LOCK_REDIS_URL --orders"
  [[ $1 == *-wait ]] && extra+=" --stock-wait-replicas 1"
  for i in "${!PORTS[@]}"; do INSTANCE_FLAGS[i]+=" $extra"; done
}
stock_cli() {
  if [[ -n $STOCK_ON_CLUSTER ]]; then cluster_stock_cli "$@"
  elif [[ -n $STOCK_ON_SENTINELS ]]; then redis-cli -p "$(failover_master_port)" "$@"
  else "${STOCK_REDIS[@]}" "$@"; fi
}

# The stock cluster faults: the stock on the Redis Cluster, the lock in the lock Redis;
# -wait adds the WAIT after every sale.
STOCK_ON_CLUSTER=
stock_on_cluster() {
  STOCK_ON_CLUSTER=
  is_shard_fault "$1" || return 0
  STOCK_ON_CLUSTER=yes
  # A run cut short (a move, a failover) may leave a slot half moved: start from a sound cluster.
  cluster heal-stock-cluster
  local i extra="--redis-url $SECKILL_STOCK_CLUSTER_URL --lock-redis-url $LOCK_REDIS_URL --stock-segments $SHARD_SEGMENTS --orders"
  # Six segments sell at once: slower sales keep the sale going through the failover.
  extra+=" --chaos-pause-before-write-ms $SHARD_PAUSE_BEFORE_WRITE_MS"
  [[ $1 == *-wait ]] && extra+=" --stock-wait-replicas 1"
  for i in "${!PORTS[@]}"; do INSTANCE_FLAGS[i]+=" $extra"; done
}

# The two reads this script makes of the stock, on the cluster, where the sale's keys
# carry hash tags and each segment keeps its own counts (src/sale/keys.rs): the
# generation and the units sold (added up).
cluster_stock_cli() {
  local port i
  port=$("$ROOT/scripts/cluster.sh" port "$("$ROOT/scripts/cluster.sh" shard-master 0)")
  case "$*" in
    "get stock:generation") redis-cli -c -p "$port" get "{sale}:stock:generation" ;;
    "get lucky")
      for ((i = 0; i < SHARD_SEGMENTS; i++)); do redis-cli -c -p "$port" get "{segment:$i}:lucky"; done |
        awk '{ sum += $1 } END { print sum + 0 }' ;;
    *) die "cluster_stock_cli cannot read '$*' from the stock cluster" ;;
  esac
}

# The failover faults: both instances keep their lock in the replicated lock Redis, found
# through its Sentinels, with a lease that outlives the failover; -wait adds Redisson's WAIT.
follow_sentinels() {
  is_failover_fault "$1" || return 0
  local i extra="--lock-redis-url $SECKILL_FAILOVER_LOCK_REDIS_URL --lock-ttl-ms $FAILOVER_LOCK_TTL_MS"
  [[ $1 == *-wait ]] && extra+=" --lock-redis-wait-replicas 1"
  for i in "${!PORTS[@]}"; do INSTANCE_FLAGS[i]+=" $extra"; done
}

# How long a holder is paused or cut off: longer than the strategy's lease. etcd grants
# whole seconds (2 s at least); a ZooKeeper session lasts at least 2 ticks (4 s).
past_lease_seconds() {
  case $1 in
    etcd) echo 4 ;;
    zookeeper) echo 7 ;;
    *) echo 1.5 ;; # 3 leases of 500 ms, under the 2 s Redis timeout of the commands in flight
  esac
}

# How long waiters-partitioned cuts instance 1 off: past its 1 s acquire timeout, so its
# waiters give up mid-request, and shorter than an etcd lease (2 s) or a ZooKeeper session (4 s).
short_partition_seconds() {
  case $1 in
    zookeeper) echo 2.5 ;;
    *) echo 1.5 ;;
  esac
}

# The grouped faults: every instance sells in groups (--group-commit) of 8 at most, so that
# 100 units take a dozen grants or more and the fault lands mid-sale (groups of 64 sell the
# stock in three or four grants, often over before it strikes).
GROUP_MAX=8
in_groups() {
  local i
  is_grouped_fault "$1" || return 0
  for i in "${!PORTS[@]}"; do INSTANCE_FLAGS[i]+=" --group-commit true --group-max $GROUP_MAX"; done
}

# The order faults: an order left pending by a dead writer is taken over after 1 s.
quick_takeover() {
  local i
  [[ $1 == order* ]] || return 0
  for i in "${!PORTS[@]}"; do INSTANCE_FLAGS[i]+=" --orders-claim-idle-ms 1000"; done
}

# waiters-partitioned and answers-delayed: instance 1's buyers give up after 1 s, so that
# their lock requests are abandoned in flight; everywhere else a buyer waits out the fault.
impatient_first() {
  [[ $1 == waiters-partitioned || $1 == answers-delayed ]] && INSTANCE_FLAGS[0]+=" --acquire-timeout-ms 1000"
  return 0
}

mapfile -t ROWS < <(rows)
if [[ ${DRY_RUN:-0} == 1 ]]; then printf '%s\n' "${ROWS[@]}"; exit 0; fi
cd "$ROOT"
refuse_busy_ports
# The cluster's servers, started when they are not running: a line each, into the log.
mkdir -p "$LOGS"
build_the_cluster_binary
"$ROOT/scripts/cluster.sh" start >>"$LOGS/chaos-cluster.log" ||
  die "the cluster's servers did not start (above); what they said is in $LOGS/chaos-cluster.log"
say "the cluster's servers are up (\`scripts/cluster.sh status\` lists them)"
eval "$("$ROOT/scripts/cluster.sh" env)"
# Only redis-degrade keeps its lock in the lock Redis, and it gets it as a flag; every other
# strategy keeps its lock beside the stock (as seckill does when the setting is unset).
LOCK_REDIS_URL=$SECKILL_LOCK_REDIS_URL
unset SECKILL_LOCK_REDIS_URL
STOCK_REDIS=(redis-cli -u "$SECKILL_REDIS_URL")
build_release
mkdir -p "$RESULTS" "$LOGS"
REPLICATION_CUT=
trap 'stop_instances; stop_nemeses; [[ -z $REPLICATION_CUT ]] || heal_replication' EXIT


# Waits (up to 2 s) until instance 1 holds the lock, whatever the strategy: its /metrics
# counts the grants it holds (`seckill_locks_held`). FAULT, the second argument: the shard
# faults hold six locks, one per segment, and do not wait.
wait_until_first_holds() {
  is_shard_fault "$2" && return 0
  for _ in $(seq 1 200); do
    [[ $(curl -s "http://127.0.0.1:${PORTS[0]}/metrics" | sed -n 's/^seckill_locks_held //p') =~ ^[1-9] ]] && return
    sleep 0.01
  done
}

kill_members() { local member; for member in "$@"; do fault kill "$member"; cluster kill "$member"; done; }
# The start is recorded as the restart begins: from then on the member may serve (the
# window of sold_without_quorum ends there).
restart_members() { local member; for member in "$@"; do fault start "$member"; cluster restart "$member"; done; }

# fault KIND TARGET [DETAIL]: puts what strike does into the history of the run it strikes:
# the load test reads $FAULTS when it ends (docs/reference/load-test.md, "The history").
fault() {
  target/release/loadtest record-fault --to "$FAULTS" "$1" "$2" ${3:+"--detail=$3"} 2>>"$LOGS/chaos-faults.log" ||
    echo "the fault $1 of $2 is not in the history of this run; see $LOGS/chaos-faults.log" >&2
}

# struck KIND: what instance 1's nemesis did to its links, into the history.
struck() {
  case $1 in
    partition | heal | reset) fault "$1" "links of seckill-${PORTS[0]}" ;;
    *) fault delay "links of seckill-${PORTS[0]}" "$1" ;;
  esac
}

# kill_then_restart SECONDS MEMBER...: kill -9 the members, and start them again SECONDS later.
kill_then_restart() {
  local seconds=$1; shift
  kill_members "$@"
  sleep "$seconds"
  restart_members "$@"
}

# lose_quorum MEMBER...: kill -9 a majority; OUTAGE_SECONDS later, start it again. From the
# first kill to the first start, no sale may begin (record_run's quorum_lost).
lose_quorum() {
  kill_members "$@"
  sleep $OUTAGE_SECONDS
  restart_members "$@"
}

# heal: instance 1's nemesis lets everything pass again.
heal() {
  nemesis heal
  struck heal
}

# The fault itself, once 10 units are sold. Each step goes into the run's history (fault):
# the table's times are measured from its first fault and its last heal.
strike() {
  local fault=$1 strategy=$2 holder=$3
  wait_until_first_holds "$strategy" "$fault"
  case $fault in
    holder-paused | holder-paused-grouped)
      fault pause "seckill-${PORTS[0]}"; kill -STOP "$holder"
      sleep "$(past_lease_seconds "$strategy")"
      kill -CONT "$holder"; fault resume "seckill-${PORTS[0]}" ;;
    holder-killed | holder-killed-grouped) fault kill "seckill-${PORTS[0]}"; kill -KILL "$holder" ;;
    etcd-leader-killed) kill_then_restart $OUTAGE_SECONDS "$(cluster_leader etcd)" ;;
    etcd-quorum-lost)
      local leader follower
      leader=$(cluster_leader etcd)
      follower=etcd-1; [[ $leader == etcd-1 ]] && follower=etcd-2
      lose_quorum "$leader" "$follower" ;;
    zookeeper-leader-killed) kill_then_restart $OUTAGE_SECONDS "$(cluster_leader zookeeper)" ;;
    redlock-2-of-5-killed) kill_then_restart $OUTAGE_SECONDS redlock-6481 redlock-6482 ;;
    redlock-3-of-5-killed) lose_quorum redlock-6481 redlock-6482 redlock-6483 ;;
    redlock-master-restarted-empty)
      fault kill redlock-6481; cluster kill redlock-6481
      cluster restart redlock-6481 --empty; fault start redlock-6481 "empty: without what it granted" ;;
    lock-redis-killed) kill_then_restart $OUTAGE_SECONDS lock-redis ;;
    lock-redis-paused)
      fault pause lock-redis; cluster pause lock-redis; sleep $OUTAGE_SECONDS
      cluster resume lock-redis; fault resume lock-redis ;;
    stock-redis-killed) kill_then_restart 0 stock-redis ;;
    mysql-killed) kill_then_restart 0 mysql ;;
    order-writer-killed)
      fault pause mysql; cluster pause mysql; sleep $OUTAGE_SECONDS
      fault kill "seckill-${PORTS[0]}"; kill -KILL "$holder"; cluster resume mysql; fault resume mysql ;;
    orders-mysql-killed) kill_then_restart $OUTAGE_SECONDS mysql ;;
    holder-partitioned) nemesis partition; struck partition; sleep "$(past_lease_seconds "$strategy")"; heal ;;
    waiters-partitioned) nemesis partition; struck partition; sleep "$(short_partition_seconds "$strategy")"; heal ;;
    answers-delayed) nemesis "$ANSWER_DELAY"; struck "$ANSWER_DELAY"; sleep $OUTAGE_SECONDS; heal ;;
    connections-reset)
      for _ in $(seq 1 $RESETS); do nemesis reset; struck reset; sleep 0.3; heal; sleep 0.5; done ;;
    lock-redis-failover*) fail_over_after_a_lost_grant "$holder" ;;
    stock-redis-failover*) fail_over_after_unreplicated_sales ;;
    stock-shard-failover*) fail_over_a_shard_after_unreplicated_sales ;;
    stock-reshard)
      fault reshard "segment 0's hash slot"; cluster move-segment 0; fault heal "segment 0's hash slot" moved ;;
  esac
}
cluster_leader() { "$ROOT/scripts/cluster.sh" leader "$1"; }

# The member of the replicated lock Redis that the Sentinels name master, and its port.
failover_master() { "$ROOT/scripts/cluster.sh" leader failover-redis; }
failover_master_port() { "$ROOT/scripts/cluster.sh" port "$(failover_master)"; }

# holds_for PORT VALUE: whether VALUE (of lock:stock) is a grant to the instance on PORT.
holds_for() { [[ $2 == "seckill-$1:"* ]]; }

# fail_over_after_a_lost_grant HOLDER: the failover faults, step by step (see the header).
fail_over_after_a_lost_grant() {
  local holder=$1 master master_port before grant
  master=$(failover_master)
  master_port=$("$ROOT/scripts/cluster.sh" port "$master")
  before=$(redis-cli -p "$master_port" get lock:stock)
  cut_replication_of "$master"
  # The replica keeps the lock key it had at the cut, until that key's lease ends. A grant to
  # instance 1 made well after the cut (2 s at most) outlives that key, by as much: that is the
  # window in which the promoted replica grants the lock again while instance 1 still holds it.
  sleep "$CUT_BEFORE_GRANT_SECONDS"
  for _ in $(seq 1 200); do
    grant=$(redis-cli -p "$master_port" get lock:stock)
    holds_for "${PORTS[0]}" "$grant" && [[ $grant != "$before" ]] && break
    sleep 0.01
  done
  fault pause "seckill-${PORTS[0]}"; kill -STOP "$holder"
  kill_until_promoted "$master"
  # Instance 2 is granted the lock by the promoted replica once the stale key's lease ends,
  # unless the WAIT refuses it.
  poll $SECOND_HOLDER_SECONDS holds_now "${PORTS[1]}" || true
  kill -CONT "$holder"; fault resume "seckill-${PORTS[0]}"
  rejoin_as_replica "$master"
}

# fail_over_after_unreplicated_sales: the stock failover faults, step by step (see the header).
fail_over_after_unreplicated_sales() {
  local master
  master=$(failover_master)
  cut_replication_of "$master"
  sleep "$UNREPLICATED_SALES_SECONDS"
  kill_until_promoted "$master"
  rejoin_as_replica "$master"
}

# fail_over_a_shard_after_unreplicated_sales: stock-shard-failover, step by step (see the header).
fail_over_a_shard_after_unreplicated_sales() {
  local master
  master=$("$ROOT/scripts/cluster.sh" shard-master 0)
  cut_replication_of "$master"
  sleep "$UNREPLICATED_SALES_SECONDS"
  fault failover "$master" "killed; the cluster promotes its replica"
  cluster kill "$master"
  poll 30 shard_promoted_other_than "$master" ||
    die "the stock cluster promoted no replica of $master within 30 s; see $LOGS/chaos-cluster.log"
  rejoin_as_replica "$master"
}
# Promoted: the cluster names another master of segment 0 (an error while it fails over is no answer).
shard_promoted_other_than() {
  local now
  now=$("$ROOT/scripts/cluster.sh" shard-master 0) && [[ -n $now && $now != "$1" ]]
}

# kill_until_promoted MASTER: kill -9 the failover group's master, and wait until the
# Sentinels name another.
kill_until_promoted() {
  fault failover "$1" "killed; the Sentinels promote a replica"
  cluster kill "$1"
  poll 30 promoted_other_than "$1" || die "the Sentinels promoted no replica within 30 s; see $LOGS/chaos-cluster.log"
}

# cut_replication_of MASTER: what MASTER writes stops reaching its replicas.
cut_replication_of() {
  REPLICATION_CUT=yes
  fault partition "replication of $1"
  cut_replication "$("$ROOT/scripts/cluster.sh" port "$1")" >/dev/null
}

# rejoin_as_replica MASTER: heal the replication link and start the killed master again, as
# a replica of the promoted one.
rejoin_as_replica() {
  heal_replication
  REPLICATION_CUT=
  fault heal "replication of $1"
  cluster restart "$1"
  fault start "$1"
}
promoted_other_than() { [[ $(failover_master) != "$1" ]]; }
holds_now() { holds_for "$1" "$(redis-cli -p "$(failover_master_port)" get lock:stock)"; }

# expectation FAULT STRATEGY FENCING: what the row promises (docs/reference/chaos.md, "The
# columns"). `holds`: every check passes in every run. `fails`: the row exists to show the
# anomaly, and the fault is timed to catch it: a paused holder unfenced on the Redis locks
# and Redlock, whose runs have shown it every time. `may_fail`: no
# promise either way, an unfenced row whose fault may or may not land between a holder's
# check and its write. Redlock has no tokens, so it runs unfenced whatever --fencing says.
expectation() {
  local fault=$1 strategy=$2 fencing=$3
  has_tokens "$strategy" || fencing=no_tokens
  case $fault in
    # A holder cut off past its lease must stop by itself; a grant counts only once the
    # replica has it: fenced or not.
    holder-partitioned | lock-redis-failover-wait) echo holds ;;
    # The unmitigated stock failovers sell units that did not exist: the lesson.
    stock-redis-failover | stock-shard-failover) echo fails ;;
    *)
      if [[ $fencing == on ]]; then echo holds
      elif [[ $fault == lock-redis-failover ]]; then echo fails
      elif [[ $fault == holder-paused* && $strategy =~ ^(redis|redis-degrade|redlock)$ ]]; then echo fails
      else echo may_fail; fi ;;
  esac
}

# record_run NAME FAULT STRATEGY FENCING RUN [UNITS-WITH-TWO-ORDERS]: one line of the runs
# file, for `loadtest chaos-table`, which judges the run from its report and history.
record_run() {
  local quorum_lost=false
  [[ $2 == etcd-quorum-lost || $2 == redlock-3-of-5-killed ]] && quorum_lost=true
  jq -nc --arg report "$1.json" --arg fault "$2" --arg strategy "$3" --argjson run "$5" \
    --arg expect "$(expectation "$2" "$3" "$4")" --argjson quorum_lost $quorum_lost --arg doubled "${6:-}" \
    '{fault: $fault, strategy: $strategy, run: $run, expect: $expect, report: $report, quorum_lost: $quorum_lost}
     + (if $doubled == "" then {} else {units_with_two_orders: ($doubled | tonumber)} end)' >>"$RUNS_FILE"
}

RUNS_FILE="$RESULTS/runs.jsonl"
: >"$RUNS_FILE"
clock_rows=()
for row in "${ROWS[@]}"; do
  read -r fault strategy fencing <<<"$row"
  if [[ $fencing == clock ]]; then clock_rows+=("$fault"); continue; fi
  for run in $(seq 1 "$RUNS"); do
    name="$fault-$strategy-fencing-$fencing-$run"
    say "$name"
    is_network_fault "$fault" && start_nemeses "$strategy" "chaos-$name"
    impatient_first "$fault"
    follow_sentinels "$fault"
    stock_on_sentinels "$fault"
    stock_on_cluster "$fault"
    quick_takeover "$fault"
    in_groups "$fault"
    # redis-degrade keeps its lock in its own Redis (LOCK_REDIS_URL), the one that lock-redis-* faults hit.
    start_instances --label "chaos-$name" "$strategy" --fencing "$fencing" --lock-ttl-ms 500 \
      --chaos-pause-before-write-ms 50 --acquire-timeout-ms 30000
    report="$RESULTS/$name.json"
    FAULTS="$RESULTS/$name.faults.jsonl"
    rm -f "$FAULTS" "$report"
    generation=$(stock_cli get stock:generation)
    (
      until_sold 10 "$generation" stock_cli
      strike "$fault" "$strategy" "${INSTANCE_PIDS[0]}"
    ) &
    striker=$!
    users=200 stock_url=$SECKILL_REDIS_URL
    if is_stock_failover_fault "$fault"; then users=400 stock_url=$SECKILL_FAILOVER_LOCK_REDIS_URL; fi
    if is_shard_fault "$fault"; then users=400 stock_url=$SECKILL_STOCK_CLUSTER_URL; fi
    target/release/loadtest --users "$users" --stock 100 --redis-url "$stock_url" --report-file "$report" \
      --faults-file "$FAULTS" \
      >"$LOGS/chaos-$name-loadtest.log" 2>&1 || true
    wait "$striker" || true
    stop_instances
    stop_nemeses
    [[ -s $report ]] || die "the load test wrote no report for $name; see $LOGS/chaos-$name-loadtest.log"
    doubled=
    if is_stock_failover_fault "$fault" || is_shard_fault "$fault"; then
      target/release/seckill reconcile --redis-url "$stock_url" --wait-ms 10000 >"$LOGS/chaos-$name-reconcile.log" 2>&1 || true
      doubled=$(sed -n 's/^  units with two orders *\([0-9]*\).*/\1/p' "$LOGS/chaos-$name-reconcile.log")
      [[ -n $doubled ]] || die "seckill reconcile gave no answer for $name; see $LOGS/chaos-$name-reconcile.log"
    fi
    record_run "$name" "$fault" "$strategy" "$fencing" "$run" "$doubled"
  done
done

echo
say "$RUNS runs per row (200 buyers, 400 for the stock failovers and the reshard, 100 units, two instances), $(date -u +%Y-%m-%d), $(nproc) cores:"
# judge RUNS-FILE [FLAG...]: the table of those runs, into $RESULTS/table.md; `safe` is
# emptied when a row that must hold did not (exit 1). A run that cannot be read (exit 2)
# stops everything: no table is better than one that leaves a row out.
safe=yes
judge() {
  local status=0
  target/release/loadtest chaos-table "$@" --markdown "$RESULTS/table.md" || status=$?
  ((status != 2)) || die "loadtest chaos-table could not judge the runs of $1 (above); nothing was published"
  ((status == 0)) || safe=
}
# append_table FILE: another table under the chaos table, a blank line between.
append_table() {
  { [[ -s $RESULTS/table.md ]] && echo; cat "$1"; } >>"$RESULTS/table.md"
}
rm -f "$RESULTS/table.md"
if [[ -s $RUNS_FILE ]]; then judge "$RUNS_FILE"; else : >"$RESULTS/table.md"; fi
if ((${#clock_rows[@]} > 0)); then
  say "the clock faults: scripts/clock-jump.sh ${clock_rows[*]}"
  "$ROOT/scripts/clock-jump.sh" "${clock_rows[@]}" || safe=
  append_table "$RUN/results/clock-jump/table.md"
fi
# The rounds `make torture` found failing where they must hold, shrunk and kept in
# lab/regressions/, played again: a hole found once is looked for from then on. Their
# table (a row each: when found, now) follows the chaos table on the published page. A
# run that stops before its table (exit 2) stops everything, as a chaos run that cannot
# be read does.
if compgen -G "$ROOT/lab/regressions/*.json" >/dev/null; then
  say "the rounds make torture kept (lab/regressions/): target/release/torture --regressions"
  rm -f "$RESULTS/regressions/table.md"
  status=0
  target/release/torture --regressions --dir "$RESULTS/regressions" || status=$?
  ((status != 2)) || die "torture --regressions could not play the kept rounds (above); nothing was published"
  ((status == 0)) || safe=
  append_table "$RESULTS/regressions/table.md"
fi
say "the table is also in $RESULTS/table.md; each run's report, history and timeline are in $RESULTS/"
publish_results "$ROOT/docs/results/chaos.md" chaos "$COMMAND" "$RESULTS/table.md"
if [[ ${PUBLISH:-0} == 1 ]]; then publish_safety_matrix || say "the safety matrix was not published (above)"; fi
[[ -n $safe ]] || die "unsafe: a row that must hold did not (loadtest chaos-table says which, above)"
