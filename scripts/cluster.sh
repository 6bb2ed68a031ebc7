#!/usr/bin/env bash
# The servers of the chaos suite, replicated where the strategy is: a 3-member etcd
# cluster, a 3-member ZooKeeper ensemble, five Redlock masters, the stock Redis with
# every write fsynced to its append-only file (so a kill -9 loses no sale), a lock
# Redis for redis-degrade, and a MariaDB. Each on its own ports, beside `make services`,
# with its data under .run/cluster/. The chaos runner kills, pauses and restarts them;
# it never touches the servers of `make services` or anyone else's.
#
#   scripts/cluster.sh start            start every member that is not running
#   scripts/cluster.sh stop [NAME...]   stop what start started (all, or NAME...)
#   scripts/cluster.sh status           each member, its port, and who leads
#   scripts/cluster.sh env              the SECKILL_* settings that point seckill at the cluster:
#                                       eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh kill NAME        kill -9 one member
#   scripts/cluster.sh pause NAME | resume NAME     SIGSTOP / SIGCONT one member
#   scripts/cluster.sh restart NAME [--empty]       start a killed member again (--empty: without its data)
#   scripts/cluster.sh leader etcd|zookeeper        the name of the member that leads now
#
# NAME is stock-redis, lock-redis, redlock-6481 ... redlock-6485, etcd-1 ... etcd-3,
# zookeeper-1 ... zookeeper-3 or mysql.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run/cluster"
PIDS="$RUN/pids"
LOGS="$RUN/logs"

STOCK_REDIS_PORT=6479
LOCK_REDIS_PORT=6480
REDLOCK_PORTS=(6481 6482 6483 6484 6485)
ETCD_CLIENT_PORTS=(12379 22379 32379) # etcd-1, etcd-2, etcd-3
ETCD_PEER_PORTS=(12380 22380 32380)
ZK_CLIENT_PORTS=(2182 2183 2184) # zookeeper-1, -2, -3
MYSQL_PORT=3307

say() { printf '[cluster] %s\n' "$*"; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"

members() {
  echo stock-redis lock-redis
  for port in "${REDLOCK_PORTS[@]}"; do echo "redlock-$port"; done
  echo etcd-1 etcd-2 etcd-3 zookeeper-1 zookeeper-2 zookeeper-3 mysql
}

port_of() {
  case $1 in
    stock-redis) echo $STOCK_REDIS_PORT ;;
    lock-redis) echo $LOCK_REDIS_PORT ;;
    redlock-*) echo "${1#redlock-}" ;;
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

# Starts one member, without waiting for it (a cluster member waits for its peers).
launch() {
  local name=$1 port
  port=$(port_of "$name")
  running "$name" && { say "$name: already running on $port"; return; }
  listening "$port" && die "port $port ($name) is taken by a server this script did not start; the chaos suite kills its members, so stop that one first"
  case $name in
    stock-redis | redlock-*) start_redis_server "$name" "$port" --save '' --appendonly yes --appendfsync always ;;
    lock-redis) start_redis_server "$name" "$port" --save '' --appendonly no ;;
    etcd-*) start_etcd_member "$name" "$port" "${ETCD_PEER_PORTS[${name#etcd-} - 1]}" "$(etcd_initial_cluster)" ;;
    zookeeper-*)
      mapfile -t servers < <(zookeeper_servers)
      start_zookeeper_member "$name" "$port" "${servers[@]}" ;;
    mysql) start_mariadb mysql "$port" ;;
  esac
}

# Waits until a member serves: etcd and ZooKeeper only once they are in a quorum.
await() {
  local name=$1 port
  port=$(port_of "$name")
  case $name in
    etcd-*) wait_for "$name" 60 etcd_healthy "$port" ;;
    zookeeper-*) wait_for "$name" 90 zookeeper_serving "$port" ;;
    *) wait_for "$name" 60 listening "$port" ;;
  esac
}

start_all() {
  "$ROOT/scripts/services.sh" install
  local name
  for name in $(members); do launch "$name"; done
  for name in $(members); do await "$name"; done
  say "started: stock Redis (AOF, fsync always) on $STOCK_REDIS_PORT, lock Redis on $LOCK_REDIS_PORT," \
    "Redlock masters on ${REDLOCK_PORTS[*]}, etcd on ${ETCD_CLIENT_PORTS[*]}, ZooKeeper on ${ZK_CLIENT_PORTS[*]}," \
    "MariaDB on $MYSQL_PORT; data in $RUN"
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
    *) die "leader of what? etcd or zookeeper, got '$1'" ;;
  esac
  die "no $1 member says it leads (is the cluster up, with a quorum? scripts/cluster.sh status)"
}

env_settings() {
  local redlock=() etcd=() zookeeper=() port
  for port in "${REDLOCK_PORTS[@]}"; do redlock+=("redis://127.0.0.1:$port"); done
  for port in "${ETCD_CLIENT_PORTS[@]}"; do etcd+=("http://127.0.0.1:$port"); done
  for port in "${ZK_CLIENT_PORTS[@]}"; do zookeeper+=("127.0.0.1:$port"); done
  local IFS=,
  echo "export SECKILL_REDIS_URL=redis://127.0.0.1:$STOCK_REDIS_PORT"
  echo "export SECKILL_LOCK_REDIS_URL=redis://127.0.0.1:$LOCK_REDIS_PORT"
  echo "export SECKILL_REDLOCK_URLS=${redlock[*]}"
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
    case $name in zookeeper-*) running "$name" && state+=" ($(zookeeper_mode "$port"))" ;; esac
    say "$name: $state (port $port)"
  done
  local who
  who=$(leader etcd 2>/dev/null) && say "etcd leader: $who"
  who=$(leader zookeeper 2>/dev/null) && say "zookeeper leader: $who"
  return 0
}

signal() {
  local sig=$1 name=$2
  port_of "$name" >/dev/null
  running "$name" || die "$name is not running (or was not started by this script)"
  kill "-$sig" "$(cat "$PIDS/$name.pid")"
}

mkdir -p "$PIDS" "$LOGS"
case "${1:-start}" in
  start) start_all ;;
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
  leader) leader "${2:?leader of etcd or zookeeper?}" ;;
  *) die "unknown command '${1}'; use start, stop, status, env, kill, pause, resume, restart or leader" ;;
esac
