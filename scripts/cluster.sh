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
#
# NAME is stock-redis, lock-redis, redlock-6481 ... redlock-6485, sentinel-1 ... sentinel-3,
# failover-redis-a, failover-redis-b, stock-cluster-1 ... stock-cluster-6, etcd-1 ... etcd-3,
# zookeeper-1 ... zookeeper-3 or mysql.
#
# The failover group shows that Redis replication is asynchronous: the master answers OK to
# a lock grant before its replica has it, so a failover can lose a lock. failover-redis-a
# and -b are plain Redis like lock-redis (nothing on disk); sentinel-1 ... -3 watch the master
# `seckill-lock` and promote the replica when it dies. The members are named a and b, not
# master and replica, because the roles swap on every failover. seckill finds the master
# through the Sentinels (SECKILL_FAILOVER_LOCK_REDIS_URL, a redis-sentinel:// URL). The
# chaos suite's stock failover rows keep the stock there too (--redis-url with that URL):
# then the master loses sales, not a grant.
#
# The stock cluster is a Redis Cluster (cluster-enabled redis-server) of six nodes on
# 7001-7006 (their cluster bus on 17001-17006), joined by `redis-cli --cluster create` on
# the first start into three masters with one replica each; the masters split the 16,384
# hash slots in three, and the sale's segments, one hash tag each, spread over them
# (src/sale/keys.rs). A node keeps its place in the cluster in its nodes.conf, so a killed
# node started again rejoins, as the replica of whichever node the cluster promoted in its
# place. Like the failover group, nothing is kept on disk but that file.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run/cluster"
PIDS="$RUN/pids"
LOGS="$RUN/logs"

STOCK_REDIS_PORT=6479
LOCK_REDIS_PORT=6480
REDLOCK_PORTS=(6481 6482 6483 6484 6485)
FAILOVER_REDIS_PORTS=(6486 6487) # failover-redis-a, failover-redis-b
SENTINEL_PORTS=(26486 26487 26488) # sentinel-1, -2, -3
# The failover group's master, as the Sentinels and the redis-sentinel:// URL name it.
FAILOVER_MASTER_NAME=seckill-lock
# Two of the three Sentinels must find the master down before one of them fails it over.
SENTINEL_QUORUM=2
# A master that has not answered for this long is down. Not 1000: on every failover a
# Sentinel reconnects to the new master at most once a second, so at 1000 it sometimes
# found the new master down before its first PING and failed it over again (2 in 40
# failovers here, 0 in 60 at 1500).
SENTINEL_DOWN_AFTER_MS=1500
# A failover that has not promoted the replica by then is given up, and a Sentinel that
# tried (or voted) waits twice as long before it tries that master again. A failover that
# succeeds ends that wait: with the default, 3 minutes, failovers still ran back to back
# here, but one that was given up would stall the group for 6. The promotion shows in
# Sentinel's once-a-second INFO 0.77-0.91 s after REPLICAOF NO ONE: at 500 ms promotions
# were given up and took up to 6.4 s; 1000 ms passed 30 failovers with 0.1 s to spare.
SENTINEL_FAILOVER_TIMEOUT_MS=2000
STOCK_CLUSTER_PORTS=(7001 7002 7003 7004 7005 7006) # stock-cluster-1 ... -6
# A master silent this long is failed: its replica is promoted after about twice that.
STOCK_CLUSTER_NODE_TIMEOUT_MS=1000
ETCD_CLIENT_PORTS=(12379 22379 32379) # etcd-1, etcd-2, etcd-3
ETCD_PEER_PORTS=(12380 22380 32380)
ZK_CLIENT_PORTS=(2182 2183 2184) # zookeeper-1, -2, -3
MYSQL_PORT=3307

