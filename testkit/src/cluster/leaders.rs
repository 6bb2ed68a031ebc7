//! Who leads the etcd cluster and the ZooKeeper ensemble now: the member the chaos suite
//! pauses, kills or cuts off when a row strikes the leader.

use anyhow::bail;

use super::members::{self, Kind};
use crate::server_control::{etcd_status, zookeeper_mode};

/// Runs one of [`crate::server_control`]'s async questions from this sync program.
fn block_on<T>(question: impl std::future::Future<Output = T>) -> Option<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    Some(runtime.block_on(question))
}

/// The etcd member on `port` knows a leader: it is in a quorum, and serves.
pub fn etcd_serves(port: u16) -> bool {
    block_on(etcd_status(port))
        .flatten()
        .is_some_and(|(_, leader)| leader != 0)
}

/// The member that leads `what` (`etcd` or `zookeeper`) now.
pub fn leader(what: &str) -> anyhow::Result<String> {
    let leads = |kind: Kind, port: u16| match kind {
        // Each member's status names the leader's id; the leader is the one whose own id that is.
        Kind::Etcd { .. } => block_on(etcd_status(port))
            .flatten()
            .is_some_and(|(me, leader)| me == leader),
        Kind::ZooKeeper { .. } => zookeeper_mode(port).as_deref() == Some("leader"),
        _ => false,
    };
    let kind_of_member: fn(Kind) -> bool = match what {
        "etcd" => |kind| matches!(kind, Kind::Etcd { .. }),
        "zookeeper" => |kind| matches!(kind, Kind::ZooKeeper { .. }),
        other => bail!("leader of what? etcd, zookeeper or failover-redis, got '{other}'"),
    };
    match members::of_kind(kind_of_member)
        .into_iter()
        .find(|member| leads(member.kind, member.port))
    {
        Some(member) => Ok(member.name),
        None => bail!("no {what} member says it leads (is the cluster up, with a quorum? scripts/cluster.sh status)"),
    }
}
