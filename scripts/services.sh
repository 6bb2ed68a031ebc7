#!/usr/bin/env bash
# The backing servers, as plain processes on loopback: Redis, the lock Redis of
# redis-degrade, the five Redlock masters,
# etcd, ZooKeeper, MariaDB, and the test suite's own Redis.
#
#   scripts/services.sh start   install what is missing, start what is not already listening
#   scripts/services.sh start NAME...
#                               only those servers, and only the packages they need whose program
#                               is not on the PATH already: `start redis` needs no root when
#                               `redis-server` is there (the Redis lessons, see scripts/lessons.sh)
#   scripts/services.sh install only install the Debian packages that are missing
#   scripts/services.sh stop [NAME...]
#                               stop only what `start` started (servers it reused keep running);
#                               NAME is redis, lock-redis, redlock-6381 ... redlock-6385, redis-test, etcd,
#                               zookeeper or mysql
#   scripts/services.sh status  say what listens on each port
#
# Data, logs and pid files live under .run/ in the project. A server already listening
# on its standard port is reused and left alone, so this plays well with a system
# service or a `docker compose up` that got there first.
#
# The tests never touch those: they write only to redis-test, a Redis this script
# starts on its own port with its data in .run/redis-test, and they check that it is
# that one (`CONFIG GET dir`) before they write. A foreign server on that port is an error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
PIDS="$RUN/pids"
LOGS="$RUN/logs"

REDIS_PORT=6379
TEST_REDIS_PORT=6390
# A Redis for the lock alone (--lock-redis-url), so the lock can fail while the stock stays readable.
LOCK_REDIS_PORT=6380
# Five independent Redis masters for --lock redlock (no replication between them).
REDLOCK_PORTS=(6381 6382 6383 6384 6385)
ETCD_PORT=2379
ETCD_PEER_PORT=2380
ZK_PORT=2181
MYSQL_PORT=3306

# Debian packages the project needs; protobuf is for the etcd client's build, chromium
# for the dashboard's browser test, faketime and gcc for the clocks that jump
# (libfaketime for seckill, and gcc compiles scripts/lib/clock-shift.c for redis-server),
# nftables for the cut of a replication link (scripts/lib/replication.sh), gdb to stop
# one MariaDB thread mid-insert (tests/it/lock/mysql_token_order.rs), jq for lesson 8's grant log
# (scripts/lessons/08-degrade.sh) and the JSON that chaos.sh, clock-jump.sh and
# demo-degrade.sh read, shellcheck for the test that lints every script
# (tests/it/project/shell.rs). redis-server also runs the Sentinels of scripts/cluster.sh (--sentinel).
PACKAGES=(curl redis-server redis-tools etcd-server zookeeper mariadb-server mariadb-client protobuf-compiler libprotobuf-dev
          chromium faketime gcc nftables gdb jq shellcheck)

say() { printf '[services] %s\n' "$*"; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"
source "$ROOT/scripts/lib/packages.sh" # install_packages

# The browser tests' packages (playwright-core, which drives Debian's chromium, and mermaid,
# which renders the docs' diagrams; both pinned in tests/browser/package-lock.json), from the
# npm registry with the machine's Node.js. A checkout missing either gets both again.
install_browser_driver() {
  [[ -d $ROOT/tests/browser/node_modules/playwright-core && -d $ROOT/tests/browser/node_modules/mermaid ]] && return 0
  command -v npm >/dev/null || die "npm is missing: the browser tests (dashboard, diagrams) need Node.js 20 or newer with npm"
  say "installing playwright-core and mermaid for the browser tests (npm ci in tests/browser)"
  npm ci --prefix "$ROOT/tests/browser" --no-audit --no-fund >>"$LOGS/npm.log" 2>&1 ||
    die "npm ci in tests/browser failed; see $LOGS/npm.log"
}

install_missing() {
  install_browser_driver
  install_packages "${PACKAGES[@]}"
}

# The program that shows a server can run here, and the packages that bring it.
program_of() {
  case $1 in
    redis | lock-redis | redlock | redis-test) echo redis-server ;;
    etcd) echo etcd ;;
    zookeeper) echo java ;;
    mysql) echo mariadbd ;;
    *) die "no server '$1'; name redis, lock-redis, redlock, redis-test, etcd, zookeeper or mysql" ;;
  esac
}
packages_of() {
  case $1 in
    redis | lock-redis | redlock | redis-test) echo redis-server redis-tools ;;
    etcd) echo etcd-server ;;
    zookeeper) echo zookeeper ;;
    mysql) echo mariadb-server mariadb-client ;;
  esac
}

# start_only NAME...: the packages of NAME... whose program is missing, then those servers.
start_only() {
  local name packages=()
  for name in "$@"; do program_of "$name" >/dev/null; done # refuses an unknown name, here
  for name in "$@"; do
    # mariadbd lives in /usr/sbin, which a user's PATH may lack.
    command -v "$(program_of "$name")" >/dev/null || [[ -x /usr/sbin/$(program_of "$name") ]] ||
      read -ra packages <<<"${packages[*]} $(packages_of "$name")"
  done
  ((${#packages[@]} == 0)) || install_packages "${packages[@]}"
  for name in "$@"; do
    case $name in
      redlock) start_redlock_masters ;;
      redis-test) start_test_redis ;;
      *) "start_${name//-/_}" ;;
    esac
  done
}

