#!/usr/bin/env bash
# The whole lesson in one command: for every strategy, two instances of the service on
# ports 8080 and 8090, 500 buyers against 300 units, a verdict; then one comparison table.
#
#   scripts/demo.sh [RUN...]     default: every strategy, each followed by its VARIANTS below
#   DRY_RUN=1 scripts/demo.sh    prints the runs, one a line, and does nothing else
#
# A RUN is a strategy (`redis`), or a strategy and a variant (`mysql+no-semaphore`; see
# scripts/lib/instances.sh).
#
# Starts the backing servers it needs (and stops the ones it started), builds in
# release mode, and leaves the reports in .run/results/. With PUBLISH=1 it also writes
# the table into docs/results/demo.md (scripts/lib/publish.sh), and, when it ran every
# strategy, the chart into docs/comparison.svg, the README's picture.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
RESULTS="$RUN/results"
LOGS="$RUN/logs"
PORTS=(8080 8090)
# Shown after their strategy: what MySQL's locks owe to the local queue and the semaphore.
VARIANTS=(mysql+no-local-queue mysql+no-semaphore mysql-version+no-local-queue mysql-version+no-semaphore)

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"   # listening
source "$ROOT/scripts/lib/instances.sh" # variant_flags, start_instances, stop_instances, ...
source "$ROOT/scripts/lib/publish.sh"   # publish_results, command_line
source "$ROOT/scripts/lib/strategies.sh" # load_strategies, with_variants
COMMAND=$(command_line -- scripts/demo.sh "$@")
load_strategies
STRATEGIES=("$@")
((${#STRATEGIES[@]} > 0)) || mapfile -t STRATEGIES < <(with_variants "${VARIANTS[@]}")

for run in "${STRATEGIES[@]}"; do variant_flags "$run" >/dev/null; done # refuse a bad variant before any work
if [[ ${DRY_RUN:-0} == 1 ]]; then printf '%s\n' "${STRATEGIES[@]}"; exit 0; fi

mkdir -p "$RESULTS"
begin_run

reports=()
failed=()
for run in "${STRATEGIES[@]}"; do
  start_instances "$run"

  echo
  status=0
  # A sale that sells one unit per buyer is shown with buyers who try twice; the load
  # test sends none by default (LOADTEST_REPEAT_BUYERS, when set, decides).
  repeat=()
  [[ $run == *+one-per-buyer* && -z ${LOADTEST_REPEAT_BUYERS:-} ]] && repeat=(--repeat-buyers 0.1)
  target/release/loadtest "${repeat[@]}" --report-file "$RESULTS/$run.json" || status=$?
  case $status in
    0) reports+=("$RESULTS/$run.json") ;;
    1) reports+=("$RESULTS/$run.json"); failed+=("$run") ;;
    *) die "the load test could not run against $run" ;;
  esac
  stop_instances
done

echo
say "500 buyers, 300 units, two instances (ports ${PORTS[*]}), release build, $(nproc) cores:"
target/release/loadtest --compare "${reports[@]}" --chart "$RESULTS/comparison.svg" | tee "$RESULTS/compare.txt"
grep '^|' "$RESULTS/compare.txt" >"$RESULTS/table.md" # the table alone, for the results page
publish_results "$ROOT/docs/results/demo.md" demo "$COMMAND" "$RESULTS/table.md"
if [[ ${PUBLISH:-0} == 1 && $# == 0 ]]; then
  cp "$RESULTS/comparison.svg" "$ROOT/docs/comparison.svg" && say "the chart is now docs/comparison.svg"
fi
if ((${#failed[@]} > 0)); then
  die "strategies whose verdict is not what they promise (see their reports above): ${failed[*]}"
fi
