//! A Redis Cluster of a test's own: masters with a replica each, on free loopback ports.

use std::process::Command;
use std::time::Duration;

use super::private_redis::PrivateRedis;
use super::server_control::{cluster_node_ok, poll};

/// How long a master may be silent before the cluster fails it over: as long as in the
/// chaos suite's stock cluster, so that a test's failover takes a couple of seconds.
pub const NODE_TIMEOUT_MS: u64 = crate::cluster::stock_cluster::NODE_TIMEOUT_MS;

/// `masters` masters and one replica each, joined by `redis-cli --cluster create`, which
/// spreads the 16,384 slots evenly over the masters.
pub struct PrivateRedisCluster {
    pub nodes: Vec<PrivateRedis>,
}

impl PrivateRedisCluster {
    pub fn start(masters: usize) -> Self {
        let ports = cluster_ports(2 * masters);
        let nodes: Vec<PrivateRedis> = ports
            .iter()
            .map(|&port| PrivateRedis::start_cluster_node(port, NODE_TIMEOUT_MS))
            .collect();
        let addresses: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli runs: `make test` installs redis-tools");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = PrivateRedisCluster { nodes };
        cluster.wait_until_every_node_says_ok();
        cluster
    }

    /// The URL seckill reads: `redis-cluster://` and two of the nodes.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..2]
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// Puts the stock of `config` on this cluster, and its redis lock on the project's
    /// test Redis: a lock cannot live on a cluster.
    pub fn holds_the_stock_of(&self, config: &mut seckill::config::Config) {
        config.redis_url = self.url();
        config.redis.lock_redis_url = Some(super::test_redis::redis_url());
    }

    /// The nodes that are masters now.
    pub fn masters(&self) -> Vec<&PrivateRedis> {
        self.nodes
            .iter()
            .filter(|node| node.info("replication").contains("role:master"))
            .collect()
    }

    fn wait_until_every_node_says_ok(&self) {
        let every_node_ok = || self.nodes.iter().all(|node| cluster_node_ok(node.port));
        assert!(
            poll(Duration::from_secs(20), every_node_ok),
            "the cluster was not ok within 20 s"
        );
    }
}

/// `count` free ports whose bus ports (`port + 10000`) are free too.
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut held = Vec::new();
    while held.len() < count {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let Some(bus) = port.checked_add(10_000) else { continue };
        if let Ok(bus_listener) = std::net::TcpListener::bind(("127.0.0.1", bus)) {
            held.push((port, listener, bus_listener));
        }
    }
    held.into_iter().map(|(port, _, _)| port).collect()
}