say() { printf '[cluster] %s\n' "$*"; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"

# The Sentinels come before the members they watch: a member starts as a replica of the one
# they name master.
members() {
  echo stock-redis lock-redis
  for port in "${REDLOCK_PORTS[@]}"; do echo "redlock-$port"; done
  echo sentinel-1 sentinel-2 sentinel-3 failover-redis-a failover-redis-b
  for i in 1 2 3 4 5 6; do echo "stock-cluster-$i"; done
  echo etcd-1 etcd-2 etcd-3 zookeeper-1 zookeeper-2 zookeeper-3 mysql
}

port_of() {
  case $1 in
    stock-redis) echo $STOCK_REDIS_PORT ;;
    lock-redis) echo $LOCK_REDIS_PORT ;;
    redlock-*) echo "${1#redlock-}" ;;
    failover-redis-a) echo "${FAILOVER_REDIS_PORTS[0]}" ;;
    failover-redis-b) echo "${FAILOVER_REDIS_PORTS[1]}" ;;
    sentinel-[123]) echo "${SENTINEL_PORTS[${1#sentinel-} - 1]}" ;;
    stock-cluster-[1-6]) echo "${STOCK_CLUSTER_PORTS[${1#stock-cluster-} - 1]}" ;;
    etcd-[123]) echo "${ETCD_CLIENT_PORTS[${1#etcd-} - 1]}" ;;
    zookeeper-[123]) echo "${ZK_CLIENT_PORTS[${1#zookeeper-} - 1]}" ;;
    mysql) echo $MYSQL_PORT ;;
    *) die "no member named '$1'; the members are: $(members | tr '\n' ' ')" ;;
  esac
}

# A member runs when its process exists and is not a zombie (a killed member whose
# parent, here init, has not reaped it yet is dead all the same).
running() {
  local state
  [[ -e $PIDS/$1.pid ]] || return 1
  state=$(ps -o state= -p "$(cat "$PIDS/$1.pid")" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}
not_running() { ! running "$1"; }

etcd_initial_cluster() {
  local i list=()
  for i in 1 2 3; do list+=("etcd-$i=http://127.0.0.1:${ETCD_PEER_PORTS[i - 1]}"); done
  (IFS=,; echo "${list[*]}")
}

zookeeper_servers() {
  local i
  for i in 1 2 3; do echo "server.$i=127.0.0.1:$((2880 + i)):$((3880 + i))"; done
}

# srvr, one of ZooKeeper's four-letter words: "Mode: leader" or "Mode: follower" once in a quorum.
zookeeper_mode() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; echo srvr >&3; cat <&3" 2>/dev/null | sed -n 's/^Mode: //p'
}
zookeeper_serving() { [[ $(zookeeper_mode "$1") =~ ^(leader|follower)$ ]]; }
etcd_healthy() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }

# ask_sentinel PORT SUBCOMMAND: the Sentinel on PORT's SENTINEL SUBCOMMAND about our master,
# one "key" or "value" a line. At most a second: a paused Sentinel accepts and never answers.
ask_sentinel() { timeout 1 redis-cli -p "$1" sentinel "$2" "$FAILOVER_MASTER_NAME" 2>/dev/null; }

# The port of the failover-redis member the Sentinels name master now, from the first that answers.
failover_master_port() {
  local port
  for port in "${SENTINEL_PORTS[@]}"; do
    ask_sentinel "$port" get-master-addr-by-name | sed -n 2p | grep . && return
  done
  return 1
}

# replication_field PORT FIELD: FIELD of the INFO replication of the Redis on PORT (role, master_port, ...).
replication_field() { timeout 1 redis-cli -p "$1" info replication | tr -d '\r' | sed -n "s/^$2://p"; }

# sentinel_sees_replica SENTINEL_PORT PORT MASTER_PORT: that Sentinel knows the member on PORT as a
# replica of MASTER_PORT, up and in sync. Its view comes from the replica's own INFO.
sentinel_sees_replica() {
  ask_sentinel "$1" replicas | paste - - | awk -F '\t' -v me="127.0.0.1:$2" -v master="$3" '
    $1 == "name" { mine = ($2 == me) }
    mine { seen[$1] = $2 }
    END { exit !(seen["flags"] == "slave" && seen["master-link-status"] == "ok" && seen["master-port"] == master) }'
}

