//! What only the queue-based locks (etcd, ZooKeeper) must do: wake exactly the next
//! waiter (an etcd waiter with no request after the release's event, and none while it
//! waits on its instance's kept watch, yet granted by a release made while that watch
//! was down), grant the only
//! ZooKeeper waiter on the release's event without another look, grant no one when a
//! waiter in the middle of the queue gives up,
//! grant in the order of requests, never let a waiter whose session died
//! believe it holds the lock, leave no key or node of a failed acquire in the queue,
//! and stop trusting a lease the server may no longer keep. And etcd's release that
//! queues the next local buyer (step 7, in src/lock/etcd/hand_over.rs): behind the waiters already
//! there, and gone from the queue if nobody claims it. Against the etcd and
//! ZooKeeper that `make test` starts; a proxy in front of them loses or holds answers.

use testkit as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::AnswerLosingProxy;
use seckill::lock::etcd::EtcdLock;
use seckill::lock::zookeeper::ZooKeeperLock;
use seckill::lock::{DistributedLock, HandOver, LockError, LockGuard};
use tokio::task::JoinHandle;

async fn etcd() -> Arc<EtcdLock> {
    Arc::new(
        EtcdLock::connect(common::etcd_options(2000))
            .await
            .expect("etcd runs (`make services`)"),
    )
}

async fn zookeeper() -> Arc<ZooKeeperLock> {
    Arc::new(
        ZooKeeperLock::connect(common::zookeeper_options(4000))
            .await
            .expect("ZooKeeper runs (`make services`)"),
    )
}

/// Starts `n` waiters on `key`, one after another, each granted in turn: it records
/// its place, holds the lock briefly and releases. Returns the order of the grants.
async fn grant_order(locks: Vec<Arc<dyn DistributedLock>>, key: &str) -> Vec<usize> {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (place, lock) in locks.into_iter().enumerate() {
        let (order, key) = (order.clone(), key.to_owned());
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .acquire(&key, &common::owner(), Duration::from_secs(20))
                .await
                .unwrap();
            order.lock().unwrap().push(place);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(100)).await; // queue in this order
    }
    for joined in futures_util::future::join_all(waiters).await {
        joined.unwrap();
    }
    let order = order.lock().unwrap().clone();
    order
}

