//! The redis lock on a master with a replica and a Sentinel: it follows the master when
//! the Sentinel fails it over, and replication being asynchronous, a grant the replica
//! never saw is lost in the failover unless the lock waits for the replica (`WAIT`).
//! When it is lost, the second holder's token still outranks the first's.
//!
//! Each test has its own master, replica and Sentinel, on free ports; the stock's
//! fence (where new epochs come from) is the test Redis.

use std::time::{Duration, Instant};

use seckill::lock::redis::{RedisLock, RedisLockOptions};
use seckill::lock::{DistributedLock, LockError};
use seckill::store::redis_master::MasterAddress;
use seckill::store::redis_master::ReplicaWait;
use testkit::{
    cut_replica_off, fail_over, owner, redis_client, redis_options, replicated_master, unique_key, wait_for_promotion,
    PrivateRedis, PrivateSentinel,
};

/// Long enough that a holder's lease outlives the failover, as Redisson's 30 s watchdog does.
const TTL_MS: u64 = 6000;

// Each test takes its turn (`testkit::take_turn`): a killed master's port is free for the
// next server a test starts, and a lock still reconnecting to it would find a stranger.

async fn lock_behind(sentinel: &PrivateSentinel, options: RedisLockOptions) -> RedisLock {
    let address = MasterAddress::parse(&sentinel.url()).unwrap();
    RedisLock::connect_fenced_by(address, &redis_client().await, options)
        .await
        .expect("the lock finds the master through the Sentinel")
}

/// The lock with the lease of these tests, and no replica wait.
async fn plain_lock_behind(sentinel: &PrivateSentinel) -> RedisLock {
    lock_behind(sentinel, redis_options(TTL_MS, true)).await
}

fn waiting_for_one_replica() -> RedisLockOptions {
    RedisLockOptions {
        wait_for_replicas: Some(ReplicaWait {
            replicas: 1,
            timeout: Duration::from_millis(100),
        }),
        ..redis_options(TTL_MS, true)
    }
}

async fn get(server: &PrivateRedis, key: &str) -> Option<String> {
    let mut connection = server.client().get_multiplexed_async_connection().await.unwrap();
    redis::cmd("GET").arg(key).query_async(&mut connection).await.unwrap()
}