# The failover group is ready to fail over: every running Sentinel names the same master and
# knows the other two, and every other running member replicates that master, in sync, as
# each Sentinel sees it. A failover started before that finds no replica to promote.
failover_group_ready() {
  local master member port sentinel replicas=()
  master=$(failover_master_port) || return 1
  for member in failover-redis-a failover-redis-b; do
    port=$(port_of "$member")
    if running "$member" && [[ $port != "$master" ]]; then replicas+=("$port"); fi
  done
  for port in "${replicas[@]}"; do
    [[ $(replication_field "$port" master_port) == "$master" &&
       $(replication_field "$port" master_link_status) == up ]] || return 1
  done
  for sentinel in sentinel-1 sentinel-2 sentinel-3; do
    running "$sentinel" || continue
    sentinel=$(port_of "$sentinel")
    [[ $(ask_sentinel "$sentinel" get-master-addr-by-name | sed -n 2p) == "$master" ]] || return 1
    [[ $(ask_sentinel "$sentinel" master | sed -n '/^num-other-sentinels$/{n;p}') == 2 ]] || return 1
    for port in "${replicas[@]}"; do sentinel_sees_replica "$sentinel" "$port" "$master" || return 1; done
  done
}

# A failover-redis member starts as a replica of the member the Sentinels name master now, or
# as the master when they name this one. Started without --replicaof, an old master came back
# as a second, empty master for 10 s, until Sentinel converted it (20 s until the Sentinels saw
# it in sync); with it, it is in sync in 0.1-1.3 s. A killed master restarted before the
# Sentinels move on comes back as the master, empty, and its replica then empties too.
# The replica loads a full sync straight from the socket (swapdb), so no dump.rdb is left for
# a restart to load: a member comes back empty, like lock-redis.
start_failover_redis() {
  local name=$1 port=$2 master replicaof=()
  poll 10 failover_master_port ||
    die "no Sentinel names the master of $FAILOVER_MASTER_NAME, and $name must know it; start them first: scripts/cluster.sh start sentinel-1 sentinel-2 sentinel-3"
  master=$(failover_master_port)
  [[ $master == "$port" ]] || replicaof=(--replicaof 127.0.0.1 "$master")
  start_redis_server "$name" "$port" --save '' --appendonly no \
    --repl-diskless-sync-delay 0 --repl-diskless-load swapdb "${replicaof[@]}"
}

# cluster_field PORT FIELD: FIELD of CLUSTER INFO of the node on PORT (cluster_state, cluster_known_nodes...).
cluster_field() { timeout 1 redis-cli -p "$1" cluster info | tr -d '\r' | sed -n "s/^$2://p"; }
stock_cluster_ok() { [[ $(cluster_field "$1" cluster_state) == ok ]]; }

# A node of the stock cluster. It remembers its cluster in its nodes.conf and rejoins it.
start_stock_cluster_node() {
  start_redis_server "$1" "$2" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout "$STOCK_CLUSTER_NODE_TIMEOUT_MS" --save '' --appendonly no \
    --repl-diskless-sync-delay 0
}

