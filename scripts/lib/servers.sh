# Shared by services.sh (single servers for the demo and the tests) and cluster.sh
# (the replicated servers of the chaos suite): how to start one Redis, etcd member,
# ZooKeeper member or MariaDB as a plain process on loopback, wait for it, and stop
# only what we started.
#
# The caller sets RUN (the data folder), PIDS and LOGS, and defines say and die.

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

# start_daemon NAME COMMAND...: runs COMMAND detached, logs to $LOGS/NAME.log, remembers its pid.
start_daemon() {
  local name=$1; shift
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$PIDS/$name.pid"
}

# start_redis_server NAME PORT [REDIS OPTION...]: a Redis with its data in $RUN/NAME.
start_redis_server() {
  local name=$1 port=$2; shift 2
  mkdir -p "$RUN/$name"
  start_daemon "$name" redis-server --port "$port" --bind 127.0.0.1 --dir "$RUN/$name" --daemonize no "$@"
  wait_for "$name" 20 redis-cli -p "$port" ping
}

# start_etcd_member NAME CLIENT_PORT PEER_PORT INITIAL_CLUSTER: one etcd member, data in $RUN/NAME.
# INITIAL_CLUSTER is etcd's "name=http://127.0.0.1:peer,..." list (just this member for a single node).
# A member restarted over its data directory rejoins with what it had; the list is read only once.
start_etcd_member() {
  local name=$1 client=$2 peer=$3 cluster=$4
  mkdir -p "$RUN/$name"
  start_daemon "$name" etcd --name "$name" --data-dir "$RUN/$name/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster"
}

# start_zookeeper_member NAME CLIENT_PORT [SERVER_LINE...]: one ZooKeeper server, data in $RUN/NAME.
# With no SERVER_LINE it is a standalone server; with "server.1=127.0.0.1:2881:3881"-style lines it is
# the member whose "myid" is the number at the end of NAME.
start_zookeeper_member() {
  local name=$1 client=$2; shift 2
  local dir="$RUN/$name"
  mkdir -p "$dir/conf" "$dir/data"
  # The admin server would take port 8080, where the first seckill instance listens.
  cat >"$dir/conf/zoo.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$client
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
  if (($# > 0)); then
    printf '%s\n' "$@" >>"$dir/conf/zoo.cfg"
    echo "${name##*-}" >"$dir/data/myid"
  fi
  cp /etc/zookeeper/conf/log4j.properties "$dir/conf/" 2>/dev/null || true
  start_daemon "$name" java -Xmx256m -cp "$dir/conf:/usr/share/java/zookeeper.jar" \
    -Dzookeeper.log.dir="$LOGS" -Dzookeeper.root.logger=INFO,CONSOLE \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/conf/zoo.cfg"
}

# start_mariadb NAME PORT: a MariaDB with its data in $RUN/NAME, the database `seckill` and
# the account seckill/seckill that the MySQL lock strategies use.
start_mariadb() {
  local name=$1 port=$2
  local dir="$RUN/$name" socket="$RUN/$name/mysqld.sock"
  mkdir -p "$dir"
  if [[ ! -d $dir/data/mysql ]]; then
    mysql_install_db --no-defaults --user="$(id -un)" --datadir="$dir/data" --auth-root-authentication-method=socket \
      >"$LOGS/$name-install.log" 2>&1 || die "mysql_install_db failed; see $LOGS/$name-install.log"
  fi
  start_daemon "$name" mariadbd --no-defaults --user="$(id -un)" --datadir="$dir/data" \
    --socket="$socket" --port="$port" --bind-address=127.0.0.1 --pid-file="$dir/mariadb.pid" \
    --skip-log-bin --max-connections=400
  wait_for "$name" 60 mysqladmin --no-defaults --socket="$socket" -uroot ping
  mysql --no-defaults --socket="$socket" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS seckill;
CREATE USER IF NOT EXISTS 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill';
CREATE USER IF NOT EXISTS 'seckill'@'localhost' IDENTIFIED BY 'seckill';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'127.0.0.1';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'localhost';
SQL
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
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
      say "$name: stopped"
    fi
    rm -f "$pidfile"
  done
}