/// One holder and `waiters` queued behind it on separate handles: a release must wake
/// one waiter, not all of them. Returns what `count` says of the waiters just before the
/// release and 500 ms after it.
async fn one_release<L: DistributedLock + 'static, T>(
    holder: Arc<L>,
    waiters: Vec<Arc<L>>,
    count: impl Fn(&[Arc<L>]) -> T,
) -> (T, T) {
    let key = common::unique_key("herd");
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for waiter in &waiters {
        let (waiter, key) = (waiter.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiter
                .acquire(&key, &common::owner(), Duration::from_secs(20))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await; // hold it past the count
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = count(&waiters);
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = count(&waiters);
    for task in tasks {
        task.await.unwrap();
    }
    (before, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_wakes_only_the_next_waiter_when_the_holder_releases() {
    let holder = etcd().await;
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(etcd().await);
    }
    // Every etcd waiter hears the release on its watch of the queue. One must take it as
    // its grant, and none may ask etcd anything about it: a read after the event is a
    // round trip on the hand-over, and one per waiter is a thundering herd.
    let count = |waiters: &[Arc<EtcdLock>]| {
        let sum = |of: fn(&EtcdLock) -> u64| waiters.iter().map(|waiter| of(waiter)).sum::<u64>();
        (sum(EtcdLock::wakeups), sum(EtcdLock::requests_while_waiting))
    };
    let ((woken_before, asked_before), (woken_after, asked_after)) = one_release(holder, waiters, count).await;
    let woken = woken_after - woken_before;
    assert_eq!(woken, 1, "one release granted {woken} waiters");
    assert_eq!(
        asked_before, 4,
        "each of the four waiters opened its kept watch, and asked nothing else"
    );
    assert_eq!(
        asked_after, asked_before,
        "the waiters asked etcd again after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_waits_on_its_instances_kept_watch_and_asks_etcd_nothing() {
    // A watch and two looks per wait were most of etcd's work per sale under load.
    // An instance opens one watch per lock, at its first wait, and keeps it.
    let (holder, waiter) = (etcd().await, etcd().await);
    let key = common::unique_key("kept-watch");
    for wait in 1..=3 {
        let held = holder
            .acquire(&key, &common::owner(), Duration::from_secs(2))
            .await
            .unwrap();
        let (next, key) = (waiter.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            let guard = next
                .acquire(&key, &common::owner(), Duration::from_secs(5))
                .await
                .unwrap();
            guard.release().await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.unwrap();
        waiting.await.unwrap();
        assert_eq!(
            waiter.wakeups(),
            wait,
            "wait {wait} was not granted by the release's event"
        );
        assert_eq!(
            waiter.requests_while_waiting(),
            1,
            "after wait {wait}: only the kept watch's opening may have asked etcd"
        );
    }
}

/// One request deletes the holder's entry and puts the next local buyer's at the back
/// of the queue: another instance's waiter, queued first, is granted first.
async fn assert_a_release_queues_the_next_local_buyer_behind_the_waiters_already_there<L: DistributedLock + 'static>(
    one: Arc<L>,
    two: Arc<L>,
) {
    let key = common::unique_key("queued-over");
    let held = one
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let other = {
        let (two, key, order) = (two.clone(), key.clone(), order.clone());
        tokio::spawn(async move {
            let guard = two
                .acquire(&key, &common::owner(), Duration::from_secs(5))
                .await
                .unwrap();
            order.lock().unwrap().push("the other instance");
            tokio::time::sleep(Duration::from_millis(100)).await;
            order.lock().unwrap().push("the other instance releases");
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await; // the other instance queues
    let HandOver::Queued(place) = held.hand_over(&common::owner()).await.unwrap() else {
        panic!("the release did not queue the next owner");
    };
    let next = place.granted(Instant::now() + Duration::from_secs(5)).await.unwrap();
    order.lock().unwrap().push("the next local buyer");
    next.release().await.unwrap();
    other.await.unwrap();
    // Granted after the other instance's release, not while it held the lock.
    assert_eq!(
        *order.lock().unwrap(),
        [
            "the other instance",
            "the other instance releases",
            "the next local buyer"
        ],
        "not granted in the queue's order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_release_queues_the_next_local_buyer_behind_the_waiters_already_there() {
    assert_a_release_queues_the_next_local_buyer_behind_the_waiters_already_there(etcd().await, etcd().await).await;
}

/// A buyer may give up between the release that queued it and its turn: its place,
/// dropped, must not hold the queue until the session ends.
async fn assert_a_place_nobody_claims_leaves_the_queue<L: DistributedLock + 'static>(one: Arc<L>, two: Arc<L>) {
    let key = common::unique_key("place-dropped");
    let held = one
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let HandOver::Queued(place) = held.hand_over(&common::owner()).await.unwrap() else {
        panic!("the release did not queue the next owner");
    };
    drop(place);
    let granted = two.acquire(&key, &common::owner(), Duration::from_secs(1)).await;
    assert!(granted.is_ok(), "the dropped place still held the queue: {granted:?}");
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_place_nobody_claims_leaves_the_queue() {
    assert_a_place_nobody_claims_leaves_the_queue(etcd().await, etcd().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_place_whose_wait_is_cut_short_leaves_the_queue() {
    // A sale that stops (the instance shuts down) drops its wait for a queued place
    // midway; the place's key must go with it, not wait for the session to end.
    let (one, two, three) = (etcd().await, etcd().await, etcd().await);
    let key = common::unique_key("place-cut-short");
    let held = one
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let other = {
        let (two, key) = (two.clone(), key.clone());
        tokio::spawn(async move {
            let guard = two
                .acquire(&key, &common::owner(), Duration::from_secs(5))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await; // the other instance queues
    let HandOver::Queued(place) = held.hand_over(&common::owner()).await.unwrap() else {
        panic!("the release did not queue the next owner");
    };
    let far = Instant::now() + Duration::from_secs(10);
    let cut_short = tokio::time::timeout(Duration::from_millis(100), place.granted(far)).await;
    assert!(
        cut_short.is_err(),
        "the place was granted while the other instance held the lock"
    );
    other.await.unwrap();
    let granted = three.acquire(&key, &common::owner(), Duration::from_secs(1)).await;
    assert!(granted.is_ok(), "the place cut short still held the queue: {granted:?}");
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_kept_watch_broke_is_still_granted_by_the_release() {
    // The kept watch's stream breaks when its etcd dies; deletes made while it is gone
    // never reach it. A waiter on it must look at the queue instead of waiting forever.
    let mut etcd = common::PrivateServer::etcd();
    let endpoint = format!("http://127.0.0.1:{}", etcd.port);
    let connect = || EtcdLock::connect(common::etcd_options_via(vec![endpoint.clone()], 10_000));
    let (holder, waiter) = (Arc::new(connect().await.unwrap()), Arc::new(connect().await.unwrap()));
    let key = common::unique_key("kept-watch-broke");
    let wait_behind = |held: LockGuard| {
        let (waiter, key) = (waiter.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            waiter
                .acquire(&key, &common::owner(), Duration::from_secs(20))
                .await
                .map(|_guard| ())
        });
        (held, waiting)
    };
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let (held, waiting) = wait_behind(held); // opens the kept watch
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    let asked_on_the_kept_watch = waiter.requests_while_waiting();

    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let (held, waiting) = wait_behind(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    etcd.stop(); // SIGKILL: the kept watch's stream breaks
    etcd.restart(); // leases and keys are on disk: both keys are still queued
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(15), waiting).await;
    assert!(
        matches!(granted, Ok(Ok(Ok(())))),
        "the waiter was not granted after its kept watch broke: {granted:?}"
    );
    assert!(
        waiter.requests_while_waiting() > asked_on_the_kept_watch,
        "the waiter asked etcd nothing after its kept watch broke"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_is_granted_by_a_release_made_while_its_member_was_down() {
    // The waiter talks to one member of three; the holder to the other two. The holder
    // releases while the waiter's member is dead, so the delete is committed in the gap:
    // the kept watch broke before it, and any watch opened again starts after it. Only
    // a look at the queue can find that the waiter is first.
    let mut members = common::PrivateServer::etcd_cluster(3);
    let endpoint = |member: &common::PrivateServer| format!("http://127.0.0.1:{}", member.port);
    // A follower: its death calls no election, so the holder's release commits at once.
    // (Leadership could still move to it before the kill; see the release below.)
    let waiters_member = (common::etcd_leader(&members).await + 1) % members.len();
    let connect_via = |endpoints: Vec<String>| EtcdLock::connect(common::etcd_options_via(endpoints, 10_000));
    let others = members.iter().enumerate().filter(|(index, _)| *index != waiters_member);
    let holder = connect_via(others.map(|(_, member)| endpoint(member)).collect())
        .await
        .unwrap();
    let waiter = Arc::new(connect_via(vec![endpoint(&members[waiters_member])]).await.unwrap());
    let key = common::unique_key("released-in-the-gap");
    let (held, waiting) = queue_behind_a_holder(&holder, &waiter, &key, Duration::from_secs(20)).await;

    members[waiters_member].stop(); // SIGKILL: the waiter's kept watch breaks
    if let Err(error) = held.release().await {
        // Only if the killed member led after all (an election on a loaded machine):
        // the delete is then sent again in the background, maybe after the restart.
        eprintln!("the release failed ({error}); its delete goes on in the background");
    }
    members[waiters_member].restart();

    let granted = tokio::time::timeout(Duration::from_secs(15), waiting).await;
    assert!(
        matches!(granted, Ok(Ok(Ok(_)))),
        "the waiter was not granted by a release made while its member was down: {granted:?}"
    );
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

/// `holder` takes `key`, then `waiter` queues behind it (given `patience` to be granted)
/// and has 300 ms to get into the queue. Returns the holder's grant and the waiter's acquire.
async fn queue_behind_a_holder<L: DistributedLock + 'static>(
    holder: &L,
    waiter: &Arc<L>,
    key: &str,
    patience: Duration,
) -> (LockGuard, JoinHandle<Result<LockGuard, LockError>>) {
    let held = holder
        .acquire(key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let waiting = start_acquiring(waiter, key, patience);
    tokio::time::sleep(Duration::from_millis(300)).await;
    (held, waiting)
}

/// `lock` asks for `key` in a task of its own, waiting at most `patience`. The task holds
/// a clone of the handle: the caller keeps its own, whose session carries the grant.
fn start_acquiring<L: DistributedLock + 'static>(
    lock: &Arc<L>,
    key: &str,
    patience: Duration,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let (lock, key) = (lock.clone(), key.to_owned());
    tokio::spawn(async move { lock.acquire(&key, &common::owner(), patience).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_whose_only_elder_is_the_holder_is_granted_by_the_release_event_alone() {
    let key = common::unique_key("only-waiter");
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

/// A holder keeps `key` while five waiters queue one after another; it then releases,
/// and the waiters must be granted in the order they asked.
async fn assert_granted_in_order_of_requests(holder: Arc<dyn DistributedLock>, waiters: Vec<Arc<dyn DistributedLock>>) {
    let key = common::unique_key("fifo");
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
    });
    let expected: Vec<usize> = (0..waiters.len()).collect();
    assert_eq!(grant_order(waiters, &key).await, expected);
    releaser.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_grants_in_the_order_of_requests() {
    let mut waiters: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..5 {
        waiters.push(etcd().await);
    }
    assert_granted_in_order_of_requests(etcd().await, waiters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_grants_in_the_order_of_requests() {
    let mut waiters: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..5 {
        waiters.push(zookeeper().await);
    }
    assert_granted_in_order_of_requests(zookeeper().await, waiters).await;
}

/// A holder keeps `key`; a first waiter queues with little patience and a second behind
/// it. When the first gives up, its entry leaves the queue between the holder and the
/// second: that delete is not a release, and the second must wait for the holder's.
async fn assert_a_waiter_giving_up_does_not_grant_the_one_behind_it<L: DistributedLock + 'static>(
    holder: Arc<L>,
    impatient: Arc<L>,
    patient: Arc<L>,
) {
    let key = common::unique_key("gives-up");
    // The impatient waiter queues first and gives up 300 ms after the patient one queued.
    let (held, gave_up) = queue_behind_a_holder(&*holder, &impatient, &key, Duration::from_millis(600)).await;
    let waiting = start_acquiring(&patient, &key, Duration::from_secs(10));
    assert!(matches!(gave_up.await.unwrap(), Err(LockError::Timeout { .. })));
    tokio::time::sleep(Duration::from_millis(500)).await; // its entry is gone by now
    assert!(!waiting.is_finished(), "granted while the holder held the lock");
    let released = Instant::now();
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted after the holder's release")
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "granted {:?} after the release",
        released.elapsed()
    );
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_giving_up_does_not_grant_the_one_behind_it() {
    assert_a_waiter_giving_up_does_not_grant_the_one_behind_it(etcd().await, etcd().await, etcd().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_giving_up_does_not_grant_the_one_behind_it() {
    assert_a_waiter_giving_up_does_not_grant_the_one_behind_it(zookeeper().await, zookeeper().await, zookeeper().await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_session_is_revoked_queues_again_instead_of_believing_it_holds_its_dead_key() {
    let key = common::unique_key("revoked-waiter");
    let (holder, waiter) = (etcd().await, etcd().await);
    let (held, waiting) = queue_behind_a_holder(&*holder, &waiter, &key, Duration::from_secs(10)).await;
    let revoked = waiter.lease_id().await;
    common::revoke_etcd_lease(revoked).await;
    let revoked_at = common::etcd_revision().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap(); // the queue moves on: the waiter must not take this as a grant

    let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted in time")
        .unwrap();
    let granted = granted.expect("the waiter queued again and was granted");
    // Its dead key was created before the revoke; a grant on it would carry that revision.
    let token = granted.fencing_token().expect("etcd grants carry a token").counter;
    assert!(
        token > revoked_at as u64,
        "granted on a key from before the revoke: token {token} <= {revoked_at}"
    );
    assert_ne!(waiter.lease_id().await, revoked, "the grant must be on a new session");
    assert!(granted.lease().is_held());
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_whose_session_expires_queues_again_instead_of_believing_it_holds_its_dead_node() {
    let key = common::unique_key("expired-waiter");
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
    common::expire_zookeeper_session(&expired).await;
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
    let key = common::unique_key("expired");
    let (holder, next) = (zookeeper().await, zookeeper().await);
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    common::expire_zookeeper_session(&holder.client().await.expect("the session is open")).await;

    let started = Instant::now();
    let granted = next
        .acquire(&key, &common::owner(), Duration::from_secs(10))
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
        .acquire(&key, &common::owner(), Duration::from_secs(5))
        .await
        .expect("a new session");
    again.release().await.unwrap();
}

/// A second instance asks for `key` after its holder released it, while a failed acquire
/// of another instance may have left its key or node in the queue. Returns how long the
/// grant took, or the error.
async fn next_instance_waits(next: Arc<dyn DistributedLock>, key: &str) -> Result<Duration, LockError> {
    let started = Instant::now();
    let granted = next.acquire(key, &common::owner(), Duration::from_secs(5)).await?;
    let waited = started.elapsed();
    granted.release().await?;
    Ok(waited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_key_whose_enqueue_answer_was_lost_is_deleted_instead_of_blocking_the_queue() {
    let key = common::unique_key("lost-enqueue");
    let proxy = AnswerLosingProxy::start(common::etcd_port()).await;
    // A long lease, so this instance's session outlives the test: only a delete frees its key.
    let unlucky = EtcdLock::connect(common::etcd_options_via(vec![proxy.http_url()], 10_000))
        .await
        .expect("etcd runs (`make services`)");
    // Once, so its kept watch is open: the enqueue is the first request below.
    let first = unlucky
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    first.release().await.unwrap();
    let holder = etcd().await;
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    // The enqueue runs on etcd, but its answer stays away past the acquire's deadline.
    proxy.hold_answers();
    let refused = unlucky.acquire(&key, &common::owner(), Duration::from_secs(1)).await;
    assert!(refused.is_err(), "granted without an answer: {refused:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.pass_answers();
    held.release().await.unwrap(); // the key of the failed enqueue would be first now

    let waited = next_instance_waits(etcd().await, &key).await;
    let waited = waited.expect("the key of the failed enqueue stayed in the queue, ahead of everyone");
    assert!(waited < Duration::from_secs(2), "granted only after {waited:?}");
    // The unlucky instance itself is not stuck either.
    let again = unlucky
        .acquire(&key, &common::owner(), Duration::from_secs(5))
        .await
        .expect("the unlucky instance acquires again");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_node_whose_create_answer_was_lost_is_found_and_deleted_instead_of_blocking_the_queue() {
    let key = common::unique_key("lost-create");
    let proxy = AnswerLosingProxy::start(common::zookeeper_port()).await;
    let unlucky = ZooKeeperLock::connect(common::zookeeper_options_via(proxy.address(), 4000))
        .await
        .expect("ZooKeeper runs (`make services`)");
    // Once, so the lock's parent node exists: the create is the first request below.
    let first = unlucky
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    first.release().await.unwrap();
    let holder = zookeeper().await;
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();

    // The create runs on ZooKeeper, but its answer stays away past the acquire's deadline
    // and the client's connection timeout (2 s); then the client reconnects, well within
    // its 4 s session.
    proxy.hold_answers();
    let refused = unlucky
        .acquire(&key, &common::owner(), Duration::from_millis(1500))
        .await;
    assert!(refused.is_err(), "granted without an answer: {refused:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    proxy.pass_answers();
    held.release().await.unwrap(); // the node of the lost create would be first now

    let waited = next_instance_waits(zookeeper().await, &key).await;
    let waited = waited.expect("the node of the lost create stayed in the queue, ahead of everyone");
    assert!(waited < Duration::from_secs(3), "granted only after {waited:?}");
    let again = unlucky
        .acquire(&key, &common::owner(), Duration::from_secs(5))
        .await
        .expect("the unlucky instance acquires again");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_holder_cut_off_stops_trusting_its_lock_within_a_session_timeout_of_the_last_answer() {
    let key = common::unique_key("cut-off");
    let proxy = AnswerLosingProxy::start(common::zookeeper_port()).await;
    let lock = ZooKeeperLock::connect(common::zookeeper_options_via(proxy.address(), 4000))
        .await
        .expect("ZooKeeper runs (`make services`)");
    let session_timeout = lock.client().await.expect("the session is open").session_timeout();
    let held = lock
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Nothing passes from now on: the server hears nothing after this instant, so it may
    // expire the session one session timeout later, and another instance take the lock.
    let cut_at = Instant::now();
    proxy.cut_off();
    let lost = tokio::time::timeout(session_timeout * 2, held.lease().lost()).await;
    let trusted_for = cut_at.elapsed();
    assert!(lost.is_ok(), "still trusted {trusted_for:?} after the cut");
    assert!(
        trusted_for <= session_timeout,
        "trusted for {trusted_for:?} after the last answer could have come, past the session timeout of {session_timeout:?}"
    );
    assert!(!held.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_renewal_that_timed_out_does_not_count_its_late_answer_as_a_later_renewal() {
    let key = common::unique_key("stale-renewal");
    let proxy = AnswerLosingProxy::start(common::etcd_port()).await;
    let ttl = Duration::from_secs(9);
    let connecting = Instant::now();
    let lock = EtcdLock::connect(common::etcd_options_via(vec![proxy.http_url()], 9000))
        .await
        .expect("etcd runs (`make services`)");
    // The lease is renewed every 3 s from here (at 3, 6, 9 s...), each renewal given up after 1.5 s.
    let at = |seconds: f64| tokio::time::sleep_until((connecting + Duration::from_secs_f64(seconds)).into());
    let held = lock
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();

    // The renewal at 6 s reaches etcd, but its answer comes only after it timed out (7.5 s).
    at(4.5).await;
    proxy.hold_answers();
    at(8.0).await;
    proxy.pass_answers();
    // From here on nothing reaches etcd: the renewal at 9 s is never seen, and etcd may end
    // the lease one TTL after the cut. A renewal that read the late answer as its own
    // would trust the lease until 9 s + TTL.
    at(8.3).await;
    let cut_at = Instant::now();
    proxy.cut_off();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(2), held.lease().lost()).await;
    let trusted_for = cut_at.elapsed();
    assert!(lost.is_ok(), "still trusted {trusted_for:?} after the cut");
    assert!(
        trusted_for <= ttl,
        "trusted for {trusted_for:?} after etcd last heard a renewal, past the lease's TTL of {ttl:?}"
    );
}

/// A plain etcd client, to change the queue from outside as another party would.
async fn etcd_client() -> etcd_client::Client {
    etcd_client::Client::connect(common::etcd_endpoints(), None)
        .await
        .expect("etcd runs (`make services`)")
}

/// The name of `lock`'s key in the queue of `key`, as its current session names it.
async fn etcd_own_key(lock: &EtcdLock, key: &str) -> String {
    format!("seckill/locks/{key}/{:x}", lock.lease_id().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_release_deletes_only_the_key_it_created_not_a_newer_one_of_the_same_name() {
    // Each acquire of a session reuses its key's name. A delete sent again after a timeout
    // can land after the next acquire created that name anew. Here the test creates it
    // anew, from outside, before the release: the release's delete must leave it.
    let lock = etcd().await;
    let key = common::unique_key("reused-name");
    let held = lock
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let (name, lease) = (etcd_own_key(&lock, &key).await, lock.lease_id().await);
    let mut client = etcd_client().await;
    client.delete(name.clone(), None).await.unwrap();
    let with_lease = etcd_client::PutOptions::new().with_lease(lease);
    let newer = client
        .put(name.clone(), "a later acquire", Some(with_lease))
        .await
        .unwrap();
    let newer = newer.header().expect("a header").revision();

    let _ = held.release().await; // its key went: the lock was lost, whatever it answers
    let left = client.get(name.clone(), None).await.unwrap();
    let left = left.kvs().first().map(|kv| kv.create_revision());
    client.delete(name, None).await.unwrap();
    assert_eq!(left, Some(newer), "the release deleted a newer key of the same name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_key_someone_else_deleted_keeps_its_instances_other_locks() {
    // Every lock of an instance hangs on its one lease. A waiter that took its key's delete
    // for a lost session, and revoked that healthy lease, would free every other lock.
    let (instance, other) = (etcd().await, etcd().await);
    let (first, second) = (
        common::unique_key("own-key-deleted-0"),
        common::unique_key("own-key-deleted-1"),
    );
    let held = instance
        .acquire(&first, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let lease = instance.lease_id().await;
    let (blocking, waiting) = queue_behind_a_holder(&*other, &instance, &second, Duration::from_secs(10)).await;
    let mut client = etcd_client().await;
    let deleted = client
        .delete(etcd_own_key(&instance, &second).await, None)
        .await
        .unwrap();
    assert_eq!(deleted.deleted(), 1, "the waiter's key was not in the queue");
    let deleted_at = deleted.header().expect("a header").revision();
    blocking.release().await.unwrap();

    let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted in time")
        .unwrap()
        .expect("the waiter queued again and was granted");
    assert_eq!(
        instance.lease_id().await,
        lease,
        "the waiter replaced its healthy session"
    );
    let first_key = client.get(etcd_own_key(&instance, &first).await, None).await.unwrap();
    assert_eq!(first_key.kvs().len(), 1, "the other lock's key went with the lease");
    assert!(held.lease().is_held(), "the other lock of the instance was lost");
    let token = granted.fencing_token().expect("etcd grants carry a token").counter;
    assert!(token > deleted_at as u64, "granted on the deleted key: token {token}");
    granted.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_acquire_answers_by_its_deadline_when_etcd_goes_silent_midway() {
    // The waiter's session ends (revoked), so its key goes; from then on etcd answers
    // none of its requests. Every step left must stop at the acquire's deadline.
    let key = common::unique_key("silent-midway");
    let proxy = AnswerLosingProxy::start(common::etcd_port()).await;
    // A long lease: no renewal falls in the test, so only the watch tells of the revoke.
    let waiter = Arc::new(
        EtcdLock::connect(common::etcd_options_via(vec![proxy.http_url()], 10_000))
            .await
            .expect("etcd runs (`make services`)"),
    );
    let holder = etcd().await;
    let held = holder
        .acquire(&key, &common::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let started = Instant::now();
    let waiting = start_acquiring(&waiter, &key, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await; // the waiter queues
    let own_key = etcd_own_key(&waiter, &key).await;
    // Its next request that names its key gets no answer for 4 s, nor does any after it.
    proxy.arm(own_key.as_bytes(), Duration::from_secs(4));
    common::revoke_etcd_lease(waiter.lease_id().await).await;

    let answer = waiting.await.unwrap();
    let answered_after = started.elapsed();
    assert!(answer.is_err(), "granted on a revoked session: {answer:?}");
    assert!(
        answered_after < Duration::from_millis(1500),
        "an acquire with a 1 s timeout answered after {answered_after:?}: {answer:?}"
    );
    held.release().await.unwrap();
    let waited = next_instance_waits(etcd().await, &key).await;
    let waited = waited.expect("a key of the late acquire stayed in the queue");
    assert!(waited < Duration::from_secs(2), "granted only after {waited:?}");
}
