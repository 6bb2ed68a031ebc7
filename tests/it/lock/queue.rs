//! What every queue lock (etcd, ZooKeeper) must do beyond the conformance suite, as
//! plain `async fn`s over a lock: wake one waiter per release, grant in the order of
//! requests, grant no one when a waiter in the middle of the queue gives up, and put a
//! released place behind the waiters already there. `lock::etcd` and `lock::zookeeper`
//! run them against the servers `make test` starts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::{DistributedLock, HandOver, LockError, LockGuard};
use tokio::task::JoinHandle;

use testkit::nemesis::{Fault, Proxy};

/// Starts `n` waiters on `key`, one after another, each granted in turn: it records
/// its place, holds the lock briefly and releases. Returns the order of the grants.
pub(super) async fn grant_order(locks: Vec<Arc<dyn DistributedLock>>, key: &str) -> Vec<usize> {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (place, lock) in locks.into_iter().enumerate() {
        let (order, key) = (order.clone(), key.to_owned());
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .acquire(&key, &testkit::owner(), Duration::from_secs(20))
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
pub(super) async fn one_release<L: DistributedLock + 'static, T>(
    holder: Arc<L>,
    waiters: Vec<Arc<L>>,
    count: impl Fn(&[Arc<L>]) -> T,
) -> (T, T) {
    let key = testkit::unique_key("herd");
    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for waiter in &waiters {
        let (waiter, key) = (waiter.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiter
                .acquire(&key, &testkit::owner(), Duration::from_secs(20))
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

/// One request deletes the holder's entry and puts the next local buyer's at the back
/// of the queue: another instance's waiter, queued first, is granted first.
pub(super) async fn assert_a_release_queues_the_next_local_buyer_behind_the_waiters_already_there<
    L: DistributedLock + 'static,
>(
    one: Arc<L>,
    two: Arc<L>,
) {
    let key = testkit::unique_key("queued-over");
    let held = one
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let other = {
        let (two, key, order) = (two.clone(), key.clone(), order.clone());
        tokio::spawn(async move {
            let guard = two
                .acquire(&key, &testkit::owner(), Duration::from_secs(5))
                .await
                .unwrap();
            order.lock().unwrap().push("the other instance");
            tokio::time::sleep(Duration::from_millis(100)).await;
            order.lock().unwrap().push("the other instance releases");
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await; // the other instance queues
    let HandOver::Queued(place) = held.hand_over(&testkit::owner()).await.unwrap() else {
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

/// A buyer may give up between the release that queued it and its turn: its place,
/// dropped, must not hold the queue until the session ends.
pub(super) async fn assert_a_place_nobody_claims_leaves_the_queue<L: DistributedLock + 'static>(
    one: Arc<L>,
    two: Arc<L>,
) {
    let key = testkit::unique_key("place-dropped");
    let held = one
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let HandOver::Queued(place) = held.hand_over(&testkit::owner()).await.unwrap() else {
        panic!("the release did not queue the next owner");
    };
    drop(place);
    let granted = two.acquire(&key, &testkit::owner(), Duration::from_secs(1)).await;
    assert!(granted.is_ok(), "the dropped place still held the queue: {granted:?}");
    granted.unwrap().release().await.unwrap();
}

/// `holder` takes `key`, then `waiter` queues behind it (given `patience` to be granted)
/// and has 300 ms to get into the queue. Returns the holder's grant and the waiter's acquire.
pub(super) async fn queue_behind_a_holder<L: DistributedLock + 'static>(
    holder: &L,
    waiter: &Arc<L>,
    key: &str,
    patience: Duration,
) -> (LockGuard, JoinHandle<Result<LockGuard, LockError>>) {
    let held = holder
        .acquire(key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let waiting = start_acquiring(waiter, key, patience);
    tokio::time::sleep(Duration::from_millis(300)).await;
    (held, waiting)
}

/// `lock` asks for `key` in a task of its own, waiting at most `patience`. The task holds
/// a clone of the handle: the caller keeps its own, whose session carries the grant.
pub(super) fn start_acquiring<L: DistributedLock + 'static>(
    lock: &Arc<L>,
    key: &str,
    patience: Duration,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let (lock, key) = (lock.clone(), key.to_owned());
    tokio::spawn(async move { lock.acquire(&key, &testkit::owner(), patience).await })
}

/// A holder keeps `key` while five waiters queue one after another; it then releases,
/// and the waiters must be granted in the order they asked.
pub(super) async fn assert_granted_in_order_of_requests(
    holder: Arc<dyn DistributedLock>,
    waiters: Vec<Arc<dyn DistributedLock>>,
) {
    let key = testkit::unique_key("fifo");
    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
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

/// A holder keeps `key`; a first waiter queues with little patience and a second behind
/// it. When the first gives up, its entry leaves the queue between the holder and the
/// second: that delete is not a release, and the second must wait for the holder's.
pub(super) async fn assert_a_waiter_giving_up_does_not_grant_the_one_behind_it<L: DistributedLock + 'static>(
    holder: Arc<L>,
    impatient: Arc<L>,
    patient: Arc<L>,
) {
    let key = testkit::unique_key("gives-up");
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

/// How long a backend's client is kept from its answer, and how soon the queue must
/// move again after (see [`assert_a_place_whose_answer_was_lost_does_not_block_the_queue`]).
pub(super) struct LostAnswer {
    /// The unlucky instance's acquire gives up after this.
    pub(super) acquire_timeout: Duration,
    /// The answers stay away this long after the acquire gave up.
    pub(super) held_past_it: Duration,
    /// After the heal and the release, the next instance is granted within this.
    pub(super) next_granted_within: Duration,
}

/// `unlucky`, behind `proxy`, asks for `key` while `holder` holds it. Its enqueue runs on
/// the server, but the answer is held past the acquire's deadline. The place it made
/// would be first once the holder releases: the lock must delete it, so that `next`
/// is granted at once and `unlucky` itself can acquire again.
pub(super) async fn assert_a_place_whose_answer_was_lost_does_not_block_the_queue(
    unlucky: &dyn DistributedLock,
    proxy: &Proxy,
    holder: &dyn DistributedLock,
    next: Arc<dyn DistributedLock>,
    key: &str,
    lost: LostAnswer,
) {
    // Once first, so the enqueue is the first request below: etcd's kept watch is open,
    // ZooKeeper's parent node exists.
    let first = unlucky
        .acquire(key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    first.release().await.unwrap();
    let held = holder
        .acquire(key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    proxy.strike(Fault::HoldAnswers);
    let refused = unlucky.acquire(key, &testkit::owner(), lost.acquire_timeout).await;
    assert!(refused.is_err(), "granted without an answer: {refused:?}");
    tokio::time::sleep(lost.held_past_it).await;
    proxy.strike(Fault::Healed);
    held.release().await.unwrap(); // the place of the lost enqueue would be first now

    let waited = next_instance_waits(next, key).await;
    let waited = waited.expect("the place of the lost enqueue stayed in the queue, ahead of everyone");
    assert!(waited < lost.next_granted_within, "granted only after {waited:?}");
    let again = unlucky
        .acquire(key, &testkit::owner(), Duration::from_secs(5))
        .await
        .expect("the unlucky instance acquires again");
    again.release().await.unwrap();
}

/// A second instance asks for `key` after its holder released it, while a failed acquire
/// of another instance may have left its key or node in the queue. Returns how long the
/// grant took, or the error.
pub(super) async fn next_instance_waits(next: Arc<dyn DistributedLock>, key: &str) -> Result<Duration, LockError> {
    let started = Instant::now();
    let granted = next.acquire(key, &testkit::owner(), Duration::from_secs(5)).await?;
    let waited = started.elapsed();
    granted.release().await?;
    Ok(waited)
}
