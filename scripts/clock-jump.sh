#!/usr/bin/env bash
# Time: a clock that jumps, under load. Two instances, 200 buyers for 100 units, every sale
# lingering 50 ms between its lease check and its write (`--chaos-pause-before-write-ms`).
#
#   scripts/clock-jump.sh        (make clock-jump)
#
# The rows of the table (the README explains what each one shows):
#   redlock-clock-jump    five Redlock masters, two of them down: a holder gets a bare majority,
#                         three of five. The wall clock of one of its three jumps past the TTL
#                         while it holds, and the two come back empty. Redlock has no token.
#   redis-clock-jump      the `redis` lock, in a lock Redis of its own whose wall clock jumps past
#                         the TTL while somebody holds; fencing on, then off.
#   instance-clock-jump   the `redis` lock; the instances' own wall clocks jump an hour forward,
#                         back, and an hour behind, mid-sale (libfaketime).
# Each row jumps JUMPS times, once a few more units are sold, always while a sale holds the lock.
#
# A Redis server's clock is moved by scripts/lib/clock-shift.c (compiled here with gcc), not
# by libfaketime, which cannot run redis-server (see the comment in that file). Every server
# here is the script's own, on the ports below, stopped at the end; nothing of `make
# services` or `make cluster` is used. Results in .run/results/clock-jump/.
#
# Exit 1 when a fenced row sold a unit twice, or an instance's jump ended a lease
# (lock_lost). Redlock selling twice is the expected lesson; the table says if it did not.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
DATA="$RUN/clock-jump"
RESULTS="$RUN/results/clock-jump"
LOGS="$RUN/logs"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
# Ports of the script's own: not those of services.sh, cluster.sh or chaos.sh.
PORTS=(8180 8190)
STOCK_REDIS_PORT=6597
LOCK_REDIS_PORT=6596
REDLOCK_PORTS=(6591 6592 6593 6594 6595)
TTL_MS=2000
# Past the TTL: every key on the jumping server expires at the jump.
JUMP_PAST_TTL_MS=5000
HOUR=3600
JUMPS=3
# The units sold before each jump.
JUMP_AFTER_SOLD=(10 40 70)

