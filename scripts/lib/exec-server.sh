#!/usr/bin/env bash
# One backing server, prepared and then run in the foreground: the one place that says how
# the project runs Redis, Redis Sentinel, etcd, ZooKeeper and MariaDB. scripts/lib/servers.sh
# starts its servers through it (services.sh, cluster.sh), and so do the tests' private servers.
#
# The last step is `exec`, so the caller's child process is the server itself: its pid is
# the server's pid, and a SIGKILL of it kills the server (a crash, for the chaos tests).
# Everything before it only prepares DIR, the server's own folder, so running it again
# over the same DIR is a restart with the data it had.
#
#   exec-server.sh redis DIR PORT [REDIS_OPTION...]
#       mkdir DIR; exec redis-server --port PORT --bind 127.0.0.1 --dir DIR --daemonize no REDIS_OPTION...
#       (e.g. --save '' --appendonly yes --appendfsync always)
#
#   exec-server.sh sentinel DIR PORT MASTER_NAME MASTER_PORT QUORUM [OPTION VALUE...]
#       writes DIR/sentinel.conf on the first start only, then exec redis-server DIR/sentinel.conf
#       --sentinel on 127.0.0.1:PORT. It watches the master MASTER_NAME at 127.0.0.1:MASTER_PORT;
#       QUORUM sentinels must agree that it is down. Each OPTION VALUE becomes
#       "sentinel OPTION MASTER_NAME VALUE" (e.g. down-after-milliseconds 1500). Sentinel rewrites
#       the file with what it learns (the master now, its replicas, the other sentinels, the
#       epochs), so a restart keeps it and rejoins with that; to change the options, remove DIR.
#       Each sentinel tells the others the address it reaches the master from, 127.0.0.1 on
#       loopback, so neither announce-ip nor resolve-hostnames is needed.
#
#   exec-server.sh etcd DIR NAME CLIENT_PORT PEER_PORT [INITIAL_CLUSTER]
#       exec etcd --name NAME --data-dir DIR/data, client and peer URLs http://127.0.0.1:PORT.
#       INITIAL_CLUSTER is etcd's "name=http://127.0.0.1:peer,..." list; without it, a cluster
#       of this member alone. A member started again over its data rejoins with what it had
#       (etcd reads the list only on the first start). History older than 5 minutes is
#       compacted (--auto-compaction-mode periodic --auto-compaction-retention 5m).
#
#   exec-server.sh zookeeper DIR CLIENT_PORT [MYID SERVER_LINE...]
#       writes DIR/conf/zoo.cfg (data in DIR/data), then exec java -Xmx256m ... QuorumPeerMain.
#       Without MYID, a standalone server. With it, the ensemble member MYID (written to
#       DIR/data/myid) of the SERVER_LINEs, "server.1=127.0.0.1:2881:3881"-style.
#       Answers the four-letter words ruok, srvr and mntr (make bench reads its packet count); the admin server is off; no cap on
#       connections from one address (the default, 60, is shared by every test on 127.0.0.1).
#
#   exec-server.sh mariadb DIR PORT [MARIADBD_OPTION...]
#       mysql_install_db into DIR/data on the first start (its output in DIR/install.log,
#       shown on stderr if it fails), then exec mariadbd on 127.0.0.1:PORT, socket
#       DIR/mysqld.sock, temporary files in DIR/tmp, no binary log, 400 connections at most,
#       and innodb_autoinc_lock_mode 0, which the `mysql` lock's fencing tokens need
#       (src/lock/mysql/mod.rs, step 5). MARIADBD_OPTIONs go last and so win: a test gives
#       --innodb-autoinc-lock-mode=1, MariaDB's default, to show what 0 prevents.
#
#   exec-server.sh mariadb-account DIR
#       not a server, and it does not wait: once the mariadb of DIR answers on its socket,
#       creates the database `seckill` and the account seckill/seckill (from 127.0.0.1 and
#       localhost) that the MySQL strategies use. Safe to run again; exits 0 when done.
#
# Nothing is read from the environment but PATH. Output: the server's own, on stdout and
# stderr; the caller decides where it goes. Exit status: that of the server, or 1 (with a
# message on stderr) when the preparation failed or the arguments are wrong.
set -euo pipefail

