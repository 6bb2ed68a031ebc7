#!/usr/bin/env bash
# The benchmark behind the README's performance tables: for every strategy, two
# instances on ports 8080 and 8090, then `bench measure` (the 500-buyer crowd N times,
# one serial client, a sustained keep-alive load, the bound of the lock's critical
# path and who used the CPU); then the tables, the ordering found, and an HTML report.
#
#   scripts/bench.sh [RUN...]          default: every strategy, then VARIANTS below
#   DRY_RUN=1 scripts/bench.sh         prints the runs, one a line, and does nothing else
#   BENCH_RUNS=5 BENCH_SECONDS=2 BENCH_CONNECTIONS=64 scripts/bench.sh redis etcd
#
# By default the last runs split the stock into 2, 4, 8 and 16 segments (`+segments-N`) for
# redis, etcd and mysql: the report's table "Past one lock" sets them against N locks' bound;
# and 16 segments again with the sold-out flag, for the table "After the sell-out";
# and atomic and redis with every unit sold written as an order through a Redis Stream into
# MySQL (`+orders`, src/orders/mod.rs), beside the same strategies without; redis, etcd,
# zookeeper and mysql with `+group-commit` (one grant sells to every buyer waiting in the
# instance's queue, src/sale/group/mod.rs), for the table "Past one sale per grant"; and, last, the
# stock on the Redis Cluster of `make cluster` (`+stock-cluster`: its six nodes are started
# for the run, and stopped after if they were not running) beside the same run on one Redis,
# for the table "Past one machine".
# A RUN is a strategy or a strategy and a variant, as for `make demo`, or `python-peer`:
# the same sale written with Starlette and redis-py's lock (loadtest/peer/app.py), two
# uvicorn instances, its packages installed into .run/peer-venv on first use; it polls
# the lock every 100 ms as redis-py does by default, `python-peer+poll-Nms` every N ms.
# The default, 100 ms, is its best setting here: the sweep is in docs/notes/bench.md, in the
# notes on the run of 2026-11-24. Starts the backing servers it needs (and stops the ones it
# started), builds in release mode, and leaves one JSON per run, the tables (tables.md) and
# report.html in .run/results/bench/. The report includes the chaos table and the lock
# benchmark when `make chaos` and `make lockbench` have left theirs in .run/results/.
# With PUBLISH=1 the tables also go into docs/results/ (scripts/lib/publish.sh), each part
# into the page that shows it (PAGE_PARTS below), all from this run. Every part must be
# there, so publish a run with a lock and a `+segments-N`, as the default set is; a run
# without publishes nothing and says what it lacks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
LOGS="$RUN/logs"
RESULTS="$RUN/results/bench"
PORTS=(8080 8090)
# The runs past the plain strategies (which the binary lists, scripts/lib/strategies.sh).
VARIANTS=(redis+no-local-queue redis+no-hand-over redlock+no-local-queue redlock+no-hand-over
          mysql+no-hand-over python-peer atomic+orders redis+orders redis+stock-wait
          redis+segments-2 redis+segments-4 redis+segments-8 redis+segments-16
          etcd+segments-2 etcd+segments-4 etcd+segments-8 etcd+segments-16
          mysql+segments-2 mysql+segments-4 mysql+segments-8 mysql+segments-16
          redis+segments-16+sold-out-flag etcd+segments-16+sold-out-flag mysql+segments-16+sold-out-flag
          redis+group-commit etcd+group-commit zookeeper+group-commit mysql+group-commit
          atomic+stock-cluster redis+segments-6+lock-redis redis+segments-6+lock-redis+stock-cluster)

# The pages of docs/results/ that show the tables, and the sentence that opens the paragraph
# above each table in tables.md (`tables::bench` in loadtest/src/render/tables/mod.rs).
# A paragraph and its table go to the page of its opening, in the order of tables.md.
PAGE_PARTS=(
  "bench|The crowd: "
  "bench|Sales per second against the bound: "
  "bench-servers|The same round trips under sustained load: "
  "bench-breakdown|Where the time goes under sustained load, "
  "bench-breakdown|One client alone, where a sale's time goes, "
  "bench-servers|What the servers answered per unit sold "
  "bench|Ordering by sustained sales/s: "
  "bench-past-one-lock|Past one lock: "
  "bench-past-one-lock|After the sell-out: "
  "bench-past-one-lock|Past one sale per grant: "
  "bench-past-one-lock|Past one machine: "
  "bench-past-one-lock|A model of the scale, "
)

