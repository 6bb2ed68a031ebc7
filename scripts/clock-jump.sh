#!/usr/bin/env bash
# Time: a clock that jumps, under load. Two instances, 200 buyers for 100 units, every sale
# lingering 200 ms between its lease check and its write (`--chaos-pause-before-write-ms`):
# longer than a waiter's longest backoff (50 ms), so a second holder has time to sell
# before the first one's late write.
#
#   scripts/clock-jump.sh [ROW...]        (make clock-jump: every row)
#
# The rows of the table (docs/results/clock-jump.md explains what each one shows):
#   redlock-clock-jump    five Redlock masters; the first instance cannot reach two of them (a
#                         partition), so its grants are bare majorities, three of five. The wall
#                         clock of one of the three jumps past the TTL while it holds; the second
#                         instance reaches all five. Redlock has no token.
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
# This script starts, jumps and stops; `loadtest chaos-table` judges each run from its history
# and writes the table, a column per check (record_run says what each row promises). Exit 1
# when a fenced row failed a check, or an instance's jump ended a lease (lock_lost). Redlock
# selling twice is the expected lesson; the table's note says if it did not.
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
# Where nothing listens: masters 4 and 5 as the first instance sees them (a partition).
UNREACHABLE_PORTS=(6598 6599)
TTL_MS=2000
PAUSE_BEFORE_WRITE_MS=200
# Past the TTL: every key on the jumping server expires at the jump.
JUMP_PAST_TTL_MS=5000
HOUR=3600
JUMPS=3
# The units sold before each jump.
JUMP_AFTER_SOLD=(10 40 70)

ONLY=("$@")
source "$ROOT/scripts/lib/publish.sh"   # publish_results, command_line
COMMAND=$(command_line -- scripts/clock-jump.sh "$@")
ALL_ROWS="redlock-clock-jump redis-clock-jump instance-clock-jump"

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
jump() {
  echo "$2" >"$1.new"; mv "$1.new" "$1"
  # Into the history of the run it strikes: the load test reads $FAULTS when it ends.
  "$BIN/loadtest" record-fault --to "$FAULTS" clock-jump "$(basename "$1")" "--detail=$2" \
    2>>"$LOGS/clock-jump-faults.log" || echo "the jump of $1 is not in the run's history; see $LOGS" >&2
}
# Where `jump` writes; each run names its own (see play).
FAULTS=/dev/null

# The instances' clocks: libfaketime, its offset in whole seconds ("+3600"), read on every
# call; the monotonic clock untouched, as with an NTP step.
LIBFAKETIME=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
faketime_env() {
  echo "LD_PRELOAD=$LIBFAKETIME FAKETIME_TIMESTAMP_FILE=$1 FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1"
}

# --- one run ---------------------------------------------------------------------------

# start_seckill_on PORT [ENV...] -- FLAG...: one instance on PORT, selling from the stock Redis.
start_seckill_on() {
  local port=$1 env=()
  shift
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  spawn_instance "clock-jump-$ROW" "$port" env "${env[@]}" "$BIN/seckill" serve --port "$port" \
    --redis-url "redis://127.0.0.1:$STOCK_REDIS_PORT" --lock-ttl-ms $TTL_MS \
    --chaos-pause-before-write-ms $PAUSE_BEFORE_WRITE_MS --acquire-timeout-ms 30000 "$@"
}

