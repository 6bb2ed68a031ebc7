#!/usr/bin/env bash
# Lesson 15: lesson 3's run with fencing off, as a history: every request and its answer,
# the pause among them, and the checks that judge them. Then a second crowd, with no
# fault, whose history is checked alone: once as it was, once with one "sold" answer
# turned into "sold out", the answer a stale memory of the sale would give.
# Needs: redis
mkdir -p .run/lessons
flags=(--lock redis --fencing off --lock-ttl-ms 500 --chaos-pause-before-write-ms 50 --acquire-timeout-ms 30000)
seckill serve --port 8080 "${flags[@]}" >.run/lessons/15-8080.log 2>&1 & holder=$!
seckill serve --port 8090 "${flags[@]}" >/dev/null 2>&1 & other=$!
sleep 1
run=.run/lessons/15-paused; faults=$run.faults.jsonl; rm -f $faults
generation=$(redis-cli get stock:generation)
loadtest --users 200 --stock 100 --report-file $run.json --faults-file $faults >/dev/null & crowd=$!
until [ "$(redis-cli get stock:generation)" != "$generation" ] && [ "$(redis-cli get lucky)" -ge 10 ]; do sleep 0.01; done
until redis-cli get lock:stock | grep -q '^seckill-8080:'; do sleep 0.01; done
loadtest record-fault --to $faults pause seckill-8080; kill -STOP $holder
sleep 1.5
kill -CONT $holder; loadtest record-fault --to $faults resume seckill-8080
wait $crowd; echo "loadtest exited with code $?"
echo "--- the checks of the paused run, from its report"
jq -r '.checks[] | "\(.name): \(.status)"' $run.json
echo "--- the first thing unique found"
jq -r '.checks[] | select(.name == "unique") | .findings[0]' $run.json
echo "--- the history of those two buyers, and the pause (ms from the first request)"
two=$(jq -c '[.checks[] | select(.name == "unique") | .culprits[0:2][]]' $run.json)
jq -r -s --argjson two "$two" '.[0].at_us as $start | .[]
  | select(.process == "nemesis" or (.process as $p | $two | index($p)))
  | "\((.at_us - $start) / 1000 | floor) ms: \(.process) \(.type) \(.host // .instance // .fault // "") \(.sold_unit.unit // .target // .answer // "")"' \
  $run.history.jsonl
echo "--- the timeline of the whole run: $run.history.html"
held=.run/lessons/15-held
loadtest --users 200 --stock 100 --report-file $held.json >/dev/null; echo "loadtest exited with code $?"
echo "--- the run with no fault, its history checked alone"
loadtest check $held.history.jsonl --stock 100; echo "loadtest check exited with code $?"
echo "--- the same history, its tenth \"sold\" answered \"sold out\" instead"
tenth=$(grep -n '"type":"ok"' $held.history.jsonl | sed -n 10p | cut -d: -f1)
sed "${tenth}s/\"type\":\"ok\".*/\"type\":\"fail\",\"answer\":\"sold_out\"}/" $held.history.jsonl >$held.edited.jsonl
loadtest check $held.edited.jsonl --stock 100 --timeline $held.edited.html; echo "loadtest check exited with code $?"
kill $holder $other; wait
