# shellcheck shell=bash
# Shared by the scripts that put seckill under load (demo.sh, bench.sh, chaos.sh,
# demo-degrade.sh): one instance on each port in PORTS, started, awaited and stopped
# together; the release build; the wait for a sale under way, so that a fault strikes
# mid-sale; and, for demo.sh and bench.sh, the backing servers a script started, so
# that it stops only those.
#
# The caller sets ROOT, RUN, LOGS and PORTS, defines say and die, and sources servers.sh
# (for `listening` and `wait_for`).

# The lock Redis of redis-degrade (`--lock-redis-url`): that of `make services`. chaos.sh
# sets it to the cluster's after sourcing this file.
LOCK_REDIS_URL=redis://127.0.0.1:6380
# The stock cluster of `make cluster` (scripts/cluster.sh: three masters, a replica each),
# for `+stock-cluster`; `scripts/cluster.sh env` prints the same URL.
STOCK_CLUSTER_URL=redis-cluster://127.0.0.1:7001,127.0.0.1:7002
# shellcheck disable=SC2034 # read by bench.sh, which sources this file
STOCK_CLUSTER_NODES=(stock-cluster-1 stock-cluster-2 stock-cluster-3 stock-cluster-4 stock-cluster-5 stock-cluster-6)

# A run is a strategy (`redis`), or a strategy and a variant after a `+`:
#   +no-local-queue  `--local-queue false`: every buyer asks the lock itself, instead of
#                    only the head of its instance's local queue (what the queue saves)
#   +no-hand-over    `--hand-over false`: a release never hands the lock to the next buyer
#                    of its local queue in its own statement (what the hand-over saves)
#   +no-semaphore    for mysql and mysql-version: no local queue and no semaphore in front of
#                    MySQL (`--mysql-permits 0`, a pool of 64), so every waiter polls it
#   +segments-N      `--stock-segments N`: the stock split into N segments, each behind a
#                    lock key of its own (src/sale/segments.rs)
#   +sold-out-flag   `--sold-out-flag true`: once every segment is known empty, "sold out"
#                    without a lock (src/sale/sold_out.rs)
#   +one-per-buyer   `--one-per-buyer true`: a buyer gets one unit at most, checked in the
#                    script that takes it (src/sale/buyers.rs)
#   +orders          `--orders true`: each unit sold becomes an order row in MySQL, through
#                    the Redis Stream stock:orders and the instances' consumer group (src/orders/mod.rs)
#   +stock-wait      `--stock-wait-replicas 1`: each sale waits for a replica (`WAIT`) before
#                    its buyer is told; the stock's Redis gets a replica for the run (src/sale/stock/mod.rs)
#   +group-commit    `--group-commit true`: one grant sells to every buyer then waiting in the
#                    instance's local queue (src/sale/group/mod.rs)
#   +lock-redis      `--lock-redis-url`: the lock in a Redis of its own (LOCK_REDIS_URL), apart
#                    from the stock; `redis-degrade` always keeps it there
#   +stock-cluster   `--redis-url` of the stock cluster (STOCK_CLUSTER_URL): the sale's keys
#                    spread over three masters by hash slot (src/store/redis_cluster.rs); the
#                    caller starts its nodes. The redis lock cannot live on a cluster: add +lock-redis
# Variants add up: `redis+segments-16+sold-out-flag`.
variant_flags() {
  local strategy=${1%%+*} variants=() variant
  [[ $1 == *+* ]] && IFS=+ read -r -a variants <<<"${1#*+}"
  local flags=() lock_redis=no
  [[ $strategy == redis-degrade ]] && lock_redis=yes
  for variant in "${variants[@]}"; do
    case $variant in
      lock-redis) lock_redis=yes ;;
      stock-cluster)
        [[ $strategy != redis || " ${variants[*]} " == *" lock-redis "* ]] ||
          die "\`$1\`: the redis lock needs one master, and a cluster spreads its grant and its waiters over three; add +lock-redis, as in redis+segments-6+lock-redis+stock-cluster"
        flags+=(--redis-url "$STOCK_CLUSTER_URL") ;;
      no-local-queue) flags+=(--local-queue false) ;;
      no-hand-over) flags+=(--hand-over false) ;;
      no-semaphore) flags+=(--mysql-permits 0 --mysql-pool 64 --local-queue false) ;;
      no-release-notices) flags+=(--release-notices false) ;;
      # 1 to 64, as `--stock-segments` takes (MAX_SEGMENTS in src/config.rs).
      segments-[1-9] | segments-[1-5][0-9] | segments-6[0-4]) flags+=(--stock-segments "${variant#segments-}") ;;
      sold-out-flag) flags+=(--sold-out-flag true) ;;
      one-per-buyer) flags+=(--one-per-buyer true) ;;
      orders) flags+=(--orders true) ;;
      stock-wait) flags+=(--stock-wait-replicas 1) ;;
      group-commit) flags+=(--group-commit true) ;;
      *) die "unknown variant \`$variant\` in \`$1\`; the variants are +no-local-queue, +no-hand-over, +no-semaphore, +no-release-notices, +segments-N (N from 1 to 64), +sold-out-flag, +one-per-buyer, +orders, +stock-wait, +group-commit, +lock-redis and +stock-cluster, one after another (redis+segments-16+sold-out-flag)" ;;
    esac
  done
  [[ $lock_redis == yes ]] && flags+=(--lock-redis-url "$LOCK_REDIS_URL")
  echo "${flags[*]}"
}

