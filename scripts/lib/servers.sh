# shellcheck shell=bash
# How services.sh starts one Redis, etcd member, ZooKeeper member or MariaDB as a plain
# process on loopback, waits for it, and stops only what it started; and the scripts' one
# wait loop. The chaos suite's cluster does the same in Rust (scripts/cluster.sh).
#
# The caller sets RUN (the data folder), PIDS and LOGS, and defines say and die.

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# poll SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (status 0), or until
# SECONDS have passed (status 1). The scripts' one wait loop.
poll() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# wait_for NAME SECONDS COMMAND...: polls COMMAND until it succeeds, or dies naming NAME's log.
wait_for() {
  local name=$1 seconds=$2; shift 2
  poll "$seconds" "$@" || die "$name did not come up within ${seconds}s; its log is in $LOGS/$name.log"
}

# start_daemon NAME COMMAND...: runs COMMAND detached, logs to $LOGS/NAME.log, remembers its pid.
start_daemon() {
  local name=$1; shift
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$PIDS/$name.pid"
}

# How each kind of server is prepared and run (flags, config, data layout) is said once,
# in exec-server.sh, for these scripts and the tests' private servers alike. NAME's folder is $RUN/NAME.
EXEC_SERVER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/exec-server.sh"

# start_redis_server NAME PORT [REDIS OPTION...]: a Redis with its data in $RUN/NAME.
start_redis_server() {
  local name=$1 port=$2; shift 2
  start_daemon "$name" "$EXEC_SERVER" redis "$RUN/$name" "$port" "$@"
  wait_for "$name" 20 redis-cli -p "$port" ping
}

# start_etcd_member NAME CLIENT_PORT PEER_PORT INITIAL_CLUSTER: one etcd member, data in $RUN/NAME.
# INITIAL_CLUSTER is etcd's "name=http://127.0.0.1:peer,..." list (just this member for a single node).
start_etcd_member() {
  start_daemon "$1" "$EXEC_SERVER" etcd "$RUN/$1" "$@"
}

# start_zookeeper_member NAME CLIENT_PORT [SERVER_LINE...]: one ZooKeeper server, data in $RUN/NAME.
# With no SERVER_LINE it is a standalone server; with "server.1=127.0.0.1:2881:3881"-style lines it is
# the member whose "myid" is the number at the end of NAME.
start_zookeeper_member() {
  local name=$1 client=$2; shift 2
  local myid=()
  (($# > 0)) && myid=("${name##*-}")
  start_daemon "$name" "$EXEC_SERVER" zookeeper "$RUN/$name" "$client" "${myid[@]}" "$@"
}

# start_mariadb NAME PORT: a MariaDB with its data in $RUN/NAME, the database `seckill` and
# the account seckill/seckill that the MySQL lock strategies use.
start_mariadb() {
  local name=$1 port=$2
  start_daemon "$name" "$EXEC_SERVER" mariadb "$RUN/$name" "$port"
  wait_for "$name" 60 mysqladmin --no-defaults --socket="$RUN/$name/mysqld.sock" -uroot ping
  "$EXEC_SERVER" mariadb-account "$RUN/$name"
}

gone() { ! kill -0 "$1" 2>/dev/null; }

# build_the_cluster_binary: builds the binary behind scripts/cluster.sh once, and has every
# later call of it run that binary as it is (SECKILL_CLUSTER_BIN): a fault timed to the
# moment should not wait for cargo to find the build up to date. The caller sets ROOT.
build_the_cluster_binary() {
  (cd "$ROOT" && cargo build --release --quiet -p testkit --bin cluster) ||
    die "could not build the cluster binary behind scripts/cluster.sh (cargo said why, above)"
  export SECKILL_CLUSTER_BIN="$ROOT/target/release/cluster"
}

# stop_started [NAME...]: stops what this script started (its pid files in $PIDS), or only NAME...
# Servers that were reused, not started, have no pid file and keep running.
stop_started() {
  shopt -s nullglob
  local pidfile name pid pidfiles=("$PIDS"/*.pid)
  if (($# > 0)); then pidfiles=(); for name in "$@"; do [[ -e $PIDS/$name.pid ]] && pidfiles+=("$PIDS/$name.pid"); done; fi
  for pidfile in "${pidfiles[@]}"; do
    name=$(basename "$pidfile" .pid)
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -CONT "$pid" 2>/dev/null || true # a paused server cannot act on SIGTERM
      kill "$pid" 2>/dev/null || true
      poll 10 gone "$pid" || kill -9 "$pid" 2>/dev/null || true
      say "$name: stopped"
    fi
    rm -f "$pidfile"
  done
}