# reusing NAME PORT: true, and says so, when a server already listens on PORT.
reusing() { listening "$2" && say "$1: reusing the server on $2"; }

start_redis() {
  reusing redis "$REDIS_PORT" && return
  start_redis_server redis $REDIS_PORT --save '' --appendonly no
  say "redis: started on $REDIS_PORT"
}

start_lock_redis() {
  reusing lock-redis "$LOCK_REDIS_PORT" && return
  start_redis_server lock-redis $LOCK_REDIS_PORT --save '' --appendonly no
  say "lock-redis: started on $LOCK_REDIS_PORT"
}

# A Redlock master forgets the keys it granted if it restarts empty, and then two
# clients can hold the lock (see src/lock/redlock/masters.rs). So each one writes every
# command to its append-only file and fsyncs it before it answers.
start_redlock_masters() {
  local port
  for port in "${REDLOCK_PORTS[@]}"; do
    reusing "redlock-$port" "$port" && continue
    start_redis_server "redlock-$port" "$port" --save '' --appendonly yes --appendfsync always
  done
  say "redlock: five masters on ${REDLOCK_PORTS[*]}"
}

# The tests' Redis: always ours, never reused from someone else.
start_test_redis() {
  local dir="$RUN/redis-test"
  if listening $TEST_REDIS_PORT; then
    local theirs
    theirs=$(redis-cli -p $TEST_REDIS_PORT config get dir 2>/dev/null | sed -n 2p)
    [[ $theirs == "$dir" ]] ||
      die "port $TEST_REDIS_PORT (the tests' own Redis) is taken by another server (its dir is '${theirs:-unknown}'); the tests write there, so stop it first"
    say "redis-test: already running on $TEST_REDIS_PORT"
    return
  fi
  # Each test sells under a key prefix of its own (testkit/src/test_redis.rs): one database.
  start_redis_server redis-test $TEST_REDIS_PORT --save '' --appendonly no
  say "redis-test: started on $TEST_REDIS_PORT (for the tests only)"
}

start_etcd() {
  reusing etcd "$ETCD_PORT" && return
  start_etcd_member etcd $ETCD_PORT $ETCD_PEER_PORT "etcd=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd 30 listening $ETCD_PORT
  say "etcd: started on $ETCD_PORT"
}

start_zookeeper() {
  reusing zookeeper "$ZK_PORT" && return
  start_zookeeper_member zookeeper $ZK_PORT
  wait_for zookeeper 60 listening $ZK_PORT
  say "zookeeper: started on $ZK_PORT"
}

start_mysql() {
  local socket="$RUN/mysql/mysqld.sock" mode
  # Ours (it answers on our socket), started by an older checkout in another mode: the
  # mysql lock needs innodb_autoinc_lock_mode 0 (src/lock/mysql/mod.rs, step 5). It holds
  # only lock rows, which a restart may drop. Someone else's server is reused as it is,
  # and `--lock mysql` says what to change if it has to.
  mode=$(mysql --no-defaults --socket="$socket" -uroot -N -e 'SELECT @@innodb_autoinc_lock_mode' 2>/dev/null) || mode=""
  if [[ -n $mode && $mode != 0 ]]; then
    say "mariadb: restarting it with innodb_autoinc_lock_mode 0 (it ran with $mode)"
    mysqladmin --no-defaults --socket="$socket" -uroot shutdown
    # shellcheck disable=SC2016 # eval expands it, at each try
    wait_for mariadb 60 eval '! listening $MYSQL_PORT'
  fi
  reusing mariadb "$MYSQL_PORT" && return
  start_mariadb mysql $MYSQL_PORT
  say "mariadb: started on $MYSQL_PORT (database seckill, user seckill/seckill)"
}

status() {
  local name port
  local redlock=()
  for port in "${REDLOCK_PORTS[@]}"; do redlock+=("redlock-$port:$port"); done
  for name_port in redis:$REDIS_PORT lock-redis:$LOCK_REDIS_PORT "${redlock[@]}" redis-test:$TEST_REDIS_PORT etcd:$ETCD_PORT zookeeper:$ZK_PORT mariadb:$MYSQL_PORT; do
    name=${name_port%%:*}; port=${name_port##*:}
    if listening "$port"; then say "$name: listening on $port"; else say "$name: not running (port $port)"; fi
  done
}

mkdir -p "$PIDS" "$LOGS"
case "${1:-start}" in
  install) install_missing ;;
  start)
    shift || true
    if (($# > 0)); then start_only "$@"; exit; fi
    install_missing
    start_redis
    start_lock_redis
    start_redlock_masters
    start_test_redis
    start_etcd
    start_zookeeper
    start_mysql
    ;;
  stop) shift; stop_started "$@" ;;
  status) status ;;
  *) die "unknown command '${1}'; use start, install, stop or status" ;;
esac