# probe_env RUN: the SECKILL_* settings, one a word, that point a client outside the
# instances (the bench's probes, the checker) at the servers the run's flags name.
probe_env() {
  local flags
  read -r -a flags <<<"$(variant_flags "$1")"
  set -- "${flags[@]}"
  while (($# > 1)); do
    case $1 in
      --redis-url) echo "SECKILL_REDIS_URL=$2" ;;
      --lock-redis-url) echo "SECKILL_LOCK_REDIS_URL=$2" ;;
    esac
    shift
  done
}

# uses_stock_cluster RUN: whether the run's stock is on the stock cluster.
uses_stock_cluster() { [[ "$1+" == *+stock-cluster+* ]]; }

# refuse_busy_ports: dies, naming the port, if something already listens on one of PORTS.
refuse_busy_ports() {
  local port
  for port in "${PORTS[@]}"; do
    if listening "$port"; then
      die "port $port is already in use; the instances run on ${PORTS[*]}. Stop what listens there (\`ss -ltnp 'sport = :$port'\`)."
    fi
  done
}

INSTANCE_PIDS=()

# INSTANCE_FLAGS[i]: flags for the instance on PORTS[i] alone (chaos.sh points each instance
# at its own nemesis with them). They replace the same flags given to every instance:
# seckill refuses a flag given twice. Empty: none.
INSTANCE_FLAGS=()