# Once every node runs: the first time, join the six into three masters with a replica each; a
# node started again without its nodes.conf (restart --empty) joins the cluster as a replica.
form_stock_cluster() {
  local port addresses=() known
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do addresses+=("127.0.0.1:$port"); done
  known=$(cluster_field "${STOCK_CLUSTER_PORTS[0]}" cluster_known_nodes)
  if [[ $known == 1 ]] && ! stock_cluster_ok "${STOCK_CLUSTER_PORTS[0]}"; then
    redis-cli --cluster create "${addresses[@]}" --cluster-replicas 1 --cluster-yes >"$LOGS/stock-cluster-create.log" 2>&1 ||
      die "redis-cli --cluster create failed; its output is in $LOGS/stock-cluster-create.log"
  fi
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do
    [[ $(cluster_field "$port" cluster_known_nodes) == 1 ]] || continue
    local member
    for member in "${STOCK_CLUSTER_PORTS[@]}"; do
      [[ $member != "$port" ]] && stock_cluster_ok "$member" && break
    done
    redis-cli --cluster add-node "127.0.0.1:$port" "127.0.0.1:$member" --cluster-slave >>"$LOGS/stock-cluster-create.log" 2>&1 ||
      die "the node on $port could not rejoin the stock cluster; see $LOGS/stock-cluster-create.log"
  done
}

# heal_stock_cluster: when a node of the stock cluster is not ok, or still has a slot half
# moved (IMPORTING or MIGRATING it: that node then sees the slot unassigned and answers
# CLUSTERDOWN, as a move cut short leaves it), forms the cluster again, empty: its data is
# the chaos runs' and the bench's, each of which resets its sale. `redis-cli --cluster fix`
# cannot always close such a slot when both nodes hold keys of it.
heal_stock_cluster() {
  local port healthy=yes
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do
    stock_cluster_ok "$port" || healthy=no
    if timeout 1 redis-cli -p "$port" cluster nodes | grep -q 'myself.*\[[0-9]*-[<>]-'; then healthy=no; fi
  done
  [[ $healthy == yes ]] && return 0
  say "stock cluster: a node is not ok, or holds a slot half moved; forming the cluster again, empty"
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do
    # A master must be empty before its reset; a replica's reset empties it.
    [[ $(cluster_field "$port" cluster_size) == 0 ]] || timeout 5 redis-cli -p "$port" flushall >/dev/null 2>&1 || true
    timeout 5 redis-cli -p "$port" cluster reset hard >/dev/null ||
      die "CLUSTER RESET HARD failed on $port; stop the stock cluster (scripts/cluster.sh stop stock-cluster-1 ...) and remove $RUN/stock-cluster-*"
  done
  form_stock_cluster
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do wait_for "stock-cluster on $port" 30 stock_cluster_ok "$port"; done
}

# Starts one member, without waiting for it (a cluster member waits for its peers).
launch() {
  local name=$1 port
  port=$(port_of "$name")
  running "$name" && { say "$name: already running on $port"; return; }
  listening "$port" && die "port $port ($name) is taken by a server this script did not start; the chaos suite kills its members, so stop that one first"
  case $name in
    stock-redis | redlock-*) start_redis_server "$name" "$port" --save '' --appendonly yes --appendfsync always ;;
    lock-redis) start_redis_server "$name" "$port" --save '' --appendonly no ;;
    failover-redis-*) start_failover_redis "$name" "$port" ;;
    stock-cluster-*) start_stock_cluster_node "$name" "$port" ;;
    sentinel-*)
      start_sentinel "$name" "$port" "$FAILOVER_MASTER_NAME" "${FAILOVER_REDIS_PORTS[0]}" "$SENTINEL_QUORUM" \
        down-after-milliseconds "$SENTINEL_DOWN_AFTER_MS" failover-timeout "$SENTINEL_FAILOVER_TIMEOUT_MS" ;;
    etcd-*) start_etcd_member "$name" "$port" "${ETCD_PEER_PORTS[${name#etcd-} - 1]}" "$(etcd_initial_cluster)" ;;
    zookeeper-*)
      mapfile -t servers < <(zookeeper_servers)
      start_zookeeper_member "$name" "$port" "${servers[@]}" ;;
    mysql) start_mariadb mysql "$port" ;;
  esac
}

