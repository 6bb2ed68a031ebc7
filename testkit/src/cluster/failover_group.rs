//! The failover group: a lock Redis with one replica that three Sentinels fail over. It
//! shows that Redis replication is asynchronous: the master answers OK to a lock grant
//! before its replica has it, so a failover can lose a lock. The chaos suite's stock
//! failover rows keep the stock there too: then the master loses sales, not a grant.
//!
//! failover-redis-a and -b are plain Redis like lock-redis (nothing on disk), named a and
//! b, not master and replica, because the roles swap on every failover. seckill finds the
//! master through the Sentinels (a `redis-sentinel://` URL).

use std::time::Duration;

use anyhow::{bail, Context};

use super::members::{self, Kind, Member, FAILOVER_REDIS_PORTS, SENTINEL_PORTS};
use super::Cluster;
use crate::server_control::{ask_redis, poll, redis_field};

/// The group's master, as the Sentinels and the `redis-sentinel://` URL name it.
pub const MASTER_NAME: &str = "seckill-lock";
/// Two of the three Sentinels must find the master down before one of them fails it over.
const QUORUM: u32 = 2;
/// A master that has not answered for this long is down. Not 1000: on every failover a
/// Sentinel reconnects to the new master at most once a second, so at 1000 it sometimes
/// found the new master down before its first PING and failed it over again (2 in 40
/// failovers here, 0 in 60 at 1500).
pub const DOWN_AFTER_MS: u32 = 1500;
/// A failover that has not promoted the replica by then is given up, and a Sentinel that
/// tried (or voted) waits twice as long before it tries that master again. A failover that
/// succeeds ends that wait: with the default, 3 minutes, failovers still ran back to back
/// here, but one that was given up would stall the group for 6. The promotion shows in
/// Sentinel's once-a-second INFO 0.77-0.91 s after REPLICAOF NO ONE: at 500 ms promotions
/// were given up and took up to 6.4 s; 1000 ms passed 30 failovers with 0.1 s to spare.
pub const FAILOVER_TIMEOUT_MS: u32 = 2000;

/// The launcher's arguments for the Sentinel on `port`: it watches failover-redis-a first.
pub fn sentinel_options(port: u16) -> Vec<String> {
    [
        port.to_string(),
        MASTER_NAME.to_owned(),
        FAILOVER_REDIS_PORTS[0].to_string(),
        QUORUM.to_string(),
        "down-after-milliseconds".to_owned(),
        DOWN_AFTER_MS.to_string(),
        "failover-timeout".to_owned(),
        FAILOVER_TIMEOUT_MS.to_string(),
    ]
    .into()
}

/// The Redis options of the member on `port`: it starts as a replica of the member the
/// Sentinels name master now, or as the master when they name this one. Started without
/// `--replicaof`, an old master came back as a second, empty master for 10 s, until
/// Sentinel converted it (20 s until the Sentinels saw it in sync); with it, it is in sync
/// in 0.1-1.3 s. A killed master restarted before the Sentinels move on comes back as the
/// master, empty, and its replica then empties too. The replica loads a full sync straight
/// from the socket (swapdb), so no dump.rdb is left for a restart to load: a member comes
/// back empty, like lock-redis.
pub fn redis_options(port: u16) -> anyhow::Result<Vec<String>> {
    if !poll(Duration::from_secs(10), || master_port().is_some()) {
        bail!("no Sentinel names the master of {MASTER_NAME}, and the member on {port} must know it; start them first: scripts/cluster.sh start sentinel-1 sentinel-2 sentinel-3");
    }
    let master = master_port().context("the Sentinels stopped naming a master")?;
    let mut options: Vec<String> = ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]
        .into_iter()
        .chain(["--repl-diskless-load", "swapdb"])
        .map(str::to_owned)
        .collect();
    if master != port {
        options.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), master.to_string()]);
    }
    Ok(options)
}

/// `SENTINEL subcommand seckill-lock` to the Sentinel on `port`.
fn ask_sentinel<T: redis::FromRedisValue>(port: u16, subcommand: &str) -> Option<T> {
    ask_redis(port, redis::cmd("SENTINEL").arg(subcommand).arg(MASTER_NAME)).ok()
}

/// The port of the member the Sentinel on `sentinel` names master.
fn master_named_by(sentinel: u16) -> Option<u16> {
    let (_, port): (String, u16) = ask_sentinel(sentinel, "get-master-addr-by-name")?;
    Some(port)
}

/// The port of the member the Sentinels name master now, from the first that answers.
pub fn master_port() -> Option<u16> {
    SENTINEL_PORTS.into_iter().find_map(master_named_by)
}

/// The member the Sentinels name master now.
pub fn master() -> anyhow::Result<Member> {
    match master_port() {
        Some(port) => members::on_port(port),
        None => bail!("no Sentinel names the master of {MASTER_NAME} (is the cluster up? scripts/cluster.sh status)"),
    }
}

/// The Sentinel on `sentinel` knows the member on `port` as a replica of `master`, up and
/// in sync. Its view comes from the replica's own INFO.
fn sentinel_sees_replica(sentinel: u16, port: u16, master: u16) -> bool {
    let Some(replicas) = ask_sentinel::<Vec<Vec<String>>>(sentinel, "replicas") else {
        return false;
    };
    let me = format!("127.0.0.1:{port}");
    replicas.iter().any(|fields| {
        let field = |name: &str| {
            let at = fields.chunks(2).find(|pair| pair[0] == name)?;
            at.get(1).map(String::as_str)
        };
        field("name") == Some(&me)
            && field("flags") == Some("slave")
            && field("master-link-status") == Some("ok")
            && field("master-port") == Some(&master.to_string())
    })
}

/// The group is ready to fail over: every running Sentinel names the same master and
/// knows the other two, and every other running member replicates that master, in sync,
/// as each Sentinel sees it. A failover started before that finds no replica to promote.
pub fn ready(cluster: &Cluster) -> bool {
    let Some(master) = master_port() else { return false };
    let running = |member: &Member| cluster.running(&member.name);
    let replicas: Vec<u16> = members::of_kind(|kind| kind == Kind::FailoverRedis)
        .iter()
        .filter(|member| running(member) && member.port != master)
        .map(|member| member.port)
        .collect();
    let in_sync = |port: u16| {
        redis_field(port, "replication", "master_port") == Some(master.to_string())
            && redis_field(port, "replication", "master_link_status").as_deref() == Some("up")
    };
    if !replicas.iter().all(|&port| in_sync(port)) {
        return false;
    }
    members::of_kind(|kind| kind == Kind::Sentinel)
        .iter()
        .filter(|sentinel| running(sentinel))
        .all(|sentinel| {
            let others = ask_sentinel::<Vec<String>>(sentinel.port, "master").and_then(|fields| {
                let at = fields.iter().position(|field| field == "num-other-sentinels")?;
                fields.get(at + 1).cloned()
            });
            master_named_by(sentinel.port) == Some(master)
                && others.as_deref() == Some("2")
                && replicas
                    .iter()
                    .all(|&port| sentinel_sees_replica(sentinel.port, port, master))
        })
}
