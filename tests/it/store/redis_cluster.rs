//! The masters of a Redis Cluster (`ClusterAddress::masters` in `src/store/redis_cluster.rs`),
//! which `make bench` asks to count a cluster's shards and add up their requests: against a
//! cluster of the test's own, the masters serving slots, and, after one dies, the replica the
//! cluster promoted in its place, asked of the next node when the first named is the dead one;
//! and the slot seckill computes for a key, beside the one a node names.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use seckill::store::redis_cluster::{slot_of, ClusterAddress};

fn ports(masters: &[String]) -> BTreeSet<u16> {
    masters
        .iter()
        .map(|master| master.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_masters_are_those_serving_slots_and_a_promoted_replica_takes_a_dead_ones_place() {
    let mut cluster = testkit::PrivateRedisCluster::start(3);
    let address = ClusterAddress::parse(&cluster.url()).unwrap().unwrap();
    let serving: BTreeSet<u16> = cluster.masters().iter().map(|node| node.port).collect();
    assert_eq!(serving.len(), 3);
    assert_eq!(ports(&address.masters().await.unwrap()), serving);

    // The first node the URL names is a master (`--cluster create` makes the first three
    // masters): kill it.
    let dead = cluster.nodes.remove(0);
    assert!(serving.contains(&dead.port), "the first node is a master");
    let (dead_port, _dir) = dead.crash();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let masters = address.masters().await.expect("the second node answers");
        let masters = ports(&masters);
        if masters.len() == 3 && !masters.contains(&dead_port) {
            let promoted: Vec<&u16> = masters.difference(&serving).collect();
            assert_eq!(promoted.len(), 1, "one replica promoted: {masters:?} after {serving:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 20 s, still not three masters without the dead {dead_port}: {masters:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `slot_of` places the sale's keys (`src/sale/keys.rs`) as the cluster will: each key's
/// slot is the one a real node names for it (`CLUSTER KEYSLOT`), tags, empty tags and
/// keys without a tag alike.
#[tokio::test(flavor = "multi_thread")]
async fn the_slot_seckill_computes_for_a_key_is_the_one_a_node_names() {
    let cluster = testkit::PrivateRedisCluster::start(3);
    let mut node = cluster.nodes[0].client().get_connection().unwrap();
    for key in [
        "foo",
        "{}foo",
        "{}",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "{segment:1}:stock",
        "t-1234:{segment:5}:stock:orders",
        "{sale}:stock:sale",
    ] {
        let named: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut node).unwrap();
        assert_eq!(slot_of(key), named, "{key}");
    }
}