say() { printf '[clock-jump] %s\n' "$*"; }
die() { printf '[clock-jump] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening, wait_for
source "$ROOT/scripts/lib/instances.sh" # spawn_instance, await_instances, stop_instances, build_release
STOCK_REDIS=(redis-cli -p "$STOCK_REDIS_PORT")

# --- the servers -----------------------------------------------------------------------

declare -A SERVER_PIDS=()

# start_redis NAME PORT [CLOCK_FILE]: an empty Redis of the script's own; with CLOCK_FILE,
# its wall clock runs that file's milliseconds ahead of the real one.
start_redis() {
  local name=$1 port=$2 clock=${3:-} preload=()
  rm -rf "${DATA:?}/$name"
  [[ -n $clock ]] && preload=(env LD_PRELOAD="$DATA/clock-shift.so" CLOCK_SHIFT_FILE="$clock")
  "${preload[@]}" "$ROOT/scripts/lib/exec-server.sh" redis "$DATA/$name" "$port" --save '' --appendonly no \
    >>"$LOGS/$name.log" 2>&1 &
  SERVER_PIDS[$name]=$!
  wait_for "$name" 10 redis-cli -p "$port" ping
}

stop_redis() {
  local name
  for name in "$@"; do
    kill "${SERVER_PIDS[$name]}" 2>/dev/null || true
    wait "${SERVER_PIDS[$name]}" 2>/dev/null || true
    unset "SERVER_PIDS[$name]"
  done
}

stop_everything() {
  stop_instances
  local name
  for name in "${!SERVER_PIDS[@]}"; do stop_redis "$name"; done
}

# jump CLOCK_FILE MS: from now on that clock reads MS ms ahead of the real time (behind if
# negative). Written whole, then renamed, so a reader never sees half a number.
jump() { echo "$2" >"$1.new"; mv "$1.new" "$1"; }

# The instances' clocks: libfaketime, its offset in whole seconds ("+3600"), read on every
# call; the monotonic clock untouched, as with an NTP step.
LIBFAKETIME=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
faketime_env() {
  echo "LD_PRELOAD=$LIBFAKETIME FAKETIME_TIMESTAMP_FILE=$1 FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1"
}

# --- one run ---------------------------------------------------------------------------

# start_seckill [ENV...] -- FLAG...: one instance on each of PORTS, selling from the stock Redis.
start_seckill() {
  local env=() port
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  for port in "${PORTS[@]}"; do
    spawn_instance "clock-jump-$ROW" "$port" env "${env[@]}" "$BIN/seckill" serve --port "$port" \
      --redis-url "redis://127.0.0.1:$STOCK_REDIS_PORT" --lock-ttl-ms $TTL_MS \
      --chaos-pause-before-write-ms 50 --acquire-timeout-ms 30000 "$@"
  done
  await_instances "clock-jump-$ROW"
}

# until_holder REDIS-CLI...: waits (2 s at most) until that Redis holds lock:stock.
until_holder() {
  local _
  for _ in $(seq 1 200); do
    [[ $("$@" exists lock:stock) == 1 ]] && return
    sleep 0.01
  done
}

# The jumps of each row, once JUMP_AFTER_SOLD[i] units are sold.
jump_a_redlock_master() {
  local round
  for round in $(seq 0 $((JUMPS - 1))); do
    until_sold "${JUMP_AFTER_SOLD[round]}" "$GENERATION" "${STOCK_REDIS[@]}"
    until_holder redis-cli -p "${REDLOCK_PORTS[2]}"
    jump "$DATA/redlock-clock" $(((round + 1) * JUMP_PAST_TTL_MS))
    start_redis redlock-4 "${REDLOCK_PORTS[3]}"
    start_redis redlock-5 "${REDLOCK_PORTS[4]}"
    sleep 0.5 # the second holder sells meanwhile; then the two go down again
    stop_redis redlock-4 redlock-5
  done
}

jump_the_lock_redis() {
  local round
  for round in $(seq 0 $((JUMPS - 1))); do
    until_sold "${JUMP_AFTER_SOLD[round]}" "$GENERATION" "${STOCK_REDIS[@]}"
    until_holder redis-cli -p $LOCK_REDIS_PORT
    jump "$DATA/lock-redis-clock" $(((round + 1) * JUMP_PAST_TTL_MS))
  done
}

jump_the_instances() {
  local round offsets=("+$HOUR" +0 "-$HOUR")
  for round in $(seq 0 $((JUMPS - 1))); do
    until_sold "${JUMP_AFTER_SOLD[round]}" "$GENERATION" "${STOCK_REDIS[@]}"
    until_holder "${STOCK_REDIS[@]}"
    jump "$DATA/instance-clock" "${offsets[round]}"
  done
}

field() { { grep -o "\"$2\":[^,}]*" "$1" || true; } | head -1 | cut -d: -f2 | tr -d '"'; }
# The number of answers whose kind starts with $2 ("503 lock_lost", ...), from the report's errors.
answers() { { grep -o '"errors":{[^}]*}' "$1" || true; } | { grep -o "\"$2[^\"]*\":[0-9]*" || true; } |
  awk -F: '{ n += $2 } END { print n + 0 }'; }

# play LABEL JUMPER: the load test against the running instances of row ROW, JUMPER striking
# meanwhile; its report is $RESULTS/LABEL.json. Adds the row to the table.
play() {
  local report="$RESULTS/$1.json"
  GENERATION=$("${STOCK_REDIS[@]}" get stock:generation)
  "$2" &
  local jumper=$!
  "$BIN/loadtest" --users 200 --stock 100 --hosts "http://127.0.0.1:${PORTS[0]},http://127.0.0.1:${PORTS[1]}" \
    --redis-url "redis://127.0.0.1:$STOCK_REDIS_PORT" --report-file "$report" >"$LOGS/clock-jump-$1-loadtest.log" 2>&1 || true
  wait "$jumper" || true
  stop_instances
  [[ -s $report ]] || die "the load test wrote no report for $1; see $LOGS/clock-jump-$1-loadtest.log"
  local twice overlapped refused lost fencing
  twice=$(field "$report" units_sold_twice)
  overlapped=$(field "$report" holders_overlapped)
  refused=$(field "$report" writes)
  lost=$(answers "$report" "503 lock_lost")
  fencing=$(field "$report" fencing)
  # An instance's jump makes the grant log's times (wall clock) meaningless.
  [[ $ROW == instance-clock-jump ]] && overlapped="-"
  table+=("| $ROW | $(field "$report" strategy) | $fencing | $twice | $overlapped | $refused | $lost | $(field "$report" lucky) |")
  printf '%s\n' "${table[-1]}"
  if [[ $fencing == on ]] && ((twice > 0)); then unsafe+=("$ROW: a fenced sale sold $twice units twice"); fi
  if [[ $ROW == instance-clock-jump ]] && ((lost > 0)); then unsafe+=("$ROW: a jump ended $lost leases"); fi
  if [[ $fencing == no_tokens ]] && ((twice == 0)); then notes+=("$ROW: no unit sold twice this time (a jump missed the holder's window)"); fi
  return 0
}

# --- the rows --------------------------------------------------------------------------

cd "$ROOT"
for port in "${PORTS[@]}" $STOCK_REDIS_PORT $LOCK_REDIS_PORT "${REDLOCK_PORTS[@]}"; do
  listening "$port" && die "port $port is in use; this script runs its own servers on ${PORTS[*]}, $STOCK_REDIS_PORT, $LOCK_REDIS_PORT and ${REDLOCK_PORTS[*]}"
done
[[ -e $LIBFAKETIME ]] || die "$LIBFAKETIME is missing: install the faketime package (\`make services\` does)"
mkdir -p "$DATA" "$RESULTS" "$LOGS"
gcc -shared -fPIC -O2 -o "$DATA/clock-shift.so" scripts/lib/clock-shift.c
build_release
trap stop_everything EXIT
start_redis stock-redis $STOCK_REDIS_PORT

table=("| scenario | lock | fencing | units sold twice | holders overlapped | writes refused by the fence | buyers told lock_lost | sold |"
  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
unsafe=() notes=()

ROW=redlock-clock-jump
jump "$DATA/redlock-clock" 0
start_redis redlock-1 "${REDLOCK_PORTS[0]}"
start_redis redlock-2 "${REDLOCK_PORTS[1]}"
start_redis redlock-3 "${REDLOCK_PORTS[2]}" "$DATA/redlock-clock"
redlock_urls=$(printf 'redis://127.0.0.1:%s,' "${REDLOCK_PORTS[@]}")
start_seckill -- --lock redlock --redlock-urls "${redlock_urls%,}"
play $ROW jump_a_redlock_master
stop_redis redlock-1 redlock-2 redlock-3

for fencing in on off; do
  ROW=redis-clock-jump
  jump "$DATA/lock-redis-clock" 0
  start_redis lock-redis $LOCK_REDIS_PORT "$DATA/lock-redis-clock"
  start_seckill -- --lock redis --lock-redis-url "redis://127.0.0.1:$LOCK_REDIS_PORT" --fencing $fencing
  play $ROW-fencing-$fencing jump_the_lock_redis
  stop_redis lock-redis
done

ROW=instance-clock-jump
jump "$DATA/instance-clock" +0
read -r -a clock_env <<<"$(faketime_env "$DATA/instance-clock")"
start_seckill "${clock_env[@]}" -- --lock redis
play $ROW jump_the_instances

echo
say "200 buyers, 100 units, two instances, $JUMPS jumps a row, $(date -u +%Y-%m-%d), $(nproc) cores:"
printf '%s\n' "${table[@]}" | tee "$RESULTS/table.md"
say "the table is also in $RESULTS/table.md; each row's report is in $RESULTS/"
for note in "${notes[@]}"; do say "note: $note"; done
((${#unsafe[@]} == 0)) || die "unsafe: ${unsafe[*]}"
