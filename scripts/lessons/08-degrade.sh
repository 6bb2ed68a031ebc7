#!/usr/bin/env bash
# Lesson 8: the lock Redis killed under 8000 buyers and started again (`make demo-degrade`),
# then the grant log the load test checked, grouped by epoch.
# Needs: make services, jq
scripts/demo-degrade.sh
echo "scripts/demo-degrade.sh exited with code $?"
echo "--- stock:grants, by epoch (seconds from the first grant)"
redis-cli --raw lrange stock:grants 0 -1 | jq -rs '
  (map(.granted_at_us) | min) as $start
  | group_by(.fencing_token.epoch)[]
  | "epoch \(.[0].fencing_token.epoch): \(length) grants, tokens \(map(.fencing_token.counter) | min)..\(map(.fencing_token.counter) | max), from \((map(.granted_at_us) | min) - $start | . / 1000 | round / 1000) s to \((map(.granted_at_us) | max) - $start | . / 1000 | round / 1000) s"'