/// Waits until the replica has caught up with the master on `key` and its fencing counter.
async fn wait_until_replicated(master: &PrivateRedis, replica: &PrivateRedis, key: &str) {
    let (counter, since) = (format!("{key}:fence"), Instant::now());
    while get(replica, key).await != get(master, key).await
        || get(replica, &counter).await != get(master, &counter).await
    {
        assert!(
            since.elapsed() < Duration::from_secs(2),
            "the replica did not catch up within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_lock_through_a_failover_and_the_next_holder_is_granted_by_the_new_master() {
    let _turn = testkit::take_turn().await;
    let (master, replica, sentinel) = replicated_master("seckill-failover-keeps");
    let (holder, waiter) = (plain_lock_behind(&sentinel).await, plain_lock_behind(&sentinel).await);
    let key = unique_key("failover-keeps");
    let held = holder.acquire(&key, &owner(), Duration::from_secs(2)).await.unwrap();
    // Replication is asynchronous: killed at once, the master could take the grant with it
    // (the next test). Here the replica has it first.
    wait_until_replicated(&master, &replica, &key).await;

    let took = fail_over(master, &replica, &sentinel);
    let refused = waiter.acquire(&key, &owner(), Duration::from_millis(1500)).await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "the promoted replica had the holder's key, so a second owner must wait; got {:?}",
        refused.map(|_| "granted")
    );
    assert!(
        held.is_held(),
        "the holder's renewals follow the new master (failover took {took:?})"
    );
    held.release().await.expect("the release goes to the new master");

    let next = waiter.acquire(&key, &owner(), Duration::from_secs(2)).await;
    assert!(
        next.is_ok(),
        "the new master grants once the holder released: {:?}",
        next.err()
    );
    assert!(
        get(&replica, &key).await.is_some(),
        "the grant lives on the promoted replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_wait_a_failover_loses_the_grant_and_a_second_holder_is_granted() {
    let _turn = testkit::take_turn().await;
    let (master, replica, sentinel) = replicated_master("seckill-failover-loses");
    let (first, second) = (plain_lock_behind(&sentinel).await, plain_lock_behind(&sentinel).await);
    let key = unique_key("failover-loses");
    // One grant the replica does see: it has the token counter and its epoch.
    first
        .acquire(&key, &owner(), Duration::from_secs(2))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_until_replicated(&master, &replica, &key).await;

    cut_replica_off(&master, &replica);
    let held = first.acquire(&key, &owner(), Duration::from_secs(2)).await.unwrap();
    drop(master); // SIGKILL, right after the grant
    replica.thaw();
    wait_for_promotion(&replica, &sentinel, Instant::now());

    let again = second.acquire(&key, &owner(), Duration::from_secs(3)).await;
    assert!(
        again.is_ok() && held.is_held(),
        "the promoted replica never saw the first grant, so it grants the lock a second time while the \
         first holder still trusts its lease: {:?}, first held: {}",
        again.as_ref().err(),
        held.is_held()
    );
    let first_token = held.fencing_token().unwrap().order();
    let second_token = again.unwrap().fencing_token().unwrap().order();
    assert!(
        second_token > first_token,
        "the replica's counter missed the first grant, but on a new master the lock begins a new epoch: \
         the second token ({second_token:?}) must outrank the first ({first_token:?}), so that the fence \
         refuses the first holder's late write, and nobody else's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_refuses_the_grant_no_replica_acknowledged() {
    let _turn = testkit::take_turn().await;
    let (master, replica, sentinel) = replicated_master("seckill-failover-waits");
    let lock = lock_behind(&sentinel, waiting_for_one_replica()).await;
    let key = unique_key("failover-waits");

    cut_replica_off(&master, &replica);
    let refused = lock.acquire(&key, &owner(), Duration::from_secs(2)).await;
    let Err(error) = refused else {
        panic!("no replica acknowledged, so the grant must not count")
    };
    let error = error.to_string();
    assert!(
        error.contains("--lock-redis-wait-replicas"),
        "the error names the setting: {error}"
    );
    let taken_back = Instant::now();
    while get(&master, &key).await.is_some() {
        assert!(
            taken_back.elapsed() < Duration::from_secs(2),
            "the refused grant's key must be taken back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    replica.thaw();
    let granted = Instant::now();
    let held = loop {
        match lock.acquire(&key, &owner(), Duration::from_secs(2)).await {
            Ok(held) => break held,
            // The replica reconnects within about a second of waking.
            Err(_) if granted.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(error) => panic!("once the replica is back, a grant counts again: {error}"),
        }
    };
    assert!(
        get(&replica, &key).await.is_some(),
        "a grant that counts is on the replica before its holder hears of it"
    );
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_old_master_comes_back_as_a_replica_follows_the_sentinel_instead() {
    let _turn = testkit::take_turn().await;
    let (master, replica, sentinel) = replicated_master("seckill-failover-readonly");
    let lock = lock_behind(&sentinel, redis_options(TTL_MS, true)).await;
    let key = unique_key("failover-readonly");
    lock.acquire(&key, &owner(), Duration::from_secs(2))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // The master dies; the lock tries at once, before any promotion, and the Sentinel
    // still names the dead master: its connection gives up on it for now.
    let (old_port, killed) = (master.port, Instant::now());
    drop(master);
    let too_early = lock.acquire(&key, &owner(), Duration::from_millis(300)).await;
    assert!(too_early.is_err(), "nobody can grant before the promotion");
    assert_eq!(
        sentinel.master_port(),
        old_port,
        "the Sentinel still names the dead master ({:?} after the kill)",
        killed.elapsed()
    );
    // The replica is promoted, and the old master comes back on its port as the new
    // master's replica: the lock's connection reconnects there, to a server that answers
    // every write with -READONLY.
    wait_for_promotion(&replica, &sentinel, killed);
    let _old_master = PrivateRedis::start_replica_on(old_port, replica.port);

    let granted = lock.acquire(&key, &owner(), Duration::from_secs(5)).await;
    assert!(
        granted.is_ok(),
        "a READONLY answer means the master moved: the lock must ask the Sentinel and follow it, \
         not wait on a replica until its timeout: {:?}",
        granted.err()
    );
    assert!(get(&replica, &key).await.is_some(), "the grant lives on the new master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_that_starts_on_a_promoted_master_begins_a_new_epoch_and_outranks_the_old_masters_tokens() {
    let _turn = testkit::take_turn().await;
    let (master, replica, sentinel) = replicated_master("seckill-failover-restart");
    let key = unique_key("failover-restart");
    let old = plain_lock_behind(&sentinel).await;
    // One grant the replica does see: it has the epoch and the token counter.
    old.acquire(&key, &owner(), Duration::from_secs(2))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    wait_until_replicated(&master, &replica, &key).await;

    // Grants the replica never sees: the old master's counter runs ahead of its copy.
    cut_replica_off(&master, &replica);
    let mut old_masters_last = None;
    for _ in 0..3 {
        let held = old.acquire(&key, &owner(), Duration::from_secs(2)).await.unwrap();
        old_masters_last = Some(held.fencing_token().unwrap().order());
        held.release().await.unwrap();
    }
    drop(old);
    drop(master); // SIGKILL
    replica.thaw();
    wait_for_promotion(&replica, &sentinel, Instant::now());

    // The instances restart: a new handle whose first master is the promoted replica.
    // Just after the promotion the Sentinel may not vouch for it yet: ask again.
    let address = MasterAddress::parse(&sentinel.url()).unwrap();
    let (stock, promoted) = (redis_client().await, Instant::now());
    let restarted = loop {
        match RedisLock::connect_fenced_by(address.clone(), &stock, redis_options(TTL_MS, true)).await {
            Ok(lock) => break lock,
            Err(_) if promoted.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(error) => panic!("the Sentinel named no master within 10 s of the promotion: {error}"),
        }
    };
    let first = restarted.acquire(&key, &owner(), Duration::from_secs(3)).await.unwrap();
    let first_token = first.fencing_token().unwrap().order();
    let old_masters_last = old_masters_last.unwrap();
    assert!(
        first_token > old_masters_last,
        "the promoted replica's counter missed the old master's last grants: a handle that starts \
         there must begin a new epoch, so that its first token ({first_token:?}) outranks the old \
         master's last ({old_masters_last:?}) and the stock's fence does not refuse its buyers"
    );
    first.release().await.unwrap();
}

/// A `WAIT` sent after the connection followed the Sentinel to a new master counts that
/// master's replicas, not the write's: a write on the old master, the master killed, the
/// connection moved, and the promoted master with a replica of its own. A plain `WAIT`
/// then says 1 for a write no server has; `acknowledged_since` counts none, so a grant or
/// renewal sent before a move is never taken for replicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_sent_after_the_master_moved_acknowledges_nothing() {
    let _turn = testkit::take_turn().await;
    let (master, _replicas, sentinel) = testkit::master_with_two_replicas("wait-after-a-move");
    let address = MasterAddress::parse(&sentinel.url()).unwrap();
    let mut connection = seckill::store::redis_master::MasterConnection::connect(&address)
        .await
        .unwrap();
    let wait = ReplicaWait {
        replicas: 1,
        timeout: Duration::from_millis(200),
    };
    let moves_before = connection.moves();
    let _: () = redis::cmd("SET")
        .arg("written-before-the-move")
        .arg(1)
        .query_async(&mut connection)
        .await
        .unwrap();
    drop(master); // SIGKILL

    // Commands fail until the Sentinel promotes a replica; the connection then follows it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while connection.moves() == moves_before {
        assert!(
            Instant::now() < deadline,
            "the connection did not follow the Sentinel within 20 s"
        );
        let _: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut connection).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The Sentinel makes the other replica the promoted master's: a plain WAIT counts it.
    while wait.acknowledged(&mut connection).await.unwrap_or(0) < 1 {
        assert!(
            Instant::now() < deadline,
            "the promoted master got no replica within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        wait.acknowledged_since(&mut connection, moves_before).await.unwrap(),
        0,
        "a WAIT after a move counted the new master's replicas for a write it never had"
    );
}
