#!/usr/bin/env bash
# Lesson 12: a group holds at most the buyers waiting at once. The redis lock with and
# without --group-commit under 8, 64 and 256 keep-alive connections (4, 32 and 128 on each
# instance); of each run, the report's table "Past one sale per grant".
# Needs: make services
for connections in 8 64 256; do
  echo "== $connections connections"
  BENCH_RUNS=1 BENCH_CONNECTIONS=$connections scripts/bench.sh redis redis+group-commit >.run/group-size.log 2>&1
  echo "scripts/bench.sh exited with code $?"
  # The report comes last in the log: its table, the last one under that paragraph.
  awk '/^Past one sale per grant/ { table = ""; open = 1; next }
       open && /^\|/ { table = table $0 "\n"; next }
       open && table != "" { open = 0 }
       END { printf "%s", table }' .run/group-size.log
done
