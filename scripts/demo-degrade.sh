#!/usr/bin/env bash
# The Redis -> MySQL downgrade, played live: two instances of `--lock redis-degrade`
# (lock in the lock Redis on 6380, stock in the Redis on 6379), a crowd of 8000 buyers
# for 8000 units, the lock Redis killed once 200 units are sold and started again 4 s later.
# Prints the load test's verdict and each instance's mode over time.
#
#   scripts/demo-degrade.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
LOGS="$RUN/logs"
PORTS=(8080 8090)
LOCK_REDIS_PORT=6380
BUYERS=8000

say() { printf '[demo-degrade] %s\n' "$*"; }
die() { printf '[demo-degrade] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening, poll
source "$ROOT/scripts/lib/instances.sh" # start_instances, stop_instances, until_sold, ...
LOCK_REDIS_URL=redis://127.0.0.1:$LOCK_REDIS_PORT

cd "$ROOT"
refuse_busy_ports
scripts/services.sh start
[[ -e $RUN/pids/lock-redis.pid ]] ||
  die "the lock Redis on $LOCK_REDIS_PORT was not started by this project, so the demo will not kill it; stop it and run again"
build_release

sampler=
# shellcheck disable=SC2317 # run by the trap
cleanup() {
  if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; fi
  stop_instances
  listening "$LOCK_REDIS_PORT" || scripts/services.sh start >/dev/null
}
trap cleanup EXIT

start_instances --label seckill-degrade redis-degrade --lock-ttl-ms 1000 --degrade-recover-ms 2000 \
  --acquire-timeout-ms 30000

# stamp WHAT: a line of the timeline, WHAT after the seconds since the instances started.
started=$(date +%s%N)
stamp() { printf '%6.1f s  %s\n' "$(( ($(date +%s%N) - started) / 1000000 ))e-3" "$*"; }

# Every 100 ms, each instance's mode; a line whenever one changes.
timeline="$RUN/results/degrade-timeline.txt"
mkdir -p "$RUN/results"
: >"$timeline"
(
  declare -A last
  while true; do
    for port in "${PORTS[@]}"; do
      health=$(curl -s --max-time 1 "http://127.0.0.1:$port/healthz" || true)
      mode=$(jq -r '.lock_stats.degrade.mode // empty' <<<"$health" 2>/dev/null || true)
      epoch=$(jq -r '.lock_stats.degrade.epoch // empty' <<<"$health" 2>/dev/null || true)
      now="${mode:-?} (epoch ${epoch:-?})"
      if [[ ${last[$port]:-} != "$now" ]]; then
        stamp "instance $port: $now" >>"$timeline"
        last[$port]=$now
      fi
    done
    sleep 0.1
  done
) &
sampler=$!

generation=$(redis-cli -p 6379 get stock:generation)
(
  until_sold 200 "$generation" redis-cli -p 6379 # mid-sale
  stamp "lock Redis killed" >>"$timeline"
  kill -9 "$(cat "$RUN/pids/lock-redis.pid")"
  sleep 4
  scripts/services.sh start >/dev/null
  stamp "lock Redis started again (empty)" >>"$timeline"
) &
outage=$!

status=0
target/release/loadtest --users $BUYERS --stock $BUYERS --report-file "$RUN/results/redis-degrade-outage.json" || status=$?
wait "$outage"
# Give the instances time to switch back, so the timeline shows the way home too.
# shellcheck disable=SC2317 # run by poll
on_redis() {
  local port
  for port in "${PORTS[@]}"; do
    curl -s --max-time 1 "http://127.0.0.1:$port/healthz" | grep -q '"mode":"redis"' || return 1
  done
}
poll 15 on_redis || true
sleep 0.3

echo
say "mode of each instance over time (from GET /healthz every 100 ms):"
sort -n "$timeline"
exit $status
