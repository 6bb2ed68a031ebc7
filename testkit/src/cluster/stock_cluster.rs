//! The stock cluster: a Redis Cluster of six nodes on 7001-7006 (their bus on
//! 17001-17006), joined by `redis-cli --cluster create` on the first start into three
//! masters with one replica each. The masters split the 16,384 hash slots in three, and the
//! sale's segments, one hash tag each, spread over them (src/sale/keys.rs). A node keeps
//! its place in the cluster in its nodes.conf, so a killed node started again rejoins, as
//! the replica of whichever node the cluster promoted in its place. Like the failover
//! group, nothing is kept on disk but that file.

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use seckill::sale::keys::Keys;
use seckill::sale::segments::Segment;

use super::members::{self, STOCK_CLUSTER_PORTS};
use super::{say, Cluster};
use crate::server_control::{ask_redis, ask_redis_within, cluster_node_ok, redis_field, ASKING};

/// How long a command that moves or drops data may take: MIGRATE's own timeout, 5 s.
const MOVING: Duration = Duration::from_secs(5);

/// A master silent this long is failed: its replica is promoted after about twice that.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// The Redis options of a node: it remembers its cluster in its nodes.conf.
pub fn node_options() -> Vec<String> {
    let timeout = NODE_TIMEOUT_MS.to_string();
    ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        .into_iter()
        .chain(["--cluster-node-timeout", &timeout, "--save", "", "--appendonly", "no"])
        .chain(["--repl-diskless-sync-delay", "0"])
        .map(str::to_owned)
        .collect()
}

fn known_nodes(port: u16) -> Option<String> {
    redis_field(port, "cluster-info", "cluster_known_nodes")
}

/// Runs `redis-cli` with `args`, its output appended to the cluster's log of forming.
fn redis_cli(cluster: &Cluster, args: &[String]) -> anyhow::Result<bool> {
    let log = cluster.log_file("stock-cluster-create");
    let output = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
    let status = Command::new("redis-cli")
        .args(args)
        .stdout(output.try_clone()?)
        .stderr(output)
        .status()
        .context("could not run redis-cli")?;
    Ok(status.success())
}

/// Once every node runs: the first time, joins the six into three masters with a replica
/// each; a node started again without its nodes.conf (restart --empty) joins the cluster
/// as a replica.
pub fn form(cluster: &Cluster) -> anyhow::Result<()> {
    let log = cluster.log_file("stock-cluster-create");
    let first = STOCK_CLUSTER_PORTS[0];
    if known_nodes(first).as_deref() == Some("1") && !cluster_node_ok(first) {
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(STOCK_CLUSTER_PORTS.map(|port| format!("127.0.0.1:{port}")));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(str::to_owned));
        if !redis_cli(cluster, &args)? {
            bail!("redis-cli --cluster create failed; its output is in {}", log.display());
        }
    }
    for port in STOCK_CLUSTER_PORTS {
        if known_nodes(port).as_deref() != Some("1") {
            continue;
        }
        let Some(member) = STOCK_CLUSTER_PORTS
            .into_iter()
            .find(|&other| other != port && cluster_node_ok(other))
        else {
            bail!("the node on {port} has no cluster to rejoin: no other node is ok");
        };
        let args = [
            "--cluster",
            "add-node",
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{member}"),
        ]
        .into_iter()
        .chain(["--cluster-slave"])
        .map(str::to_owned)
        .collect::<Vec<_>>();
        if !redis_cli(cluster, &args)? {
            bail!(
                "the node on {port} could not rejoin the stock cluster; see {}",
                log.display()
            );
        }
    }
    Ok(())
}

/// The node on `port` still has a slot half moved: it is IMPORTING or MIGRATING it (a
/// `[slot-<-id]` or `[slot->-id]` on its own line of CLUSTER NODES). It then sees the
/// slot unassigned and answers CLUSTERDOWN, as a move cut short leaves it.
fn holds_a_slot_half_moved(port: u16) -> bool {
    let Ok(nodes) = ask_redis::<String>(port, redis::cmd("CLUSTER").arg("NODES")) else {
        return false;
    };
    let own = nodes.lines().find(|line| line.contains("myself")).unwrap_or("");
    own.split(' ')
        .any(|word| word.starts_with('[') && (word.contains("-<-") || word.contains("->-")))
}

