//! The stock on a Redis Cluster: `redis-cluster://host:port,host:port`.
//!
//! A Redis Cluster splits the key space into 16,384 hash slots and gives each master a
//! share of them; each master has replicas, which the cluster promotes by itself when
//! their master dies. A client learns the map of slots from any node it is given, sends
//! each command to the master of its key's slot, and follows the `MOVED` and `ASK`
//! redirections a node answers when a slot moved (a reshard, a failover).
//!
//! One rule shapes the sale's keys: **a script or a transaction touches keys of one slot
//! only**. A key's slot is computed from its *hash tag*, the part between `{` and `}`,
//! when it has one, so keys that share a tag share a slot. The sale gives every segment
//! a tag of its own ([`crate::sale::keys`]): each segment's stock, fence, sale records
//! and outcomes live together, and the segments spread over the masters.
//!
//! ## References
//! - Redis docs, "Scale with Redis Cluster" and the cluster specification (hash tags,
//!   `MOVED`/`ASK`): <https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/>
//! - The `redis` crate's `cluster_async` module, which this connection is.

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::RedisResult;

/// The URL scheme that names the nodes of a Redis Cluster.
pub const CLUSTER_SCHEME: &str = "redis-cluster://";
/// How long one command may take, redirections included, before it counts as failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long opening a TCP connection to a node may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a command is sent again after a redirection or a lost node (the client
/// then refreshes its map of the slots).
const RETRIES: u32 = 3;

/// Some nodes of a cluster: the client learns the others from them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterAddress {
    pub nodes: Vec<String>,
}

impl ClusterAddress {
    /// Reads `redis-cluster://host:port,host:port`; `None` for a URL of another scheme.
    pub fn parse(url: &str) -> Option<Result<Self, String>> {
        let rest = url.strip_prefix(CLUSTER_SCHEME)?;
        let example = "redis-cluster://127.0.0.1:7000,127.0.0.1:7001";
        let nodes: Vec<String> = rest
            .trim_end_matches('/')
            .split(',')
            .map(str::trim)
            .map(str::to_owned)
            .collect();
        if let Some(bad) = nodes.iter().find(|node| !is_host_and_port(node)) {
            return Some(Err(format!(
                "`{bad}` in `{url}` is not a cluster node's host:port, as in {example} \
                 (a cluster has no database numbers)"
            )));
        }
        Some(Ok(ClusterAddress { nodes }))
    }

    /// A client of the first node, for what only one node needs to hear: a subscription
    /// (a cluster passes every `PUBLISH` on to all its nodes).
    pub fn first_node(&self) -> RedisResult<redis::Client> {
        redis::Client::open(format!("redis://{}", self.nodes[0]))
    }

    /// One connection that routes each command to the master of its key's slot.
    pub async fn connect(&self) -> RedisResult<ClusterConnection> {
        let urls = self.nodes.iter().map(|node| format!("redis://{node}"));
        ClusterClient::builder(urls)
            .connection_timeout(CONNECTION_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(RETRIES)
            .build()?
            .get_async_connection()
            .await
    }

    /// The `host:port` of every master serving slots now, as the first node that answers
    /// says: for what is counted per server, not per key (a server's `INFO`).
    pub async fn masters(&self) -> RedisResult<Vec<String>> {
        let mut last_error = None;
        for node in &self.nodes {
            let asked = async {
                let mut connection = redis::Client::open(format!("redis://{node}"))?
                    .get_multiplexed_async_connection()
                    .await?;
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async::<String>(&mut connection)
                    .await
            };
            match tokio::time::timeout(RESPONSE_TIMEOUT, asked).await {
                Ok(Ok(nodes)) => return Ok(masters_in(&nodes)),
                Ok(Err(error)) => last_error = Some(error),
                Err(_) => last_error = Some((redis::ErrorKind::Io, "no answer in time").into()),
            }
        }
        Err(last_error.unwrap_or_else(|| (redis::ErrorKind::Io, "no node named").into()))
    }
}

/// The masters with slots in a `CLUSTER NODES` answer, one node a line:
/// `<id> <host:port@bus-port> <flags> <master-id> <ping> <pong> <epoch> <link> <slot>...`.
fn masters_in(cluster_nodes: &str) -> Vec<String> {
    cluster_nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serves_slots = fields.len() > 8;
            let is_master = flags.split(',').any(|flag| flag == "master");
            let failed = flags.split(',').any(|flag| flag == "fail" || flag == "fail?");
            (is_master && serves_slots && !failed).then(|| {
                let address = fields[1].split(['@', ',']).next().unwrap_or(fields[1]);
                address.to_owned()
            })
        })
        .collect()
}

pub(crate) fn is_host_and_port(host: &str) -> bool {
    matches!(host.rsplit_once(':'), Some((name, port)) if !name.is_empty() && port.parse::<u16>().is_ok())
}

/// The hash slot of `key`, as every node computes it: CRC16 of the hash tag (the first
/// `{...}` with something inside), or of the whole key, modulo 16,384.
pub fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&byte| byte == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&byte| byte == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16_xmodem(tagged.unwrap_or(bytes)) % 16_384
}

/// CRC16-CCITT (XMODEM), the checksum the cluster specification names: polynomial
/// 0x1021, starting from 0, bit by bit.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_names_its_nodes() {
        let address = ClusterAddress::parse("redis-cluster://127.0.0.1:7000, localhost:7001/").unwrap();
        assert_eq!(address.unwrap().nodes, ["127.0.0.1:7000", "localhost:7001"]);
        assert!(ClusterAddress::parse("redis://127.0.0.1:6379").is_none());
    }

    #[test]
    fn a_bad_cluster_url_names_the_node_that_is_wrong() {
        let error = ClusterAddress::parse("redis-cluster://127.0.0.1:7000/2")
            .unwrap()
            .unwrap_err();
        assert!(
            error.contains("`127.0.0.1:7000/2`") && error.contains("no database numbers"),
            "{error}"
        );
    }

    #[test]
    fn the_masters_are_the_nodes_that_serve_slots_and_have_not_failed() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 disconnected 10923-16383
d4 127.0.0.1:7004@17004 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005,host-5 master - 0 1 7 connected 10923-16383
f6 127.0.0.1:7006@17006 master - 0 1 0 connected
";
        assert_eq!(
            masters_in(nodes),
            ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7005"]
        );
    }

    #[test]
    fn keys_that_share_a_hash_tag_share_a_slot() {
        assert_eq!(slot_of("{segment:1}:stock"), slot_of("{segment:1}:sales"));
        assert_ne!(slot_of("{segment:1}:stock"), slot_of("{segment:2}:stock"));
        // The slot the Redis docs give for a key without a tag.
        assert_eq!(slot_of("foo"), 12182);
        // An empty tag is no tag: the whole key is hashed (`CLUSTER KEYSLOT {}foo` says 9500;
        // tests/it/store/redis_cluster.rs asks a real node).
        assert_eq!(slot_of("{}foo"), 9500, "an empty tag is no tag");
        assert_ne!(slot_of("{}foo"), slot_of("{}"), "an empty tag is no tag");
    }
}
