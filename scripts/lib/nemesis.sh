# shellcheck shell=bash
# Used by chaos.sh for its network faults: a nemesis (loadtest's TCP proxy, built as
# target/release/nemesis) in front of each instance's lock backend, one link per member,
# so that one instance alone can be cut off from its lock. Each instance gets its own
# nemesis; only instance 1's is ever struck.
#
# The caller sets ROOT, LOGS and PORTS, defines die, sources servers.sh (for `wait_for`
# and `listening`), instances.sh (for INSTANCE_FLAGS) and strategies.sh (loaded), and
# exports the cluster's SECKILL_* settings.

# The control port of each instance's nemesis, and where its links begin: instance i's
# link to the k-th member of the lock backend listens on NEMESIS_LINK_PORTS[i] + k. All
# below 32768, where the kernel picks no ports for outgoing connections.
NEMESIS_CONTROL_PORTS=(7401 7402)
NEMESIS_LINK_PORTS=(16500 16600)
NEMESIS_PIDS=()

# lock_address STRATEGY: the flag that says where STRATEGY keeps its lock (the binary
# says which: scripts/lib/strategies.sh), and its value in the cluster. For `redis` that is
# the lock Redis, so a fault cuts off the lock, not the stock.
lock_address() {
  local flag
  flag=$(strategy_field "$1" lock_flag)
  case $flag in
    --lock-redis-url) echo "$flag $LOCK_REDIS_URL" ;;
    --redlock-urls) echo "$flag $SECKILL_REDLOCK_URLS" ;;
    --etcd-endpoints) echo "$flag $SECKILL_ETCD_ENDPOINTS" ;;
    --zk-connect) echo "$flag $SECKILL_ZK_CONNECT" ;;
    --mysql-url) echo "$flag $SECKILL_MYSQL_URL" ;;
    *) die "no lock server to put a nemesis in front of for '$1' (its lock_flag: $flag)" ;;
  esac
}

# start_nemeses STRATEGY LABEL: a nemesis for each instance, with a link to each member of
# STRATEGY's lock backend; INSTANCE_FLAGS then points each instance at its own nemesis.
# Logs in $LOGS/LABEL-nemesis-PORT.log.
start_nemeses() {
  local strategy=$1 label=$2 flag value i k
  read -r flag value <<<"$(lock_address "$strategy")"
  local members=()
  mapfile -t members < <(grep -o '127\.0\.0\.1:[0-9]*' <<<"$value")
  for i in "${!PORTS[@]}"; do
    local links=() through=$value
    for k in "${!members[@]}"; do
      local port=$((NEMESIS_LINK_PORTS[i] + k))
      links+=("$port=${members[k]}")
      through=${through/${members[k]}/127.0.0.1:$port}
    done
    "$ROOT/target/release/nemesis" --control-port "${NEMESIS_CONTROL_PORTS[i]}" "${links[@]}" \
      >"$LOGS/$label-nemesis-${PORTS[i]}.log" 2>&1 &
    NEMESIS_PIDS+=($!)
    wait_for "$label-nemesis-${PORTS[i]}" 10 listening "${NEMESIS_CONTROL_PORTS[i]}"
    INSTANCE_FLAGS[i]="$flag $through"
  done
}

# stop_nemeses: stops every nemesis started; the instances reach their backends directly again.
stop_nemeses() {
  local pid
  for pid in "${NEMESIS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${NEMESIS_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  NEMESIS_PIDS=()
  # shellcheck disable=SC2034 # chaos.sh, which sources this file, reads it
  INSTANCE_FLAGS=()
}

# nemesis FAULT: strikes FAULT (partition, delay?ms=..., reset, heal) on instance 1's nemesis.
nemesis() {
  curl -sf -X POST "127.0.0.1:${NEMESIS_CONTROL_PORTS[0]}/$1" >/dev/null ||
    die "instance 1's nemesis refused /$1; its log is in $LOGS"
}