# Waits until a member serves: etcd and ZooKeeper only once they are in a quorum, the failover
# group once a failover would find a replica to promote.
await() {
  local name=$1 port
  port=$(port_of "$name")
  case $name in
    failover-redis-* | sentinel-*) wait_for "$name" 30 failover_group_ready ;;
    stock-cluster-*) form_stock_cluster; wait_for "$name" 30 stock_cluster_ok "$port" ;;
    etcd-*) wait_for "$name" 60 etcd_healthy "$port" ;;
    zookeeper-*) wait_for "$name" 90 zookeeper_serving "$port" ;;
    *) wait_for "$name" 60 listening "$port" ;;
  esac
}

# start_members [NAME...]: every member, or NAME..., in members' order.
start_members() {
  local name names=()
  for name in "$@"; do port_of "$name" >/dev/null; done # refuse a bad name before any work
  for name in $(members); do
    if (($# == 0)) || [[ " $* " == *" $name "* ]]; then names+=("$name"); fi
  done
  "$ROOT/scripts/services.sh" install
  for name in "${names[@]}"; do launch "$name"; done
  for name in "${names[@]}"; do await "$name"; done
  if (($# > 0)); then say "started: $*; data in $RUN"; return; fi
  say "started: stock Redis (AOF, fsync always) on $STOCK_REDIS_PORT, lock Redis on $LOCK_REDIS_PORT," \
    "Redlock masters on ${REDLOCK_PORTS[*]}, the failover group's Redis on ${FAILOVER_REDIS_PORTS[*]} (master:" \
    "$(leader failover-redis)) and Sentinels on ${SENTINEL_PORTS[*]}, the stock cluster on" \
    "${STOCK_CLUSTER_PORTS[*]}, etcd on ${ETCD_CLIENT_PORTS[*]}," \
    "ZooKeeper on ${ZK_CLIENT_PORTS[*]}, MariaDB on $MYSQL_PORT; data in $RUN"
}

leader() {
  local i
  case $1 in
    etcd)
      # Each member's status names the leader's member id; the leader is the one whose own id that is.
      for i in 1 2 3; do
        local status
        status=$(curl -sf -X POST "http://127.0.0.1:${ETCD_CLIENT_PORTS[i - 1]}/v3/maintenance/status" -d '{}') || continue
        [[ $status =~ \"member_id\":\"([0-9]+)\".*\"leader\":\"([0-9]+)\" ]] || continue
        [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] && { echo "etcd-$i"; return; }
      done ;;
    zookeeper)
      for i in 1 2 3; do
        [[ $(zookeeper_mode "${ZK_CLIENT_PORTS[i - 1]}") == leader ]] && { echo "zookeeper-$i"; return; }
      done ;;
    failover-redis)
      local master name
      master=$(failover_master_port) &&
        for name in failover-redis-a failover-redis-b; do
          [[ $(port_of "$name") == "$master" ]] && { echo "$name"; return; }
        done ;;
    *) die "leader of what? etcd, zookeeper or failover-redis, got '$1'" ;;
  esac
  die "no $1 member says it leads (is the cluster up, with a quorum? scripts/cluster.sh status)"
}

env_settings() {
  local redlock=() sentinels=() etcd=() zookeeper=() port
  for port in "${REDLOCK_PORTS[@]}"; do redlock+=("redis://127.0.0.1:$port"); done
  for port in "${SENTINEL_PORTS[@]}"; do sentinels+=("127.0.0.1:$port"); done
  for port in "${ETCD_CLIENT_PORTS[@]}"; do etcd+=("http://127.0.0.1:$port"); done
  for port in "${ZK_CLIENT_PORTS[@]}"; do zookeeper+=("127.0.0.1:$port"); done
  local IFS=,
  echo "export SECKILL_REDIS_URL=redis://127.0.0.1:$STOCK_REDIS_PORT"
  echo "export SECKILL_LOCK_REDIS_URL=redis://127.0.0.1:$LOCK_REDIS_PORT"
  echo "export SECKILL_REDLOCK_URLS=${redlock[*]}"
  echo "export SECKILL_FAILOVER_LOCK_REDIS_URL=redis-sentinel://${sentinels[*]}#$FAILOVER_MASTER_NAME"
  echo "export SECKILL_STOCK_CLUSTER_URL=redis-cluster://127.0.0.1:${STOCK_CLUSTER_PORTS[0]},127.0.0.1:${STOCK_CLUSTER_PORTS[1]}"
  echo "export SECKILL_ETCD_ENDPOINTS=${etcd[*]}"
  echo "export SECKILL_ZK_CONNECT=${zookeeper[*]}"
  echo "export SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:$MYSQL_PORT/seckill"
}

status() {
  local name port state
  for name in $(members); do
    port=$(port_of "$name")
    if running "$name" && [[ $(ps -o state= -p "$(cat "$PIDS/$name.pid")") == T* ]]; then state="paused"
    elif running "$name"; then state="running"
    elif listening "$port"; then state="port taken by a server this script did not start"
    else state="not running"; fi
    case $name in
      zookeeper-*) running "$name" && state+=" ($(zookeeper_mode "$port"))" ;;
      failover-redis-* | stock-cluster-*)
        running "$name" && state+=" ($(replication_field "$port" role | sed s/slave/replica/))" ;;
    esac
    say "$name: $state (port $port)"
  done
  local who
  who=$(leader etcd 2>/dev/null) && say "etcd leader: $who"
  who=$(leader zookeeper 2>/dev/null) && say "zookeeper leader: $who"
  who=$(leader failover-redis 2>/dev/null) && say "failover-redis master (as the Sentinels name it): $who"
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do
    if stock_cluster_ok "$port" 2>/dev/null; then segments; break; fi
  done
  return 0
}