# split_tables TABLES FOLDER: writes the parts of TABLES into FOLDER/PAGE.md, one file a
# page. A paragraph is a line after a blank one that is not a table's; each must open with
# a sentence of PAGE_PARTS. Fails, naming them, if one is missing or one is unknown: a
# page would otherwise be published empty, or hold a table that belongs elsewhere.
split_tables() {
  local tables=$1 folder=$2
  mkdir -p "$folder" && rm -f "$folder"/*.md
  awk -v folder="$folder" -v parts="$(printf '%s\n' "${PAGE_PARTS[@]}")" '
    BEGIN {
      n = split(parts, lines, "\n")
      for (i = 1; i <= n; i++) if (lines[i] != "") {
        count++; bar = index(lines[i], "|")
        page[count] = substr(lines[i], 1, bar - 1); opening[count] = substr(lines[i], bar + 1)
      }
      after_blank = 1
    }
    # The part read so far, without its trailing blank lines, after a blank line if its
    # page already has one.
    function flush() {
      if (current == "") return
      while (kept > 0 && held[kept] == "") kept--
      if (current in written) print "" > current
      for (j = 1; j <= kept; j++) print held[j] > current
      written[current] = 1; kept = 0
    }
    {
      if (after_blank && $0 != "" && substr($0, 1, 1) != "|") {
        found = 0
        for (i = 1; i <= count; i++) if (index($0, opening[i]) == 1) found = i
        if (!found) { printf "split: a paragraph no page shows: \"%.60s...\"; add its opening to PAGE_PARTS\n", $0 > "/dev/stderr"; bad = 1 }
        else { flush(); current = folder "/" page[found] ".md"; seen[found] = 1 }
      }
      if (current != "") held[++kept] = $0
      else if ($0 != "" && !bad) { print "split: a table before any paragraph" > "/dev/stderr"; bad = 1 }
      after_blank = ($0 == "")
    }
    END {
      flush()
      for (i = 1; i <= count; i++) if (!seen[i]) {
        printf "split: no paragraph opens with \"%s\" (for %s.md): this run did not measure it\n", opening[i], page[i] > "/dev/stderr"
        bad = 1
      }
      exit bad
    }' "$tables"
}

say() { printf '[bench] %s\n' "$*"; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening
source "$ROOT/scripts/lib/instances.sh" # variant_flags, start_instances, stop_instances, ...
source "$ROOT/scripts/lib/publish.sh"   # publish_results, command_line
source "$ROOT/scripts/lib/strategies.sh" # load_strategies, strategies
COMMAND=$(command_line BENCH_RUNS BENCH_SECONDS BENCH_CONNECTIONS -- scripts/bench.sh "$@")
load_strategies
STRATEGIES=("$@")
if ((${#STRATEGIES[@]} == 0)); then mapfile -t STRATEGIES < <(strategies true); STRATEGIES+=("${VARIANTS[@]}"); fi

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
if [[ ${DRY_RUN:-0} == 1 ]]; then printf '%s\n' "${STRATEGIES[@]}"; exit 0; fi

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

# The stock cluster's nodes, for the runs on it; stopped at exit if this started them.
STOCK_CLUSTER_STARTED=()
stop_stock_cluster() {
  if ((${#STOCK_CLUSTER_STARTED[@]} > 0)); then "$ROOT/scripts/cluster.sh" stop "${STOCK_CLUSTER_STARTED[@]}"; fi
}
trap 'end_run; stop_stock_cluster' EXIT
for run in "${STRATEGIES[@]}"; do
  uses_stock_cluster "$run" || continue
  for node in "${STOCK_CLUSTER_NODES[@]}"; do
    [[ -e $RUN/cluster/pids/$node.pid ]] || STOCK_CLUSTER_STARTED+=("$node")
  done
  "$ROOT/scripts/cluster.sh" start "${STOCK_CLUSTER_NODES[@]}"
  "$ROOT/scripts/cluster.sh" heal-stock-cluster
  break
done

# The processes whose CPU use `bench` reports: both instances and every backing server.
watch_flags() {
  local pidfile i node
  for pidfile in "$RUN"/pids/*.pid; do
    echo "--watch $(basename "$pidfile" .pid)=$(cat "$pidfile")"
  done
  if uses_stock_cluster "$run"; then
    for node in "${STOCK_CLUSTER_NODES[@]}"; do echo "--watch $node=$(cat "$RUN/cluster/pids/$node.pid")"; done
  fi
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
  # The stock's and the lock's Redis the run's flags name, for the probes and the checker.
  read -r -a servers <<<"$(probe_env "$run" | tr '\n' ' ')"
  status=0
  env "${servers[@]}" target/release/bench measure --label "$run" --out "$RESULTS/$run.json" \
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
  --html "$RESULTS/report.html" --chaos "$RUN/results/chaos/runs.jsonl" --lockbench "$RUN/results/lockbench.json" || true
if [[ ${PUBLISH:-0} == 1 ]]; then
  split_tables "$RESULTS/tables.md" "$RESULTS/pages" ||
    die "$RESULTS/tables.md does not hold every part its pages show (above), so no page was published"
  publish_results "$ROOT/docs/results/bench.md" bench "$COMMAND" "$RESULTS/pages/bench.md"
  publish_results "$ROOT/docs/results/bench-servers.md" bench-servers "$COMMAND" "$RESULTS/pages/bench-servers.md"
  publish_results "$ROOT/docs/results/bench-breakdown.md" bench-breakdown "$COMMAND" "$RESULTS/pages/bench-breakdown.md"
  publish_results "$ROOT/docs/results/bench-past-one-lock.md" bench-past-one-lock "$COMMAND" "$RESULTS/pages/bench-past-one-lock.md"
fi
if ((${#failed[@]} > 0)); then
  die "strategies that did not keep their promise (see their rows): ${failed[*]}"
fi
