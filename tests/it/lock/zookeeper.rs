//! What only the ZooKeeper lock must do: wake exactly the next waiter, and grant the only
//! waiter on the release's event without another look; never let a waiter whose session
//! expired believe it holds the lock; find and delete the node of a create whose answer
//! was lost; and stop trusting a session the server may have ended. Against the ZooKeeper
//! that `make test` starts; a proxy in front of it loses or holds answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::zookeeper::ZooKeeperLock;
use seckill::lock::{DistributedLock, LockError};
use testkit::nemesis::{Fault, Proxy};

use super::queue::*;

async fn zookeeper() -> Arc<ZooKeeperLock> {
    Arc::new(
        ZooKeeperLock::connect(testkit::zookeeper_options(4000))
            .await
            .expect("ZooKeeper runs (`make services`)"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_wakes_only_the_next_waiter_when_the_holder_releases() {
    let holder = zookeeper().await;
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(zookeeper().await);
    }
    let wakeups = |waiters: &[Arc<ZooKeeperLock>]| waiters.iter().map(|waiter| waiter.wakeups()).sum::<u64>();
    let (before, after) = one_release(holder, waiters, wakeups).await;
    let woken = after - before;
    assert_eq!(woken, 1, "one release woke {woken} waiters: a thundering herd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_whose_only_elder_is_the_holder_is_granted_by_the_release_event_alone() {
    let key = testkit::unique_key("only-waiter");
    let (holder, waiter) = (zookeeper().await, zookeeper().await);
    let (held, waiting) = queue_behind_a_holder(&*holder, &waiter, &key, Duration::from_secs(10)).await;
    held.release().await.unwrap();
    let granted = waiting.await.unwrap().expect("the waiter is granted after the release");
    granted.release().await.unwrap();
    let looks = waiter.looks();
    assert_eq!(
        looks, 1,
        "the waiter listed the queue {looks} times: once while waiting is enough"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_grants_in_the_order_of_requests() {
    let mut waiters: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..5 {
        waiters.push(zookeeper().await);
    }
    assert_granted_in_order_of_requests(zookeeper().await, waiters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_giving_up_does_not_grant_the_one_behind_it() {
    assert_a_waiter_giving_up_does_not_grant_the_one_behind_it(zookeeper().await, zookeeper().await, zookeeper().await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_whose_session_expires_queues_again_instead_of_believing_it_holds_its_dead_node() {
    let key = testkit::unique_key("expired-waiter");
    let (holder, waiter) = (zookeeper().await, zookeeper().await);
    // Long enough to outlast the expiry below, which can take many tries.
    let (held, waiting) = queue_behind_a_holder(&*holder, &waiter, &key, Duration::from_secs(90)).await;
    // The waiter's node: the later of the two in the queue.
    let parent = format!("/seckill/locks/{key}");
    let observer = holder.client().await.expect("the session is open");
    let mut queue = observer.list_children(&parent).await.expect("the queue exists");
    queue.sort_by_key(|node| node.rsplit('-').next().unwrap_or_default().to_owned());
    let dead_node = format!("{parent}/{}", queue.last().expect("two nodes"));
    let dead_czxid = observer
        .check_stat(&dead_node)
        .await
        .unwrap()
        .expect("the waiter's node")
        .czxid;
    let expired = waiter.client().await.expect("the session is open");
    testkit::expire_zookeeper_session(&expired).await;
    held.release().await.unwrap();

    let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("granted in time")
        .unwrap();
    let granted = granted.expect("the waiter queued again and was granted");
    // A grant on its dead node would carry that node's czxid.
    let token = granted.fencing_token().expect("ZooKeeper grants carry a token").counter;
    assert!(
        token > dead_czxid as u64,
        "granted on the node of the expired session: token {token}, node {dead_czxid}"
    );
    assert_ne!(
        waiter.client().await.expect("the session is open").session().id(),
        expired.session().id(),
        "the grant must be on a new session"
    );
    assert!(granted.lease().is_held());
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_session_expired_by_the_server_frees_the_lock_and_its_holder_sees_it_lost() {
    let key = testkit::unique_key("expired");
    let (holder, next) = (zookeeper().await, zookeeper().await);
    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    testkit::expire_zookeeper_session(&holder.client().await.expect("the session is open")).await;

    let started = Instant::now();
    let granted = next
        .acquire(&key, &testkit::owner(), Duration::from_secs(10))
        .await
        .expect("the node went");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "freed after {:?}",
        started.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(5), held.lease().lost())
        .await
        .expect("the holder sees it lost");
    assert!(matches!(held.release().await, Err(LockError::Lost { .. })));
    granted.release().await.unwrap();

    // The next acquire of the expired handle starts a new session and works again.
    let again = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(5))
        .await
        .expect("a new session");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_node_whose_create_answer_was_lost_is_found_and_deleted_instead_of_blocking_the_queue() {
    let proxy = Proxy::start(testkit::zookeeper_port()).await;
    let unlucky = ZooKeeperLock::connect(testkit::zookeeper_options_via(proxy.address(), 4000))
        .await
        .expect("ZooKeeper runs (`make services`)");
    // The answers stay away past the acquire's deadline and the client's connection
    // timeout (2 s); then the client reconnects, well within its 4 s session.
    let lost = LostAnswer {
        acquire_timeout: Duration::from_millis(1500),
        held_past_it: Duration::from_millis(1000),
        next_granted_within: Duration::from_secs(3),
    };
    let (holder, next) = (zookeeper().await, zookeeper().await);
    let key = testkit::unique_key("lost-create");
    assert_a_place_whose_answer_was_lost_does_not_block_the_queue(&unlucky, &proxy, holder.as_ref(), next, &key, lost)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_holder_cut_off_stops_trusting_its_lock_within_a_session_timeout_of_the_last_answer() {
    let key = testkit::unique_key("cut-off");
    let proxy = Proxy::start(testkit::zookeeper_port()).await;
    let lock = ZooKeeperLock::connect(testkit::zookeeper_options_via(proxy.address(), 4000))
        .await
        .expect("ZooKeeper runs (`make services`)");
    let session_timeout = lock.client().await.expect("the session is open").session_timeout();
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Nothing passes from now on: the server hears nothing after this instant, so it may
    // expire the session one session timeout later, and another instance take the lock.
    let cut_at = Instant::now();
    proxy.strike(Fault::Blackhole);
    let lost = tokio::time::timeout(session_timeout * 2, held.lease().lost()).await;
    let trusted_for = cut_at.elapsed();
    assert!(lost.is_ok(), "still trusted {trusted_for:?} after the cut");
    assert!(
        trusted_for <= session_timeout,
        "trusted for {trusted_for:?} after the last answer could have come, past the session timeout of {session_timeout:?}"
    );
    assert!(!held.is_held());
}