# A node of the stock cluster that answers, to ask about the cluster. Any node knows the
# whole map of slots, even while the cluster is failing a master over (cluster_state:fail).
stock_cluster_port() {
  local port
  for port in "${STOCK_CLUSTER_PORTS[@]}"; do
    [[ $(timeout 1 redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && { echo "$port"; return; }
  done
  die "no node of the stock cluster answers: scripts/cluster.sh start"
}

# The port of the master that serves slot $1 now.
slot_master_port() {
  timeout 2 redis-cli -p "$(stock_cluster_port)" --json cluster slots |
    jq -r --argjson slot "$1" '.[] | select(.[0] <= $slot and $slot <= .[1]) | .[2][1]'
}
segment_slot() { timeout 1 redis-cli -p "$(stock_cluster_port)" cluster keyslot "{segment:$1}" | tr -d '\r'; }
member_on() {
  local name
  for name in $(members); do [[ $(port_of "$name") == "$1" ]] && { echo "$name"; return; }; done
  die "no member listens on $1"
}

# move_segment N: the slot of segment N, from its master to the next master in port order.
move_segment() {
  local slot from to from_id to_id keys port
  slot=$(segment_slot "$1")
  from=$(slot_master_port "$slot")
  to=$(timeout 2 redis-cli -p "$from" --json cluster slots | jq -r --arg from "$from" \
    '[.[] | .[2][1] | tostring | select(. != $from)] | unique | .[0]')
  [[ -n $from && -n $to ]] || die "cannot tell where segment $1's slot is, or where to move it"
  from_id=$(redis-cli -p "$from" cluster myid | tr -d '\r')
  to_id=$(redis-cli -p "$to" cluster myid | tr -d '\r')
  redis-cli -p "$to" cluster setslot "$slot" importing "$from_id" >/dev/null
  redis-cli -p "$from" cluster setslot "$slot" migrating "$to_id" >/dev/null
  while keys=$(redis-cli -p "$from" cluster getkeysinslot "$slot" 100 | tr -d '\r') && [[ -n $keys ]]; do
    # shellcheck disable=SC2086 # one argument per key
    if ! redis-cli -p "$from" migrate 127.0.0.1 "$to" "" 0 5000 keys $keys | grep -q OK; then
      # Leave no slot half moved (see heal_stock_cluster): it stays where it was.
      for port in "$to" "$from"; do redis-cli -p "$port" cluster setslot "$slot" stable >/dev/null; done
      die "MIGRATE of segment $1's keys from $from to $to failed; the slot stays on $(member_on "$from")"
    fi
  done
  for port in "$to" "$from"; do redis-cli -p "$port" cluster setslot "$slot" node "$to_id" >/dev/null; done
  say "segment $1 (slot $slot) moved from $(member_on "$from") to $(member_on "$to")"
}

# The master of the stock cluster that serves each slot range, and the segments of the last
# reset whose hash tag falls in it. The keys' names are src/sale/keys.rs's.
segments() {
  local port prefix=${SECKILL_KEY_PREFIX:-} count i slot owner
  port=$(stock_cluster_port)
  count=$(timeout 2 redis-cli -c -p "$port" get "${prefix}{sale}:stock:segments" | tr -d '\r')
  [[ $count =~ ^[0-9]+$ ]] || { say "stock cluster: no sale yet (reset one with --redis-url \$SECKILL_STOCK_CLUSTER_URL)"; return 0; }
  # CLUSTER SHARDS-like view from CLUSTER SLOTS: "first last master-port" per range.
  local ranges
  ranges=$(timeout 2 redis-cli -p "$port" --json cluster slots | jq -r '.[] | "\(.[0]) \(.[1]) \(.[2][1])"')
  while read -r first last master; do
    local held=()
    for ((i = 0; i < count; i++)); do
      slot=$(timeout 1 redis-cli -p "$port" cluster keyslot "{segment:$i}" | tr -d '\r')
      if ((slot >= first && slot <= last)); then held+=("$i"); fi
    done
    owner=unknown
    for name in $(members); do
      if [[ $(port_of "$name") == "$master" ]]; then owner=$name; fi
    done
    say "stock cluster: $owner (port $master) serves slots $first-$last: segments ${held[*]:-none} of $count"
  done <<<"$ranges"
}

signal() {
  local sig=$1 name=$2
  port_of "$name" >/dev/null
  running "$name" || die "$name is not running (or was not started by this script)"
  kill "-$sig" "$(cat "$PIDS/$name.pid")"
}

mkdir -p "$PIDS" "$LOGS"
case "${1:-start}" in
  start) shift; start_members "$@" ;;
  stop) shift; stop_started "$@" ;;
  status) status ;;
  env) env_settings ;;
  kill)
    signal KILL "${2:?kill which member?}"
    poll 5 not_running "$2" || true # gone before we say so
    say "${2}: killed" ;;
  pause) signal STOP "${2:?pause which member?}"; say "${2}: paused" ;;
  resume) signal CONT "${2:?resume which member?}"; say "${2}: resumed" ;;
  restart)
    name=${2:?restart which member?}
    port_of "$name" >/dev/null
    running "$name" && die "$name is still running; kill it first"
    if [[ ${3:-} == --empty ]]; then rm -rf "${RUN:?}/$name"; say "$name: data removed"; fi
    launch "$name"
    await "$name"
    say "$name: started again on $(port_of "$name")" ;;
  leader) leader "${2:?leader of etcd, zookeeper or failover-redis?}" ;;
  port) port_of "${2:?port of which member?}" ;;
  segments) segments ;;
  heal-stock-cluster) heal_stock_cluster ;;
  shard-master) member_on "$(slot_master_port "$(segment_slot "${2:?shard-master of which segment?}")")" ;;
  move-segment) move_segment "${2:?move which segment?}" ;;
  *) die "unknown command '${1}'; use start, stop, status, env, kill, pause, resume, restart, leader, port, segments, shard-master or move-segment" ;;
esac
