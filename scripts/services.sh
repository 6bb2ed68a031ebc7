#!/usr/bin/env bash
# The backing servers, as plain processes on loopback: Redis, the lock Redis of
# redis-degrade, the five Redlock masters,
# etcd, ZooKeeper, MariaDB, and the test suite's own Redis.
#
#   scripts/services.sh start   install what is missing, start what is not already listening
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
MYSQL_SOCKET="$RUN/mysql/mysqld.sock"

# Debian packages the project needs; protobuf is for the etcd client's build.
PACKAGES=(curl redis-server redis-tools etcd-server zookeeper mariadb-server mariadb-client protobuf-compiler libprotobuf-dev)

say() { printf '[services] %s\n' "$*"; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for NAME SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local name=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      die "$name did not come up within ${seconds}s; its log is in $LOGS/$name.log"
    fi
    sleep 0.2
  done
}

install_missing() {
  local missing=()
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) -ne 0 ]]; then
    die "missing packages: ${missing[*]}. Install them with: sudo apt-get install -y ${missing[*]}"
  fi
  say "installing ${missing[*]} (apt-get; this takes a minute once)"
  # Package scripts must not start system-wide copies of the servers: we run our own.
  # The policy file is removed again however apt ends (the trap), never left behind.
  local policy=/usr/sbin/policy-rc.d ours=0
  if [[ ! -e $policy ]]; then # someone else's policy is left as it is
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && ours=1
    trap "rm -f '$policy'" EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >"$LOGS/apt.log" 2>&1 || die "apt-get update failed; see $LOGS/apt.log"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1 ||
    die "apt-get install ${missing[*]} failed; see $LOGS/apt.log"
  if ((ours)); then rm -f "$policy"; trap - EXIT; fi
  return 0
}

# start_daemon NAME COMMAND...: runs COMMAND detached, logs to .run/logs/NAME.log, remembers its pid.
start_daemon() {
  local name=$1; shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$PIDS/$name.pid"
}

start_redis() {
  if listening $REDIS_PORT; then say "redis: reusing the server on $REDIS_PORT"; return; fi
  mkdir -p "$RUN/redis"
  start_daemon redis redis-server --port $REDIS_PORT --bind 127.0.0.1 --dir "$RUN/redis" \
    --save '' --appendonly no --daemonize no
  wait_for redis 20 redis-cli -p $REDIS_PORT ping
  say "redis: started on $REDIS_PORT"
}

start_lock_redis() {
  if listening $LOCK_REDIS_PORT; then say "lock-redis: reusing the server on $LOCK_REDIS_PORT"; return; fi
  mkdir -p "$RUN/lock-redis"
  start_daemon lock-redis redis-server --port $LOCK_REDIS_PORT --bind 127.0.0.1 --dir "$RUN/lock-redis" \
    --save '' --appendonly no --daemonize no
  wait_for lock-redis 20 redis-cli -p $LOCK_REDIS_PORT ping
  say "lock-redis: started on $LOCK_REDIS_PORT"
}

# A Redlock master forgets the keys it granted if it restarts empty, and then two
# clients can hold the lock (see src/lock/redlock.rs). So each one writes every
# command to its append-only file and fsyncs it before it answers.
start_redlock_masters() {
  local port
  for port in "${REDLOCK_PORTS[@]}"; do
    if listening "$port"; then say "redlock-$port: reusing the server on $port"; continue; fi
    mkdir -p "$RUN/redlock-$port"
    start_daemon "redlock-$port" redis-server --port "$port" --bind 127.0.0.1 --dir "$RUN/redlock-$port" \
      --save '' --appendonly yes --appendfsync always --daemonize no
  done
  for port in "${REDLOCK_PORTS[@]}"; do wait_for "redlock-$port" 20 redis-cli -p "$port" ping; done
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
  mkdir -p "$dir"
  # 64 logical databases: tests that use the fixed stock keys each take one.
  start_daemon redis-test redis-server --port $TEST_REDIS_PORT --bind 127.0.0.1 --dir "$dir" \
    --save '' --appendonly no --daemonize no --databases 64
  wait_for redis-test 20 redis-cli -p $TEST_REDIS_PORT ping
  say "redis-test: started on $TEST_REDIS_PORT (for the tests only)"
}

start_etcd() {
  if listening $ETCD_PORT; then say "etcd: reusing the server on $ETCD_PORT"; return; fi
  mkdir -p "$RUN/etcd"
  start_daemon etcd etcd --name seckill --data-dir "$RUN/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "seckill=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd 30 listening $ETCD_PORT
  say "etcd: started on $ETCD_PORT"
}

start_zookeeper() {
  if listening $ZK_PORT; then say "zookeeper: reusing the server on $ZK_PORT"; return; fi
  local dir="$RUN/zookeeper"
  mkdir -p "$dir/conf" "$dir/data"
  # The admin server would take port 8080, where the first seckill instance listens.
  cat >"$dir/conf/zoo.cfg" <<EOF
tickTime=2000
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
EOF
  cp /etc/zookeeper/conf/log4j.properties "$dir/conf/" 2>/dev/null || true
  start_daemon zookeeper java -cp "$dir/conf:/usr/share/java/zookeeper.jar" \
    -Dzookeeper.log.dir="$LOGS" -Dzookeeper.root.logger=INFO,CONSOLE \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/conf/zoo.cfg"
  wait_for zookeeper 60 listening $ZK_PORT
  say "zookeeper: started on $ZK_PORT"
}

start_mysql() {
  if listening $MYSQL_PORT; then say "mariadb: reusing the server on $MYSQL_PORT"; return; fi
  local dir="$RUN/mysql"
  mkdir -p "$dir"
  if [[ ! -d $dir/data/mysql ]]; then
    mysql_install_db --no-defaults --user="$(id -un)" --datadir="$dir/data" --auth-root-authentication-method=socket \
      >"$LOGS/mysql-install.log" 2>&1 || die "mysql_install_db failed; see $LOGS/mysql-install.log"
  fi
  start_daemon mysql mariadbd --no-defaults --user="$(id -un)" --datadir="$dir/data" \
    --socket="$MYSQL_SOCKET" --port=$MYSQL_PORT --bind-address=127.0.0.1 --pid-file="$dir/mariadb.pid" \
    --skip-log-bin --max-connections=400
  wait_for mysql 60 mysqladmin --no-defaults --socket="$MYSQL_SOCKET" -uroot ping
  # The service's database and account (used by the MySQL lock strategies).
  mysql --no-defaults --socket="$MYSQL_SOCKET" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS seckill;
CREATE USER IF NOT EXISTS 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill';
CREATE USER IF NOT EXISTS 'seckill'@'localhost' IDENTIFIED BY 'seckill';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'127.0.0.1';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'localhost';
SQL
  say "mariadb: started on $MYSQL_PORT (database seckill, user seckill/seckill)"
}

stop_started() {
  shopt -s nullglob
  local pidfile name pid pidfiles=("$PIDS"/*.pid)
  if (($# > 0)); then pidfiles=(); for name in "$@"; do [[ -e $PIDS/$name.pid ]] && pidfiles+=("$PIDS/$name.pid"); done; fi
  for pidfile in "${pidfiles[@]}"; do
    name=$(basename "$pidfile" .pid)
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
      say "$name: stopped"
    fi
    rm -f "$pidfile"
  done
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
  start)
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
  *) die "unknown command '${1}'; use start, stop or status" ;;
esac
