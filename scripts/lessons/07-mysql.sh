#!/usr/bin/env bash
# Lesson 7: the MySQL lock as it ships, without its local queue, without its semaphore,
# and the version lock.
# Needs: make services (MariaDB)
# The progress goes to a log; the block keeps, of each run's report, the lines this lesson
# reads, then the table of the four runs, in the same order.
mkdir -p .run/lessons
scripts/demo.sh mysql mysql+no-local-queue mysql+no-semaphore mysql-version >.run/lessons/07-demo.log 2>&1
echo "scripts/demo.sh exited with code $?"
awk '/^== seckill load test/ { print "--- run " ++run " (row " run " of the table)" }
     /^  (stock \+ lucky|fence refused|errors|latency|mysql statements|lock attempts|semaphore) / || /^  - / || /^verdict:/ { print }' \
  .run/lessons/07-demo.log
sed -n '/^\[demo\] [0-9]* buyers/,/^| mysql-version /p' .run/lessons/07-demo.log
