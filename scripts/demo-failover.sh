#!/usr/bin/env bash
# A failover that loses a lock, step by step. Redis replication is asynchronous: the master
# answers OK to a lock grant before its replica has it. Here the replica misses one grant
# (its replication link is cut, scripts/lib/replication.sh), the master is killed at once,
# the Sentinels promote the replica, and the promoted replica grants the same lock to a
# second client while the first one's lease still runs: two holders. Then the link is healed
# and the old master comes back as the new master's replica.
#
#   scripts/demo-failover.sh [ROUNDS]      (make demo-failover: 3 rounds)
#
# Each round fails the group over once, so the rounds run back to back and the roles swap
# every time. Each step prints the seconds since its round began. At the end, the time from
# each kill to the promotion: a failover faster than the lease leaves the lost grant in use.
# Nothing of the cut link arrives late: the kernel drops the dead master's connection, and
# what it had not delivered, when the process dies.
#
# The servers are the failover group of scripts/cluster.sh (failover-redis-a and -b, three
# Sentinels), started here when they are not running and left running (stop them with
# scripts/cluster.sh stop NAME...). Needs root, for nftables. Exit 1 when a round did not
# end with two holders.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=${1:-3}
GROUP=(sentinel-1 sentinel-2 sentinel-3 failover-redis-a failover-redis-b)
KEY=lock:stock
LEASE_MS=10000

say() { printf '[demo-failover] %s\n' "$*"; }
die() { printf '[demo-failover] error: %s\n' "$*" >&2; exit 1; }
source "$ROOT/scripts/lib/servers.sh"     # poll
source "$ROOT/scripts/lib/replication.sh" # cut_replication, heal_replication, require_nft
cluster() { "$ROOT/scripts/cluster.sh" "$@"; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number of rounds, got '$ROUNDS'"

now_ms() { echo $((${EPOCHREALTIME/[.,]/} / 1000)); }
seconds() { printf '%.1f' "$1e-3"; }
# stamp WHAT: a line of the round, WHAT after the seconds since the round began.
stamp() { printf '%6.2f s  %s\n' "$(($(now_ms) - begin))e-3" "$*"; }
# ask PORT COMMAND...: the answer of the Redis on PORT, "(nil)" for none.
ask() { local answer; answer=$(redis-cli -p "$1" "${@:2}" 2>&1) || true; echo "${answer:-(nil)}"; }
holds() { [[ $(ask "$1" get "$KEY") == "$2" ]]; }
promoted() { [[ $(cluster leader failover-redis) == "$1" ]]; }

# round: one grant lost in one failover. Sets WINDOW_MS, and TWO_HOLDERS to 1 when it showed them.
round() {
  local master replica master_port replica_port cut granted killed answer
  master=$(cluster leader failover-redis)
  replica=failover-redis-a
  [[ $master == "$replica" ]] && replica=failover-redis-b
  master_port=$(cluster port "$master")
  replica_port=$(cluster port "$replica")
  redis-cli -p "$master_port" del "$KEY" >/dev/null # left by an earlier round
  begin=$(now_ms)
  stamp "$master ($master_port) is the master, $replica ($replica_port) its replica"

  # 1. Replication works: the replica follows a grant and its release.
  stamp "owner-1: SET $KEY owner-1 NX PX $LEASE_MS on the master -> $(ask "$master_port" set "$KEY" owner-1 NX PX "$LEASE_MS")"
  poll 2 holds "$replica_port" owner-1 || die "the replica did not get owner-1's grant within 2 s"
  stamp "  the replica has it: $KEY = $(ask "$replica_port" get "$KEY")"
  stamp "owner-1 releases: DEL $KEY -> $(ask "$master_port" del "$KEY")"
  poll 2 holds "$replica_port" "(nil)" || die "the replica did not follow owner-1's release within 2 s"
  stamp "  the replica follows: $KEY = $(ask "$replica_port" get "$KEY")"

  # 2. The replica misses the next grant, and the master dies with it.
  cut=$(cut_replication "$master_port")
  stamp "replication cut: nftables drops what $master_port sends to 127.0.0.1:$cut"
  granted=$(now_ms)
  stamp "owner-2: SET $KEY owner-2 NX PX $LEASE_MS on the master -> $(ask "$master_port" set "$KEY" owner-2 NX PX "$LEASE_MS")"
  stamp "  the replica: $KEY = $(ask "$replica_port" get "$KEY")"
  cluster kill "$master" >/dev/null
  killed=$(now_ms)
  stamp "$master killed (kill -9)"

  # 3. The Sentinels promote the replica that never saw owner-2's grant.
  poll 30 promoted "$replica" ||
    die "the Sentinels did not promote $replica within 30 s; their logs are in $ROOT/.run/cluster/logs"
  WINDOW_MS=$(($(now_ms) - killed))
  stamp "the Sentinels name $replica master, $(seconds "$WINDOW_MS") s after the kill"
  stamp "  the new master: $KEY = $(ask "$replica_port" get "$KEY")"
  answer=$(ask "$replica_port" set "$KEY" owner-3 NX PX "$LEASE_MS")
  stamp "owner-3: SET $KEY owner-3 NX PX $LEASE_MS on the new master -> $answer"
  TWO_HOLDERS=0
  if [[ $answer == OK ]]; then
    TWO_HOLDERS=1
    stamp "two holders of $KEY: owner-2 (for $(seconds $((granted + LEASE_MS - $(now_ms)))) s more, as far as it knows) and owner-3"
  fi

  # 4. Heal, and the old master comes back as a replica of the new one.
  heal_replication
  stamp "replication healed"
  cluster restart "$master" >/dev/null
  stamp "$master started again: ROLE -> $(ask "$master_port" role | head -4 | paste -sd ' ')"
  stamp "  the new master, after the heal: $KEY = $(ask "$replica_port" get "$KEY")"
}

require_nft
build_the_cluster_binary
cluster start "${GROUP[@]}"
trap heal_replication EXIT

windows=()
shown=0
for ((i = 1; i <= ROUNDS; i++)); do
  echo
  say "round $i of $ROUNDS"
  round
  windows+=("$(seconds "$WINDOW_MS") s")
  shown=$((shown + TWO_HOLDERS))
done

echo
say "from the kill to the promotion: ${windows[*]} (each lease: $(seconds "$LEASE_MS") s)"
say "two holders of $KEY in $shown of $ROUNDS rounds"
((shown == ROUNDS))
