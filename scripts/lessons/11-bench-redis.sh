#!/usr/bin/env bash
# Lesson 11: the redis lock measured against the bound of its critical path, one crowd
# run instead of five.
# Needs: make services
# Its progress and tables go to a log; the block shows the report once, from its headline on.
mkdir -p .run/lessons
BENCH_RUNS=1 scripts/bench.sh redis >.run/lessons/11-bench.log 2>&1
echo "scripts/bench.sh exited with code $?"
sed -n '/^\[bench\] [0-9]\{4\}-/,$p' .run/lessons/11-bench.log