/// When a node of the stock cluster is not ok, or holds a slot half moved, forms the
/// cluster again, empty: its data is the chaos runs' and the bench's, each of which
/// resets its sale. `redis-cli --cluster fix` cannot always close such a slot when both
/// nodes hold keys of it.
pub fn heal(cluster: &Cluster) -> anyhow::Result<()> {
    let healthy = STOCK_CLUSTER_PORTS
        .into_iter()
        .all(|port| cluster_node_ok(port) && !holds_a_slot_half_moved(port));
    if healthy {
        return Ok(());
    }
    say("stock cluster: a node is not ok, or holds a slot half moved; forming the cluster again, empty");
    for port in STOCK_CLUSTER_PORTS {
        // A master must be empty before its reset; a replica's reset empties it.
        if redis_field(port, "cluster-info", "cluster_size").as_deref() != Some("0") {
            let _ = ask_redis_within::<()>(port, &redis::cmd("FLUSHALL"), MOVING);
        }
        if ask_redis_within::<()>(port, redis::cmd("CLUSTER").arg("RESET").arg("HARD"), MOVING).is_err() {
            bail!(
                "CLUSTER RESET HARD failed on {port}; stop the stock cluster (scripts/cluster.sh stop stock-cluster-1 ...) and remove {}/stock-cluster-*",
                cluster.run_folder().display()
            );
        }
    }
    form(cluster)?;
    for port in STOCK_CLUSTER_PORTS {
        cluster.wait_for(&format!("stock-cluster on {port}"), Duration::from_secs(30), || {
            cluster_node_ok(port)
        })?;
    }
    Ok(())
}

/// A node that answers, to ask about the cluster. Any node knows the whole map of slots,
/// even while the cluster is failing a master over (cluster_state:fail).
fn a_node() -> anyhow::Result<u16> {
    let answers = |port: &u16| ask_redis::<String>(*port, &redis::cmd("PING")).is_ok();
    match STOCK_CLUSTER_PORTS.into_iter().find(answers) {
        Some(port) => Ok(port),
        None => bail!("no node of the stock cluster answers: scripts/cluster.sh start"),
    }
}

/// The map of slots: each range, first and last slot, and the port of its master.
fn slot_ranges() -> anyhow::Result<Vec<(u16, u16, u16)>> {
    let slots: Vec<Vec<redis::Value>> = ask_redis(a_node()?, redis::cmd("CLUSTER").arg("SLOTS"))?;
    slots.iter().map(|range| slot_range(range)).collect()
}

/// One range of CLUSTER SLOTS: `[first, last, [host, port, id, ...], replicas...]`.
fn slot_range(range: &[redis::Value]) -> anyhow::Result<(u16, u16, u16)> {
    let shape = || format!("CLUSTER SLOTS gave a range of a shape we do not know: {range:?}");
    let [first, last, master, ..] = range else {
        bail!(shape())
    };
    let number = |value: &redis::Value| redis::from_redis_value_ref::<u16>(value).with_context(shape);
    let master: Vec<redis::Value> = redis::from_redis_value_ref(master).with_context(shape)?;
    let port = master.get(1).with_context(shape)?;
    Ok((number(first)?, number(last)?, number(port)?))
}

/// The port of the master that serves `slot` now.
fn master_of_slot(slot: u16) -> anyhow::Result<u16> {
    let ranges = slot_ranges()?;
    match ranges.iter().find(|(first, last, _)| (*first..=*last).contains(&slot)) {
        Some(&(_, _, master)) => Ok(master),
        None => bail!("no master serves slot {slot}: the cluster is not whole (scripts/cluster.sh heal-stock-cluster)"),
    }
}