# overridden_by OVERRIDES FLAG...: the `--flag value` pairs of FLAG... whose flag OVERRIDES
# (a string of flags) does not give, one word a line.
overridden_by() {
  local overrides=" $1 "; shift
  while (($# > 0)); do
    [[ $overrides == *" $1 "* ]] || printf '%s\n%s\n' "$1" "$2"
    shift 2
  done
}

# spawn_instance LABEL PORT COMMAND...: runs COMMAND (which listens on PORT) in the background,
# logs in $LOGS/LABEL-PORT.log, and remembers its pid, the instance's own (chaos.sh signals it).
spawn_instance() {
  local label=$1 port=$2; shift 2
  "$@" >"$LOGS/$label-$port.log" 2>&1 &
  INSTANCE_PIDS+=($!)
}

# start_instances [--label LABEL] RUN [FLAG...]: one release-built instance of the run on each
# of PORTS, with the run's flags and FLAG..., and its own INSTANCE_FLAGS in place of the same
# ones; logs in $LOGS/LABEL-PORT.log (LABEL: seckill-RUN unless given); returns when all listen.
start_instances() {
  local label=
  if [[ $1 == --label ]]; then label=$2; shift 2; fi
  local run=$1 strategy=${1%%+*} flags; shift
  label=${label:-seckill-$run}
  [[ $run == *+stock-wait* ]] && start_stock_replica
  read -r -a flags <<<"$(variant_flags "$run")"
  local i own shared
  for i in "${!PORTS[@]}"; do
    read -r -a own <<<"${INSTANCE_FLAGS[i]:-}"
    mapfile -t shared < <(overridden_by "${own[*]}" "${flags[@]}" "$@")
    spawn_instance "$label" "${PORTS[i]}" "$ROOT/target/release/seckill" serve --port "${PORTS[i]}" --lock "$strategy" \
      "${shared[@]}" "${own[@]}"
  done
  await_instances "$label"
}

# await_instances LABEL: waits (10 s at most) until something listens on each of PORTS.
await_instances() {
  local port
  for port in "${PORTS[@]}"; do wait_for "$1-$port" 10 listening "$port"; done
}

# +stock-wait: a replica of the stock's Redis (that of `make services`) for the run's
# instances to wait for, on STOCK_REPLICA_PORT; stop_instances stops it.
STOCK_REPLICA_PORT=6399
STOCK_REPLICA_PID=
start_stock_replica() {
  # Its own folder: a replica writes the master's snapshot (dump.rdb) where it runs.
  mkdir -p "$RUN/stock-replica"
  redis-server --port "$STOCK_REPLICA_PORT" --bind 127.0.0.1 --replicaof 127.0.0.1 6379 --save "" \
    --appendonly no --dir "$RUN/stock-replica" >"$LOGS/stock-replica.log" 2>&1 &
  STOCK_REPLICA_PID=$!
  wait_for stock-replica 10 stock_replica_in_sync
}
stock_replica_in_sync() { redis-cli -p "$STOCK_REPLICA_PORT" info replication | grep -q 'master_link_status:up'; }
stop_stock_replica() {
  [[ -n $STOCK_REPLICA_PID ]] || return 0
  kill "$STOCK_REPLICA_PID" 2>/dev/null || true
  wait "$STOCK_REPLICA_PID" 2>/dev/null || true
  STOCK_REPLICA_PID=
}

# stop_instances: stops every instance started, paused ones too (SIGTERM waits for SIGCONT).
stop_instances() {
  local pid
  for pid in "${INSTANCE_PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  for pid in "${INSTANCE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  INSTANCE_PIDS=()
  stop_stock_replica
}

# build_release: every binary (seckill, the load test, bench) in release mode.
build_release() {
  say "building in release mode (the first build takes a few minutes; cargo shows each crate as it compiles)"
  cargo build --release --workspace
}

# until_sold UNITS GENERATION REDIS-CLI...: returns once the load test has reset the sale
# (stock:generation is no longer GENERATION, read before it started) and UNITS are sold.
# REDIS-CLI... is the redis-cli command of the stock's Redis.
until_sold() {
  local units=$1 generation=$2; shift 2
  until [[ $("$@" get stock:generation) != "$generation" ]]; do sleep 0.01; done
  until (($("$@" get lucky 2>/dev/null || echo 0) >= units)); do sleep 0.01; done
}

# begin_run: what demo.sh and bench.sh do before their first run. From here on, at exit,
# stop the instances and the servers this script starts (not those already running);
# refuse busy ports; start the servers; build in release mode.
begin_run() {
  mkdir -p "$LOGS" "$RUN/pids"
  cd "$ROOT" || exit
  remember_running_servers
  trap end_run EXIT
  refuse_busy_ports
  scripts/services.sh start
  build_release
}

end_run() {
  stop_instances
  stop_servers_started_since
}

# remember_running_servers, then later stop_servers_started_since: stops the backing
# servers (of scripts/services.sh) that were not running when it was remembered.
SERVERS_ALREADY_RUNNING=()
remember_running_servers() {
  local pidfile
  shopt -s nullglob
  for pidfile in "$RUN"/pids/*.pid; do SERVERS_ALREADY_RUNNING+=("$(basename "$pidfile" .pid)"); done
}

stop_servers_started_since() {
  local pidfile name started_now=()
  shopt -s nullglob
  for pidfile in "$RUN"/pids/*.pid; do
    name=$(basename "$pidfile" .pid)
    [[ " ${SERVERS_ALREADY_RUNNING[*]} " == *" $name "* ]] || started_now+=("$name")
  done
  if ((${#started_now[@]} > 0)); then "$ROOT/scripts/services.sh" stop "${started_now[@]}"; fi
}
