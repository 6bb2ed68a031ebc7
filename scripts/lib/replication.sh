# shellcheck shell=bash
# A cut of one replication link, for the scripts that fail a Redis master over
# (demo-failover.sh, the chaos suite): the master's writes stop reaching its replica, while
# clients and Sentinels still reach both servers. Redis replication is asynchronous: the
# master answers OK to a lock grant before its replica has it. The cut stretches that moment
# for as long as we like, so that the next failover loses the grant every time.
#
#   cut_replication MASTER_PORT   drop what the master on MASTER_PORT sends its replicas
#   heal_replication              let it through again
#
# The cut is an nftables rule in a table of our own, inet seckill_chaos, on the input hook:
# it drops the TCP segments from the master's port to the port of each replica's connection,
# that 4-tuple and nothing else on the machine. Healing deletes the table. Both are safe to
# run again, and both need root; whoever cuts heals on exit (trap heal_replication EXIT).
#
# The caller defines die.

CHAOS_TABLE="inet seckill_chaos"

require_nft() {
  command -v nft >/dev/null ||
    die "nft is missing; cutting a replication link needs nftables: scripts/services.sh install (or apt-get install nftables)"
  (($(id -u) == 0)) || die "cutting a replication link changes the firewall (nftables), which needs root: run this as root"
}

# replace_chaos_table [RULE...]: our table, now holding only RULE... on the input hook, or
# gone without a RULE, in one atomic nft transaction. Declaring the table before deleting
# it makes the delete safe when there is no table.
replace_chaos_table() {
  require_nft
  {
    echo "table $CHAOS_TABLE {}"
    echo "delete table $CHAOS_TABLE"
    if (($# > 0)); then
      echo "table $CHAOS_TABLE {"
      echo "  chain input {"
      echo "    type filter hook input priority filter; policy accept;"
      printf '    %s\n' "$@"
      echo "  }"
      echo "}"
    fi
  } | nft -f - || die "nft refused to change the table $CHAOS_TABLE (its message is above)"
}

# cut_replication MASTER_PORT: drops the replication stream of the Redis on MASTER_PORT to each
# replica it has now (CLIENT LIST TYPE replica names their connections, addr=127.0.0.1:PORT).
# Prints those connections' ports, one a line.
cut_replication() {
  local master=$1 port ports rules=()
  ports=$(timeout 1 redis-cli -p "$master" client list type replica 2>/dev/null |
    sed -n 's/.* addr=127\.0\.0\.1:\([0-9]*\) .*/\1/p') ||
    die "no Redis answers on $master, so there is no replication link of its to cut"
  for port in $ports; do
    rules+=("ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport $master tcp dport $port drop")
  done
  ((${#rules[@]} > 0)) || die "the Redis on $master has no replica connected: there is no replication link to cut"
  replace_chaos_table "${rules[@]}"
  echo "$ports"
}

heal_replication() { replace_chaos_table; }
