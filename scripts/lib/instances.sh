# Shared by demo.sh and bench.sh: two instances of the service on the ports in PORTS,
# started and stopped together, for one run (a strategy, or a strategy and a variant),
# and the backing servers a script started, so that it stops only those.
#
# The caller sets ROOT, RUN, LOGS and PORTS, defines say and die, and sources servers.sh
# (for `listening`).

# A run is a strategy (`redis`), or a strategy and a variant after a `+`:
#   +no-local-queue  `--local-queue false`: every buyer asks the lock itself, instead of
#                    only the head of its instance's line (what the line saves)
#   +no-semaphore    for mysql and mysql-version: no line and no semaphore in front of
#                    MySQL (`--mysql-permits 0`, a pool of 64), so every waiter polls it
# `redis-degrade` keeps its lock in the lock Redis on 6380, apart from the stock.
variant_flags() {
  local strategy=${1%%+*} variant=
  [[ $1 == *+* ]] && variant=${1#*+}
  local flags=()
  [[ $strategy == redis-degrade ]] && flags+=(--lock-redis-url redis://127.0.0.1:6380)
  case $variant in
    "") ;;
    no-local-queue) flags+=(--local-queue false) ;;
    no-semaphore) flags+=(--mysql-permits 0 --mysql-pool 64 --local-queue false) ;;
    *) die "unknown variant \`$variant\` in \`$1\`; the variants are +no-local-queue and +no-semaphore" ;;
  esac
  echo "${flags[*]}"
}

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

# start_instances RUN: one release-built instance of the run on each of PORTS, logs in
# $LOGS/seckill-RUN-PORT.log; returns when all listen.
start_instances() {
  local run=$1 strategy=${1%%+*} port
  local flags
  read -r -a flags <<<"$(variant_flags "$run")"
  for port in "${PORTS[@]}"; do
    "$ROOT/target/release/seckill" serve --port "$port" --lock "$strategy" "${flags[@]}" \
      >"$LOGS/seckill-$run-$port.log" 2>&1 &
    INSTANCE_PIDS+=($!)
  done
  await_instances "$run" "seckill --lock $strategy ${flags[*]}"
}

# await_instances RUN WHAT: waits (10 s at most) until something listens on each of PORTS.
await_instances() {
  local run=$1 what=$2 port
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 100); do listening "$port" && break; sleep 0.1; done
    listening "$port" || die "$what did not start on $port; see $LOGS/*$run-$port.log"
  done
}

stop_instances() {
  local pid
  for pid in "${INSTANCE_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${INSTANCE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  INSTANCE_PIDS=()
}

# begin_run: what demo.sh and bench.sh do before their first run. From here on, at exit,
# stop the instances and the servers this script starts (not those already running);
# refuse busy ports; start the servers; build in release mode.
begin_run() {
  mkdir -p "$LOGS" "$RUN/pids"
  cd "$ROOT"
  remember_running_servers
  trap end_run EXIT
  refuse_busy_ports
  scripts/services.sh start
  say "building in release mode (the first build takes a few minutes; cargo shows each crate as it compiles)"
  cargo build --release --workspace
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
