#!/usr/bin/env bash
# Lesson 12: one grant sells to every buyer waiting in the instance's queue. The redis and
# mysql locks, each without and with --group-commit, one crowd run each.
# Needs: make services (MariaDB)
# The progress goes to a log. Of the report, which comes last, the block keeps the three
# tables this lesson reads, each under the opening words of its paragraph.
mkdir -p .run/lessons
BENCH_RUNS=1 scripts/bench.sh redis redis+group-commit mysql mysql+group-commit >.run/lessons/12-bench.log 2>&1
echo "scripts/bench.sh exited with code $?"
sed -n '/^\[bench\] [0-9]\{4\}-/,$p' .run/lessons/12-bench.log |
  awk '/^(The crowd|Sales per second against the bound|Past one sale per grant)/ { show = 1; sub(/: .*/, ":"); print ""; print; next }
       /^\|/ { if (show) print; next }
       /^./ { show = 0 }'
