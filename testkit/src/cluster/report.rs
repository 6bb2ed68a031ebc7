//! What `scripts/cluster.sh status` and `scripts/cluster.sh env` print.

use super::members::{self, Kind, ETCD_CLIENT_PORTS, LOCK_REDIS_PORT, MYSQL_PORT, REDLOCK_PORTS, SENTINEL_PORTS};
use super::members::{STOCK_CLUSTER_PORTS, STOCK_REDIS_PORT, ZOOKEEPER_PORTS};
use super::{failover_group, leaders, say, stock_cluster, Cluster};
use crate::server_control::{cluster_node_ok, listening, redis_field, zookeeper_mode, ProcessState};

/// Each member, its port and state, who leads, and where the stock cluster's segments are.
pub fn status(cluster: &Cluster) {
    for member in members::members() {
        let (name, port) = (member.name.as_str(), member.port);
        let mut state = match cluster.state(name) {
            ProcessState::Paused => "paused".to_owned(),
            ProcessState::Running => "running".to_owned(),
            ProcessState::Gone if listening(port) => "port taken by a server this script did not start".to_owned(),
            ProcessState::Gone => "not running".to_owned(),
        };
        if cluster.state(name) == ProcessState::Running {
            let detail = match member.kind {
                Kind::ZooKeeper { .. } => Some(zookeeper_mode(port).unwrap_or_default()),
                Kind::FailoverRedis | Kind::StockClusterNode => {
                    redis_field(port, "replication", "role").map(|role| role.replace("slave", "replica"))
                }
                _ => None,
            };
            if let Some(detail) = detail {
                state.push_str(&format!(" ({detail})"));
            }
        }
        say(format!("{name}: {state} (port {port})"));
    }
    for what in ["etcd", "zookeeper"] {
        if let Ok(who) = leaders::leader(what) {
            say(format!("{what} leader: {who}"));
        }
    }
    if let Ok(master) = failover_group::master() {
        say(format!(
            "failover-redis master (as the Sentinels name it): {}",
            master.name
        ));
    }
    if STOCK_CLUSTER_PORTS.into_iter().any(cluster_node_ok) {
        if let Err(error) = stock_cluster::segments() {
            say(format!("stock cluster: {error:#}"));
        }
    }
}

/// The SECKILL_* settings that point seckill at the cluster, as shell exports:
/// `eval "$(scripts/cluster.sh env)"`.
pub fn env() -> Vec<String> {
    let listed = |ports: &[u16], format: &dyn Fn(u16) -> String| {
        ports.iter().map(|&port| format(port)).collect::<Vec<_>>().join(",")
    };
    let redlock = listed(&REDLOCK_PORTS, &|port| format!("redis://127.0.0.1:{port}"));
    let sentinels = listed(&SENTINEL_PORTS, &|port| format!("127.0.0.1:{port}"));
    let etcd = listed(&ETCD_CLIENT_PORTS, &|port| format!("http://127.0.0.1:{port}"));
    let zookeeper = listed(&ZOOKEEPER_PORTS, &|port| format!("127.0.0.1:{port}"));
    let cluster_seeds = listed(&STOCK_CLUSTER_PORTS[..2], &|port| format!("127.0.0.1:{port}"));
    let master = failover_group::MASTER_NAME;
    [
        format!("SECKILL_REDIS_URL=redis://127.0.0.1:{STOCK_REDIS_PORT}"),
        format!("SECKILL_LOCK_REDIS_URL=redis://127.0.0.1:{LOCK_REDIS_PORT}"),
        format!("SECKILL_REDLOCK_URLS={redlock}"),
        format!("SECKILL_FAILOVER_LOCK_REDIS_URL=redis-sentinel://{sentinels}#{master}"),
        format!("SECKILL_STOCK_CLUSTER_URL=redis-cluster://{cluster_seeds}"),
        format!("SECKILL_ETCD_ENDPOINTS={etcd}"),
        format!("SECKILL_ZK_CONNECT={zookeeper}"),
        format!("SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:{MYSQL_PORT}/seckill"),
    ]
    .map(|setting| format!("export {setting}"))
    .into()
}
