#!/usr/bin/env bash
# The benchmark behind the README's performance tables: for every strategy, two
# instances on ports 8080 and 8090, then `bench measure` (the 500-buyer crowd N times,
# one serial client, a sustained keep-alive load, the bound of the lock's critical
# path and who used the CPU); then one table, the ordering found, and an HTML report.
#
#   scripts/bench.sh [RUN...]          default: every strategy
#   BENCH_RUNS=5 BENCH_SECONDS=2 BENCH_CONNECTIONS=64 scripts/bench.sh redis etcd
#
# By default the last runs split the stock into 2, 4, 8 and 16 segments (`+segments-N`) for
# redis, etcd and mysql: the report's table "Past one lock" sets them against N locks' bound;
# and 16 segments again with the sold-out flag, for the table "After the sell-out";
# and atomic and redis with every unit sold written as an order through a Redis Stream into
# MySQL (`+orders`, src/orders.rs), beside the same strategies without.
# A RUN is a strategy or a strategy and a variant, as for `make demo`, or `python-peer`:
# the same sale written with Starlette and redis-py's lock (loadtest/peer/app.py), two
# uvicorn instances, its packages installed into .run/peer-venv on first use; it polls
# the lock every 100 ms as redis-py does by default, `python-peer+poll-Nms` every N ms.
# The default, 100 ms, is its best setting here: a sweep of 100, 20, 5 and 1 ms sold
# 754, 587, 332 and 102 units/s sustained (2026-11-24, docs/results/bench.md). Starts the backing
# servers it needs (and stops the ones it started), builds in release mode, and leaves
# one JSON per run, the tables (tables.md) and report.html in .run/results/bench/.
# The report includes the chaos table and the lock benchmark when `make chaos` and
# `make lockbench` have left theirs in .run/results/. With PUBLISH=1 the tables also go
# into docs/results/bench.md (scripts/lib/publish.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
LOGS="$RUN/logs"
RESULTS="$RUN/results/bench"
PORTS=(8080 8090)
STRATEGIES=("$@")
((${#STRATEGIES[@]} > 0)) ||
  STRATEGIES=(none local atomic redis redis+no-local-queue redis+no-hand-over redis-degrade redlock redlock+no-local-queue redlock+no-hand-over etcd zookeeper
              mysql mysql+no-hand-over mysql-version python-peer atomic+orders redis+orders
              redis+segments-2 redis+segments-4 redis+segments-8 redis+segments-16
              etcd+segments-2 etcd+segments-4 etcd+segments-8 etcd+segments-16
              mysql+segments-2 mysql+segments-4 mysql+segments-8 mysql+segments-16
              redis+segments-16+sold-out-flag etcd+segments-16+sold-out-flag mysql+segments-16+sold-out-flag)

say() { printf '[bench] %s\n' "$*"; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening
source "$ROOT/scripts/lib/instances.sh" # variant_flags, start_instances, stop_instances, ...
source "$ROOT/scripts/lib/publish.sh"   # publish_results, command_line
COMMAND=$(command_line BENCH_RUNS BENCH_SECONDS BENCH_CONNECTIONS -- scripts/bench.sh "$@")

# python-peer[+poll-Nms] -> the poll interval in seconds, or nothing for another run.
peer_poll_seconds() {
  case $1 in
    python-peer) echo 0.1 ;;
    python-peer+poll-*ms)
      local ms=${1#python-peer+poll-}; ms=${ms%ms}
      [[ $ms =~ ^[0-9]+$ && $ms -gt 0 ]] || die "\`$1\`: the poll interval is a whole number of milliseconds, e.g. python-peer+poll-10ms"
      awk -v ms="$ms" 'BEGIN { printf "%g", ms / 1000 }' ;;
  esac
}
is_peer() { [[ $1 == python-peer || $1 == python-peer+* ]]; }
for run in "${STRATEGIES[@]}"; do
  if is_peer "$run"; then peer_poll_seconds "$run" >/dev/null; else variant_flags "$run" >/dev/null; fi
done # refuse a bad variant before any work

# The Python peer: two uvicorn instances of loadtest/peer/app.py on PORTS, polling the
# lock every $1 seconds.
start_python_peer() {
  local venv="$RUN/peer-venv" port poll=$1
  if [[ ! -x $venv/bin/uvicorn ]]; then
    say "installing the Python peer's packages (loadtest/peer/requirements.txt) into $venv"
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q -r loadtest/peer/requirements.txt; } >>"$LOGS/peer-pip.log" 2>&1 ||
      die "could not install the Python peer's packages; see $LOGS/peer-pip.log"
  fi
  for port in "${PORTS[@]}"; do
    spawn_instance python-peer "$port" env PEER_PORT="$port" PEER_LOCK_SLEEP="$poll" "$venv/bin/uvicorn" --app-dir loadtest/peer app:app \
      --host 127.0.0.1 --port "$port" --no-access-log --log-level warning
  done
  await_instances python-peer
}

mkdir -p "$RESULTS"
begin_run

# The processes whose CPU use `bench` reports: both instances and every backing server.
watch_flags() {
  local pidfile i
  for pidfile in "$RUN"/pids/*.pid; do
    echo "--watch $(basename "$pidfile" .pid)=$(cat "$pidfile")"
  done
  local name=seckill
  is_peer "$run" && name=python-peer
  for i in "${!INSTANCE_PIDS[@]}"; do echo "--watch $name-${PORTS[$i]}=${INSTANCE_PIDS[$i]}"; done
}

results=()
failed=()
for run in "${STRATEGIES[@]}"; do
  if is_peer "$run"; then start_python_peer "$(peer_poll_seconds "$run")"; else start_instances "$run"; fi
  say "$run: round trips, ${BENCH_RUNS:-5} crowd runs, serial client, sustained load"
  read -r -a watch <<<"$(watch_flags | tr '\n' ' ')"
  # The lock Redis of redis-degrade, for the round-trip probe (the instances got it as a flag).
  lock_redis=()
  [[ ${run%%+*} == redis-degrade ]] && lock_redis=(env SECKILL_LOCK_REDIS_URL="$LOCK_REDIS_URL")
  status=0
  "${lock_redis[@]}" target/release/bench measure --label "$run" --out "$RESULTS/$run.json" \
    --runs "${BENCH_RUNS:-5}" --seconds "${BENCH_SECONDS:-2}" --connections "${BENCH_CONNECTIONS:-64}" \
    "${watch[@]}" || status=$?
  case $status in
    0) results+=("$RESULTS/$run.json") ;;
    1) results+=("$RESULTS/$run.json"); failed+=("$run") ;;
    *) die "the benchmark could not run against $run; its instances' logs are $LOGS/seckill-$run-*.log" ;;
  esac
  stop_instances
done

echo
headline="$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), release build, servers of \`make services\` on loopback"
say "$headline"
target/release/bench report "${results[@]}" --headline "$headline" --markdown "$RESULTS/tables.md" \
  --html "$RESULTS/report.html" --chaos "$RUN/results/chaos/table.md" --lockbench "$RUN/results/lockbench.json" || true
publish_results "$ROOT/docs/results/bench.md" bench "$COMMAND" "$RESULTS/tables.md"
if ((${#failed[@]} > 0)); then
  die "strategies that did not keep their promise (see their rows): ${failed[*]}"
fi