die() { printf 'exec-server.sh: %s\n' "$*" >&2; exit 1; }
usage() { printf 'usage:\n'; sed -n 's/^#   exec-server.sh/  exec-server.sh/p' "${BASH_SOURCE[0]}"; exit 1; } >&2

# The jar's own Class-Path has slf4j-api but no binding, so ZooKeeper logs nothing but
# SLF4J's one-line notice: there is no log level or log folder to set.
ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar

run_redis() {
  (($# >= 2)) || usage
  local dir=$1 port=$2; shift 2
  mkdir -p "$dir"
  exec redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize no "$@"
}

run_sentinel() {
  (($# >= 5 && $# % 2 == 1)) || usage
  local dir=$1 port=$2 master=$3 master_port=$4 quorum=$5; shift 5
  mkdir -p "$dir"
  if [[ ! -e $dir/sentinel.conf ]]; then
    {
      printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir" \
        "sentinel monitor $master 127.0.0.1 $master_port $quorum"
      while (($# > 0)); do echo "sentinel $1 $master $2"; shift 2; done
    } >"$dir/sentinel.conf"
  fi
  exec redis-server "$dir/sentinel.conf" --sentinel
}

run_etcd() {
  (($# == 4 || $# == 5)) || usage
  local dir=$1 name=$2 client=$3 peer=$4
  local cluster=${5:-$name=http://127.0.0.1:$peer}
  mkdir -p "$dir"
  # Every lock grant is a new revision, and etcd keeps every old one until a compaction:
  # compact as real deployments do (Kubernetes compacts every 5 minutes), keeping 5 minutes.
  exec etcd --name "$name" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --auto-compaction-mode periodic --auto-compaction-retention 5m
}

run_zookeeper() {
  (($# == 2 || $# >= 4)) || usage
  local dir=$1 client=$2; shift 2
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
4lw.commands.whitelist=ruok,srvr,mntr
maxClientCnxns=0
CFG
  if (($# > 0)); then
    [[ $1 =~ ^[0-9]+$ ]] || die "zookeeper: MYID must be a number, got '$1'"
    echo "$1" >"$dir/data/myid"
    shift
    local line
    for line in "$@"; do [[ $line == server.* ]] || die "zookeeper: a SERVER_LINE starts with server.N=, got '$line'"; done
    printf '%s\n' "$@" >>"$dir/conf/zoo.cfg"
  fi
  exec java -Xmx256m -cp "$dir/conf:$ZOOKEEPER_JAR" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/conf/zoo.cfg"
}

run_mariadb() {
  (($# >= 2)) || usage
  local dir port=$2 user
  # mariadbd changes into its data folder first: a relative DIR would then point elsewhere.
  dir=$(realpath -m "$1")
  shift 2
  user=$(id -un)
  # A temporary folder of its own: two servers installed at once in the shared /tmp
  # removed each other's temporary tables ("Unknown table 'mysql.tmp_user_sys'").
  mkdir -p "$dir/tmp"
  if [[ ! -d $dir/data/mysql ]]; then
    TMPDIR=$dir/tmp mysql_install_db --no-defaults --user="$user" --datadir="$dir/data" \
      --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 ||
      { cat "$dir/install.log" >&2; die "mysql_install_db failed (above; also in $dir/install.log)"; }
  fi
  exec mariadbd --no-defaults --user="$user" --datadir="$dir/data" --tmpdir="$dir/tmp" \
    --socket="$dir/mysqld.sock" --port="$port" --bind-address=127.0.0.1 --pid-file="$dir/mariadb.pid" \
    --skip-log-bin --max-connections=400 --innodb-autoinc-lock-mode=0 "$@"
}

run_mariadb_account() {
  (($# == 1)) || usage
  mysql --no-defaults --socket="$1/mysqld.sock" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS seckill;
CREATE USER IF NOT EXISTS 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill';
CREATE USER IF NOT EXISTS 'seckill'@'localhost' IDENTIFIED BY 'seckill';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'127.0.0.1';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'localhost';
SQL
}

kind=${1:-}
shift || true
case $kind in
  redis | sentinel | etcd | zookeeper | mariadb) "run_$kind" "$@" ;;
  mariadb-account) run_mariadb_account "$@" ;;
  *) usage ;;
esac
