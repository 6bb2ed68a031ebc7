#!/usr/bin/env bash
# The whole lesson in one command: for every strategy, two instances of the service on
# ports 8080 and 8090, 500 buyers against 300 units, a verdict; then one comparison table.
#
#   scripts/demo.sh [RUN...]     default: every strategy
#
# A RUN is a strategy (`redis`), or a strategy and a variant: `mysql+no-semaphore` runs
# a MySQL lock with `--mysql-permits 0` (no semaphore in front of MySQL) and a pool of
# 64 connections per instance, to measure what the semaphore saves. `redis-degrade`
# keeps its lock in the lock Redis on 6380, apart from the stock.
#
# Starts the backing servers it needs (and stops the ones it started), builds in
# release mode, and leaves the reports in .run/results/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
RESULTS="$RUN/results"
LOGS="$RUN/logs"
PORTS=(8080 8090)
STRATEGIES=("$@")
((${#STRATEGIES[@]} > 0)) ||
  STRATEGIES=(none local redis redis-degrade redlock etcd zookeeper mysql mysql+no-semaphore mysql-version
              mysql-version+no-semaphore atomic)

# The flags a run adds to `seckill serve`.
variant_flags() {
  case $1 in
    *+no-semaphore) echo "--mysql-permits 0 --mysql-pool 64" ;;
    redis-degrade) echo "--lock-redis-url redis://127.0.0.1:6380" ;;
    *+*) die "unknown variant in \`$1\`; the one variant is +no-semaphore (for mysql and mysql-version)" ;;
    *) echo "" ;;
  esac
}

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] error: %s\n' "$*" >&2; exit 1; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for run in "${STRATEGIES[@]}"; do variant_flags "$run" >/dev/null; done # refuse a bad variant before any work

mkdir -p "$RESULTS" "$LOGS" "$RUN/pids"
cd "$ROOT"

# Remember which servers were already ours, so we stop only what this run starts.
shopt -s nullglob
already_started=()
for pidfile in "$RUN"/pids/*.pid; do already_started+=("$(basename "$pidfile" .pid)"); done

instances=()
cleanup() {
  local pid
  for pid in "${instances[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${instances[@]}"; do wait "$pid" 2>/dev/null || true; done
  local started_now=()
  for pidfile in "$RUN"/pids/*.pid; do
    local name
    name=$(basename "$pidfile" .pid)
    [[ " ${already_started[*]} " == *" $name "* ]] || started_now+=("$name")
  done
  if ((${#started_now[@]} > 0)); then scripts/services.sh stop "${started_now[@]}"; fi
}
trap cleanup EXIT

for port in "${PORTS[@]}"; do
  if listening "$port"; then
    die "port $port is already in use; the demo runs its two instances on ${PORTS[*]}. Stop what listens there (\`ss -ltnp 'sport = :$port'\`)."
  fi
done

scripts/services.sh start
say "building in release mode (the first build takes a few minutes; cargo shows each crate as it compiles)"
cargo build --release --workspace

reports=()
failed=()
for run in "${STRATEGIES[@]}"; do
  strategy=${run%%+*}
  read -r -a flags <<<"$(variant_flags "$run")"
  instances=()
  for port in "${PORTS[@]}"; do
    target/release/seckill serve --port "$port" --lock "$strategy" "${flags[@]}" >"$LOGS/seckill-$run-$port.log" 2>&1 &
    instances+=($!)
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 100); do listening "$port" && break; sleep 0.1; done
    listening "$port" || die "seckill --lock $strategy ${flags[*]} did not start on $port; see $LOGS/seckill-$run-$port.log"
  done

  echo
  status=0
  target/release/loadtest --report-file "$RESULTS/$run.json" || status=$?
  case $status in
    0) reports+=("$RESULTS/$run.json") ;;
    1) reports+=("$RESULTS/$run.json"); failed+=("$run") ;;
    *) die "the load test could not run against --lock $strategy ${flags[*]}" ;;
  esac

  for pid in "${instances[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${instances[@]}"; do wait "$pid" 2>/dev/null || true; done
  instances=()
done

echo
say "500 buyers, 300 units, two instances (ports ${PORTS[*]}), release build, $(nproc) cores:"
target/release/loadtest --compare "${reports[@]}" --chart "$RESULTS/comparison.svg"
if ((${#failed[@]} > 0)); then
  die "strategies whose verdict is not what they promise (see their reports above): ${failed[*]}"
fi