# start_seckill [ENV...] -- FLAG...: the same on each of PORTS; returns when all listen.
start_seckill() {
  local port
  for port in "${PORTS[@]}"; do start_seckill_on "$port" "$@"; done
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

# until_first_holds REDIS-CLI...: waits (5 s at most) until the first instance holds
# lock:stock there (its value starts with the holder's instance name); status 1 if it did not.
until_first_holds() {
  local _
  for _ in $(seq 1 500); do
    [[ $("$@" get lock:stock) == "seckill-${PORTS[0]}:"* ]] && return
    sleep 0.01
  done
  return 1
}

# The jumps of each row, once JUMP_AFTER_SOLD[i] units are sold.
jump_a_redlock_master() {
  local round
  for round in $(seq 0 $((JUMPS - 1))); do
    until_sold "${JUMP_AFTER_SOLD[round]}" "$GENERATION" "${STOCK_REDIS[@]}"
    until_first_holds redis-cli -p "${REDLOCK_PORTS[2]}" || say "jump $((round + 1)): the first instance did not hold within 5 s"
    jump "$DATA/redlock-clock" $(((round + 1) * JUMP_PAST_TTL_MS))
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

# record_run LABEL: the row's line of the runs file, for `loadtest chaos-table`, which judges
# the run from its report and history. What each row promises: Redlock's double sale, and
# the unfenced one, are the lesson (`fails`); a fenced row holds; an instance's jump may end
# no lease (`503 lock_lost`), and makes its grant log's times (wall clock) meaningless.
record_run() {
  local expect=holds never='[]' instance_clocks=false
  [[ $ROW == redlock-clock-jump || $1 == *-fencing-off ]] && expect=fails
  [[ $ROW == instance-clock-jump ]] && never='["503 lock_lost"]' instance_clocks=true
  jq -nc --arg fault "$ROW" --arg strategy "$2" --arg report "$1.json" --arg expect $expect \
    --argjson never "$never" --argjson instance_clocks $instance_clocks \
    '{fault: $fault, strategy: $strategy, run: 1, expect: $expect, report: $report,
      never_answer: $never, instance_clocks_jump: $instance_clocks}' >>"$RUNS_FILE"
}

# play LABEL STRATEGY JUMPER: the load test against the running instances of row ROW, JUMPER
# striking meanwhile; its report is $RESULTS/LABEL.json. Adds the run to the runs file.
play() {
  local report="$RESULTS/$1.json"
  FAULTS="$RESULTS/$1.faults.jsonl"
  rm -f "$FAULTS"
  GENERATION=$("${STOCK_REDIS[@]}" get stock:generation)
  "$3" &
  local jumper=$!
  "$BIN/loadtest" --users 200 --stock 100 --hosts "http://127.0.0.1:${PORTS[0]},http://127.0.0.1:${PORTS[1]}" \
    --redis-url "redis://127.0.0.1:$STOCK_REDIS_PORT" --report-file "$report" --faults-file "$FAULTS" \
    >"$LOGS/clock-jump-$1-loadtest.log" 2>&1 || true
  wait "$jumper" || true
  FAULTS=/dev/null # the next row's clocks are set back outside any run
  stop_instances
  [[ -s $report ]] || die "the load test wrote no report for $1; see $LOGS/clock-jump-$1-loadtest.log"
  record_run "$1" "$2"
}

# --- the rows --------------------------------------------------------------------------

# wanted ROW: whether the command line asked for ROW (no rows named: every row).
wanted() { ((${#ONLY[@]} == 0)) || [[ " ${ONLY[*]} " == *" $1 "* ]]; }

cd "$ROOT"
for row in "${ONLY[@]}"; do
  [[ " $ALL_ROWS " == *" $row "* ]] || die "unknown row '$row'; the rows are: $ALL_ROWS"
done
for port in "${PORTS[@]}" $STOCK_REDIS_PORT $LOCK_REDIS_PORT "${REDLOCK_PORTS[@]}" "${UNREACHABLE_PORTS[@]}"; do
  listening "$port" && die "port $port is in use; this script uses ${PORTS[*]}, $STOCK_REDIS_PORT, $LOCK_REDIS_PORT, ${REDLOCK_PORTS[*]} and ${UNREACHABLE_PORTS[*]}"
done
[[ -e $LIBFAKETIME ]] || die "$LIBFAKETIME is missing: install the faketime package (\`make services\` does)"
mkdir -p "$DATA" "$RESULTS" "$LOGS"
gcc -shared -fPIC -O2 -o "$DATA/clock-shift.so" scripts/lib/clock-shift.c
build_release
trap stop_everything EXIT
start_redis stock-redis $STOCK_REDIS_PORT

RUNS_FILE="$RESULTS/runs.jsonl"
: >"$RUNS_FILE"

# Kleppmann's example: the first instance cannot reach masters 4 and 5 (a partition: it
# knows them by ports where nothing answers), so each of its grants is a bare majority,
# masters 1 to 3. The second reaches all five. Master 3's clock jumps.
if wanted redlock-clock-jump; then
  ROW=redlock-clock-jump
  jump "$DATA/redlock-clock" 0
  start_redis redlock-1 "${REDLOCK_PORTS[0]}"
  start_redis redlock-2 "${REDLOCK_PORTS[1]}"
  start_redis redlock-3 "${REDLOCK_PORTS[2]}" "$DATA/redlock-clock"
  start_redis redlock-4 "${REDLOCK_PORTS[3]}"
  start_redis redlock-5 "${REDLOCK_PORTS[4]}"
  all_five=$(printf 'redis://127.0.0.1:%s,' "${REDLOCK_PORTS[@]}")
  behind_the_partition=$(printf 'redis://127.0.0.1:%s,' "${REDLOCK_PORTS[@]:0:3}" "${UNREACHABLE_PORTS[@]}")
  start_seckill_on "${PORTS[0]}" -- --lock redlock --redlock-urls "${behind_the_partition%,}"
  start_seckill_on "${PORTS[1]}" -- --lock redlock --redlock-urls "${all_five%,}"
  await_instances "clock-jump-$ROW"
  play $ROW redlock jump_a_redlock_master
  stop_redis redlock-1 redlock-2 redlock-3 redlock-4 redlock-5
fi

for fencing in on off; do
  wanted redis-clock-jump || break
  ROW=redis-clock-jump
  jump "$DATA/lock-redis-clock" 0
  start_redis lock-redis $LOCK_REDIS_PORT "$DATA/lock-redis-clock"
  start_seckill -- --lock redis --lock-redis-url "redis://127.0.0.1:$LOCK_REDIS_PORT" --fencing $fencing
  play $ROW-fencing-$fencing redis jump_the_lock_redis
  stop_redis lock-redis
done

if wanted instance-clock-jump; then
  ROW=instance-clock-jump
  jump "$DATA/instance-clock" +0
  read -r -a clock_env <<<"$(faketime_env "$DATA/instance-clock")"
  start_seckill "${clock_env[@]}" -- --lock redis
  play $ROW redis jump_the_instances
fi

echo
say "200 buyers, 100 units, two instances, $JUMPS jumps a row, $(date -u +%Y-%m-%d), $(nproc) cores:"
safe=yes status=0
rm -f "$RESULTS/table.md"
"$BIN/loadtest" chaos-table "$RUNS_FILE" --layout clock-jump --markdown "$RESULTS/table.md" || status=$?
((status != 2)) || die "loadtest chaos-table could not judge the runs of $RUNS_FILE (above); nothing was published"
((status == 0)) || safe=
say "the table is also in $RESULTS/table.md; each row's report and history are in $RESULTS/"
publish_results "$ROOT/docs/results/clock-jump.md" clock-jump "$COMMAND" "$RESULTS/table.md"
[[ -n $safe ]] || die "unsafe: a row that must hold did not (loadtest chaos-table says which, above)"
