#!/usr/bin/env bash
# The Redis -> MySQL downgrade, played live: two instances of `--lock redis-degrade`
# (lock in the lock Redis on 6380, stock in the Redis on 6379), a crowd of 3000 buyers
# for 3000 units, the lock Redis killed once 200 units are sold and started again 4 s later.
# Prints the load test's verdict and each instance's mode over time.
#
#   scripts/demo-degrade.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
LOGS="$RUN/logs"
PORTS=(8080 8090)
LOCK_REDIS_PORT=6380
BUYERS=3000

say() { printf '[demo-degrade] %s\n' "$*"; }
die() { printf '[demo-degrade] error: %s\n' "$*" >&2; exit 1; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cd "$ROOT"
for port in "${PORTS[@]}"; do
  listening "$port" && die "port $port is already in use; stop what listens there (\`ss -ltnp 'sport = :$port'\`)."
done
scripts/services.sh start
[[ -e $RUN/pids/lock-redis.pid ]] ||
  die "the lock Redis on $LOCK_REDIS_PORT was not started by this project, so the demo will not kill it; stop it and run again"
say "building in release mode"
cargo build --release --workspace

instances=()
sampler=
cleanup() {
  [[ -n $sampler ]] && kill "$sampler" 2>/dev/null || true
  local pid
  for pid in "${instances[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${instances[@]}"; do wait "$pid" 2>/dev/null || true; done
  listening $LOCK_REDIS_PORT || scripts/services.sh start >/dev/null
}
trap cleanup EXIT

for port in "${PORTS[@]}"; do
  target/release/seckill serve --port "$port" --lock redis-degrade \
    --lock-redis-url "redis://127.0.0.1:$LOCK_REDIS_PORT" --lock-ttl-ms 1000 --degrade-recover-ms 2000 \
    --acquire-timeout-ms 30000 \
    >"$LOGS/seckill-degrade-$port.log" 2>&1 &
  instances+=($!)
done
for port in "${PORTS[@]}"; do
  for _ in $(seq 1 100); do listening "$port" && break; sleep 0.1; done
  listening "$port" || die "seckill did not start on $port; see $LOGS/seckill-degrade-$port.log"
done

# Every 100 ms, each instance's mode; a line whenever one changes.
started=$(date +%s%N)
timeline="$RUN/results/degrade-timeline.txt"
mkdir -p "$RUN/results"
: >"$timeline"
(
  declare -A last
  while true; do
    for port in "${PORTS[@]}"; do
      health=$(curl -s --max-time 1 "http://127.0.0.1:$port/healthz" || true)
      mode=$(grep -o '"mode":"[a-z]*"' <<<"$health" | cut -d'"' -f4 || true)
      epoch=$(grep -o '"epoch":[0-9]*' <<<"$health" | cut -d: -f2 || true)
      now="${mode:-?} (epoch ${epoch:-?})"
      if [[ ${last[$port]:-} != "$now" ]]; then
        printf '%6.1f s  instance %s: %s\n' "$(( ($(date +%s%N) - started) / 1000000 ))e-3" "$port" "$now" >>"$timeline"
        last[$port]=$now
      fi
    done
    sleep 0.1
  done
) &
sampler=$!

generation=$(redis-cli -p 6379 get stock:generation)
(
  # Once the load test has reset the sale and 200 units are sold: mid-sale.
  until [[ $(redis-cli -p 6379 get stock:generation) != "$generation" ]]; do sleep 0.01; done
  until (($(redis-cli -p 6379 get lucky) >= 200)); do sleep 0.01; done
  printf '%6.1f s  lock Redis killed\n' "$(( ($(date +%s%N) - started) / 1000000 ))e-3" >>"$timeline"
  kill -9 "$(cat "$RUN/pids/lock-redis.pid")"
  sleep 4
  scripts/services.sh start >/dev/null
  printf '%6.1f s  lock Redis started again (empty)\n' "$(( ($(date +%s%N) - started) / 1000000 ))e-3" >>"$timeline"
) &
outage=$!

status=0
target/release/loadtest --users $BUYERS --stock $BUYERS --report-file "$RUN/results/redis-degrade-outage.json" || status=$?
wait "$outage"
# Give the instances time to switch back, so the timeline shows the way home too.
on_redis() {
  local port
  for port in "${PORTS[@]}"; do
    curl -s --max-time 1 "http://127.0.0.1:$port/healthz" | grep -q '"mode":"redis"' || return 1
  done
}
for _ in $(seq 1 150); do on_redis && break; sleep 0.1; done
sleep 0.3

echo
say "mode of each instance over time (from GET /healthz every 100 ms):"
sort -n "$timeline"
exit $status