fn slot_of(key: &str) -> anyhow::Result<u16> {
    ask_redis(a_node()?, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
}

/// The keys of the sale named by `SECKILL_KEY_PREFIX`, as laid out on a cluster.
fn keys() -> Keys {
    Keys::with_prefix(&std::env::var("SECKILL_KEY_PREFIX").unwrap_or_default()).on_cluster(true)
}

/// The slot of segment `index`: that of its hash tag, which every key of it carries.
fn slot_of_segment(index: u32) -> anyhow::Result<u16> {
    slot_of(&keys().stock_of(Segment {
        index,
        of: index.saturating_add(1),
    }))
}

/// The member that serves segment `index` now.
pub fn shard_master(index: u32) -> anyhow::Result<String> {
    Ok(members::on_port(master_of_slot(slot_of_segment(index)?)?)?.name)
}

/// Each master, the slots it serves and the segments of the last reset whose hash tag
/// falls in them.
pub fn segments() -> anyhow::Result<()> {
    let keys = keys();
    let count_key = keys.segment_count();
    let count: Option<u32> = ask_redis(master_of_slot(slot_of(&count_key)?)?, redis::cmd("GET").arg(&count_key))?;
    let Some(count) = count else {
        say("stock cluster: no sale yet (reset one with --redis-url $SECKILL_STOCK_CLUSTER_URL)");
        return Ok(());
    };
    let slots: Vec<u16> = (0..count).map(slot_of_segment).collect::<anyhow::Result<_>>()?;
    for (first, last, master) in slot_ranges()? {
        let held: Vec<String> = (0..count)
            .filter(|&index| (first..=last).contains(&slots[index as usize]))
            .map(|index| index.to_string())
            .collect();
        let owner = members::on_port(master).map_or("unknown".to_owned(), |member| member.name);
        let held = if held.is_empty() {
            "none".to_owned()
        } else {
            held.join(" ")
        };
        say(format!(
            "stock cluster: {owner} (port {master}) serves slots {first}-{last}: segments {held} of {count}"
        ));
    }
    Ok(())
}

/// Moves the slot of segment `index`, keys and all, from its master to the next master in
/// port order, as `redis-cli --cluster reshard` moves each slot: IMPORTING on the
/// receiver, MIGRATING on the giver, MIGRATE of its keys, then SETSLOT NODE on both. A
/// step that fails leaves no slot half moved (see [`heal`]): it stays where it was.
pub fn move_segment(index: u32) -> anyhow::Result<()> {
    let slot = slot_of_segment(index)?;
    let from = master_of_slot(slot)?;
    let mut masters: Vec<u16> = slot_ranges()?.into_iter().map(|(_, _, master)| master).collect();
    masters.sort_unstable();
    masters.dedup();
    let Some(to) = masters.into_iter().find(|&master| master != from) else {
        bail!("segment {index}'s slot has no other master to move to");
    };
    let id = |port: u16| ask_redis::<String>(port, redis::cmd("CLUSTER").arg("MYID"));
    let (from_id, to_id) = (id(from)?, id(to)?);
    let moved = migrate_slot(slot, (from, &from_id), (to, &to_id));
    let (from_name, to_name) = (members::on_port(from)?.name, members::on_port(to)?.name);
    if let Err(error) = moved {
        for port in [to, from] {
            let _ = set_slot(port, slot, "STABLE", None);
        }
        bail!(
            "moving segment {index}'s slot from {from_name} to {to_name} failed ({error:#}); it stays on {from_name}"
        );
    }
    say(format!(
        "segment {index} (slot {slot}) moved from {from_name} to {to_name}"
    ));
    Ok(())
}

fn set_slot(port: u16, slot: u16, state: &str, node: Option<&str>) -> anyhow::Result<()> {
    let mut command = redis::cmd("CLUSTER");
    command.arg("SETSLOT").arg(slot).arg(state);
    if let Some(node) = node {
        command.arg(node);
    }
    ask_redis(port, &command)
}

/// The steps of one slot's move, from the master `from` to `to` (each a port and an id).
fn migrate_slot(slot: u16, (from, from_id): (u16, &str), (to, to_id): (u16, &str)) -> anyhow::Result<()> {
    set_slot(to, slot, "IMPORTING", Some(from_id))?;
    set_slot(from, slot, "MIGRATING", Some(to_id))?;
    loop {
        let keys: Vec<String> = ask_redis(from, redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100))?;
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(MOVING.as_millis() as u64);
        migrate.arg("KEYS").arg(&keys);
        ask_redis_within::<String>(from, &migrate, MOVING + ASKING)?;
    }
    for port in [to, from] {
        set_slot(port, slot, "NODE", Some(to_id))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn text(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_range_of_cluster_slots_gives_its_slots_and_its_masters_port() {
        // As Redis 7 answers: the master, then a replica, each with an empty map of extras.
        let master = Value::Array(vec![
            text("127.0.0.1"),
            Value::Int(7005),
            text("eefe09"),
            Value::Array(vec![]),
        ]);
        let replica = Value::Array(vec![
            text("127.0.0.1"),
            Value::Int(7001),
            text("94c899"),
            Value::Array(vec![]),
        ]);
        let range = [Value::Int(0), Value::Int(5460), master, replica];
        assert_eq!(slot_range(&range).unwrap(), (0, 5460, 7005));
    }

    #[test]
    fn a_range_of_another_shape_is_an_error_that_shows_it() {
        let error = slot_range(&[Value::Int(0), Value::Int(5460)]).unwrap_err().to_string();
        assert!(error.contains("a shape we do not know"), "{error}");
    }
}
