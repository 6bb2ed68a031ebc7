#!/usr/bin/env bash
# Lesson 4: the first row of `make clock-jump`: master 3's clock jumps past the lease
# while the first instance's grant rests on masters 1 to 3. The script starts its own
# servers.
# Needs: faketime and gcc (make services installs them)
scripts/clock-jump.sh redlock-clock-jump
echo "scripts/clock-jump.sh exited with code $?"
echo "--- the load test's report"
sed -n '/^== seckill/,/^verdict/p' .run/logs/clock-jump-redlock-clock-jump-loadtest.log
