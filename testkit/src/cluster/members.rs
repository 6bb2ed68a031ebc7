//! Who is in the chaos suite's cluster: each member's name, kind and port, in the order
//! they start.

use anyhow::bail;

/// The stock Redis, every write fsynced to its append-only file: a kill -9 loses no sale.
pub const STOCK_REDIS_PORT: u16 = 6479;
/// The lock Redis of redis-degrade: nothing on disk.
pub const LOCK_REDIS_PORT: u16 = 6480;
pub const REDLOCK_PORTS: [u16; 5] = [6481, 6482, 6483, 6484, 6485];
/// failover-redis-a and -b: a master and its replica, the roles swapping on each failover.
pub const FAILOVER_REDIS_PORTS: [u16; 2] = [6486, 6487];
/// sentinel-1, -2 and -3, which watch the failover group.
pub const SENTINEL_PORTS: [u16; 3] = [26486, 26487, 26488];
/// stock-cluster-1 ... -6, their cluster bus on these plus 10000.
pub const STOCK_CLUSTER_PORTS: [u16; 6] = [7001, 7002, 7003, 7004, 7005, 7006];
/// etcd-1, -2 and -3: their client ports, then their peer ports.
pub const ETCD_CLIENT_PORTS: [u16; 3] = [12379, 22379, 32379];
pub const ETCD_PEER_PORTS: [u16; 3] = [12380, 22380, 32380];
/// zookeeper-1, -2 and -3: their client ports; they talk among themselves on 2881-2883
/// (followers to the leader) and 3881-3883 (elections).
pub const ZOOKEEPER_PORTS: [u16; 3] = [2182, 2183, 2184];
pub const MYSQL_PORT: u16 = 3307;

/// What a member is, which says how it starts and when it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A Redis alone: the stock's, the lock's or a Redlock master.
    Redis {
        fsync_every_write: bool,
    },
    /// A Redis of the failover group (0: a, 1: b).
    FailoverRedis,
    Sentinel,
    StockClusterNode,
    /// Member `number` (1 to 3) of the etcd cluster.
    Etcd {
        number: usize,
    },
    /// Member `number` (1 to 3) of the ZooKeeper ensemble.
    ZooKeeper {
        number: usize,
    },
    MariaDb,
}

/// One member of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub port: u16,
    pub kind: Kind,
}

fn member(name: impl Into<String>, port: u16, kind: Kind) -> Member {
    Member {
        name: name.into(),
        port,
        kind,
    }
}

/// Every member, in the order they start. The Sentinels come before the members they
/// watch: a failover-redis member starts as a replica of the one they name master.
pub fn members() -> Vec<Member> {
    let redis = |fsync_every_write| Kind::Redis { fsync_every_write };
    let mut all = vec![
        member("stock-redis", STOCK_REDIS_PORT, redis(true)),
        member("lock-redis", LOCK_REDIS_PORT, redis(false)),
    ];
    all.extend(REDLOCK_PORTS.map(|port| member(format!("redlock-{port}"), port, redis(true))));
    all.extend(
        (1..)
            .zip(SENTINEL_PORTS)
            .map(|(i, port)| member(format!("sentinel-{i}"), port, Kind::Sentinel)),
    );
    all.extend(
        ["a", "b"]
            .iter()
            .zip(FAILOVER_REDIS_PORTS)
            .map(|(letter, port)| member(format!("failover-redis-{letter}"), port, Kind::FailoverRedis)),
    );
    all.extend(
        (1..)
            .zip(STOCK_CLUSTER_PORTS)
            .map(|(i, port)| member(format!("stock-cluster-{i}"), port, Kind::StockClusterNode)),
    );
    all.extend(
        (1..)
            .zip(ETCD_CLIENT_PORTS)
            .map(|(number, port)| member(format!("etcd-{number}"), port, Kind::Etcd { number })),
    );
    all.extend(
        (1..)
            .zip(ZOOKEEPER_PORTS)
            .map(|(number, port)| member(format!("zookeeper-{number}"), port, Kind::ZooKeeper { number })),
    );
    all.push(member("mysql", MYSQL_PORT, Kind::MariaDb));
    all
}

/// The member named `name`, or an error that lists the names.
pub fn named(name: &str) -> anyhow::Result<Member> {
    let all = members();
    if let Some(found) = all.iter().find(|member| member.name == name) {
        return Ok(found.clone());
    }
    let names: Vec<&str> = all.iter().map(|member| member.name.as_str()).collect();
    bail!("no member named '{name}'; the members are: {}", names.join(" "))
}

/// The member that listens on `port`.
pub fn on_port(port: u16) -> anyhow::Result<Member> {
    match members().into_iter().find(|member| member.port == port) {
        Some(member) => Ok(member),
        None => bail!("no member listens on {port}"),
    }
}

/// The members of one `kind` (any Redis alone, any etcd member, ...).
pub fn of_kind(matches: impl Fn(Kind) -> bool) -> Vec<Member> {
    members().into_iter().filter(|member| matches(member.kind)).collect()
}

/// etcd's `--initial-cluster`: every member's name and peer URL.
pub fn etcd_initial_cluster() -> String {
    let peers: Vec<String> = (1..)
        .zip(ETCD_PEER_PORTS)
        .map(|(i, peer)| format!("etcd-{i}=http://127.0.0.1:{peer}"))
        .collect();
    peers.join(",")
}

/// ZooKeeper's `server.N=` lines: every member's quorum and election ports.
pub fn zookeeper_servers() -> Vec<String> {
    (1..=3)
        .map(|i| format!("server.{i}=127.0.0.1:{}:{}", 2880 + i, 3880 + i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_has_its_own_name_and_port() {
        let all = members();
        let names: std::collections::HashSet<_> = all.iter().map(|member| &member.name).collect();
        let ports: std::collections::HashSet<_> = all.iter().map(|member| member.port).collect();
        assert_eq!((names.len(), ports.len(), all.len()), (25, 25, 25));
    }

    #[test]
    fn the_sentinels_start_before_the_members_they_watch() {
        let position = |name: &str| members().iter().position(|member| member.name == name).unwrap();
        assert!(position("sentinel-3") < position("failover-redis-a"));
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_list() {
        let error = named("etcd-4").unwrap_err().to_string();
        assert!(
            error.contains("no member named 'etcd-4'") && error.contains("zookeeper-3 mysql"),
            "{error}"
        );
    }
}
