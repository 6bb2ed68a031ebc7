//! One suite, run against every strategy that promises mutual exclusion.
//!
//! Each strategy supplies `contenders(n)`: `n` handles that compete for the same keys
//! the way the strategy is meant to be used. For a distributed lock that is `n`
//! independent connections, as from `n` processes; for the in-process lock it is `n`
//! handles on one process's lock, which is all that lock promises. With each handle
//! come two hooks: how to take its lease away from outside (as an expiry would), and
//! how its holder vanishes without releasing (as a crash would). It also says what it
//! has (fencing tokens, a lease), and a strategy that cannot meet a line says why in
//! its `Traits`, in one place. A check never passes by skipping: where a strategy has
//! no tokens, no lease or no holder that can vanish apart from it, the check asserts
//! that absence and what follows from it instead.
//!
//! The checks are plain `async fn`s over a [`Subject`] (read them as code); a thin
//! macro writes one `#[tokio::test]` per check and strategy. A new backend joins with
//! one `conformance_suite!` block at the bottom. The suites
//! need the real servers `make test` starts: the test Redis, etcd and ZooKeeper.

use testkit::nemesis::{Fault, Proxy};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::etcd::EtcdLock;
use seckill::lock::local::LocalLock;
use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::mysql_version::MySqlVersionLock;
use seckill::lock::parts::reentrant::Reentrant;
use seckill::lock::redis::RedisLock;
use seckill::lock::redis_degrade::mode::SharedMode;
use seckill::lock::redis_degrade::outage::OutageRule;
use seckill::lock::redis_degrade::{DegradeOptions, DegradingLock};
use seckill::lock::redlock::{Redlock, RedlockOptions};
use seckill::lock::zookeeper::ZooKeeperLock;
use seckill::lock::{DistributedLock, FencingToken, HandOver, LockError, LockGuard};
use seckill::sale::segments::Segment;
use seckill::sale::stock::{SaleRecord, Seller, StockRead, StockStore, WriteOutcome};

/// What a hand-over does on a backend.
#[derive(Clone, Copy, Debug, PartialEq)]
enum HandOverKind {
    /// It grants the next owner.
    Grants,
    /// It puts the next owner at the back of the backend's queue (a queue lock).
    Queues,
    /// It releases, as a release does.
    Releases,
}

/// What a strategy offers, so the suite knows which promises to check.
struct Traits {
    /// Contenders are separate clients (as from separate processes), not one shared handle.
    separate_clients: bool,
    /// What a release does for the next owner in its own request (`hand_over`).
    hand_over: HandOverKind,
    /// Grants carry fencing tokens.
    fencing_tokens: bool,
    /// Grants have a lease that the backend can take away; `lose_lease` does that.
    lease: bool,
    /// How long a vanished holder may keep the key: its lease or session timeout.
    /// `None` when holders cannot vanish apart from their lock (the in-process lock).
    vanished_holder_frees_within: Option<Duration>,
}

type Hook<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// One contender: its lock handle, and the two hooks.
struct Contender {
    lock: Arc<dyn DistributedLock>,
    /// Takes this handle's lease on `key` away from outside, as an expiry would.
    lose_lease: Hook<String>,
    /// The holder of this grant vanishes without releasing, as a crash would
    /// (the handle itself is dropped right after).
    vanish: Hook<LockGuard>,
}

/// A holder that crashes: its lease is no longer renewed once the guard is dropped.
fn drop_the_guard() -> Hook<LockGuard> {
    Box::new(|guard: LockGuard| Box::pin(async move { drop(guard) }))
}

fn no_hook<T: Send + 'static>() -> Hook<T> {
    Box::new(|_| Box::pin(async {}))
}

/// Makes `n` contenders of one strategy, given a client of the test Redis.
type MakeContenders = Box<dyn Fn(::redis::Client, usize) -> Pin<Box<dyn Future<Output = Vec<Contender>>>>>;

/// One strategy under test: what it offers, and how to make its contenders.
struct Subject {
    traits: Traits,
    make_contenders: MakeContenders,
}

impl Subject {
    /// `n` contenders with their hooks, and a client of the test Redis they use.
    async fn contenders_with_hooks(&self, n: usize) -> (::redis::Client, Vec<Contender>) {
        let client = testkit::redis_client().await;
        let contenders = (self.make_contenders)(client.clone(), n).await;
        (client, contenders)
    }

    /// `n` contenders' lock handles.
    async fn contenders(&self, n: usize) -> (::redis::Client, Vec<Arc<dyn DistributedLock>>) {
        let (client, contenders) = self.contenders_with_hooks(n).await;
        (client, contenders.into_iter().map(|contender| contender.lock).collect())
    }
}

// The checks: one plain `async fn` per promise, run against every strategy below.

async fn concurrent_read_modify_writes_under_the_lock_lose_no_update(subject: &Subject) {
    let (client, locks) = subject.contenders(2).await;
    let total = testkit::racing_increments(&client, locks, 4, 25).await;
    assert_eq!(
        total,
        2 * 4 * 25,
        "some increments overlapped: the lock let two holders in"
    );
}

async fn try_acquire_fails_fast_while_the_lock_is_held(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("held");
    let guard = locks[0]
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("a free key is granted");
    let started = Instant::now();
    let refused = locks[1].try_acquire(&key, &testkit::owner()).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "expected Busy, got {refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "try_acquire waited {:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}

async fn acquire_gives_up_with_a_timeout_error_while_the_lock_is_held(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("timeout");
    let guard = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let started = Instant::now();
    let refused = locks[1]
        .acquire(&key, &testkit::owner(), Duration::from_millis(300))
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "expected Timeout, got {refused:?}"
    );
    assert!(waited >= Duration::from_millis(300), "gave up early, after {waited:?}");
    assert!(waited < Duration::from_millis(1500), "overshot the timeout: {waited:?}");
    guard.release().await.unwrap();
}

async fn a_waiter_gets_the_lock_soon_after_it_is_released(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("handover");
    let guard = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let waiter = {
        let (lock, key) = (locks[1].clone(), key.clone());
        tokio::spawn(async move {
            let guard = lock.acquire(&key, &testkit::owner(), Duration::from_secs(5)).await?;
            let granted_at = Instant::now();
            guard.release().await?;
            Ok::<_, LockError>(granted_at)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a lock that was still held");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let granted_at = waiter.await.unwrap().expect("the waiter gets the lock");
    let handover = granted_at.saturating_duration_since(released_at);
    assert!(handover < Duration::from_millis(200), "handover took {handover:?}");
}

async fn a_hand_over_gives_the_key_to_the_next_owner_or_frees_it(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    // `/healthz` and the local queue go by what the lock says of itself.
    let releases = subject.traits.hand_over == HandOverKind::Releases;
    assert_eq!(
        locks[0].hands_over(),
        !releases,
        "the lock says it hands over: {}",
        locks[0].hands_over()
    );
    let key = testkit::unique_key("hand-over");
    let guard = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let token = guard.fencing_token().map(|token| token.order());
    match guard.hand_over(&testkit::owner()).await.unwrap() {
        HandOver::Granted(next) => {
            assert!(next.is_held(), "a handed grant starts held");
            if subject.traits.fencing_tokens {
                let next_token = next.fencing_token().map(|token| token.order());
                assert!(
                    next_token > token,
                    "the handed grant's token {next_token:?} is not newer than {token:?}"
                );
            }
            let refused = locks[1].try_acquire(&key, &testkit::owner()).await;
            assert!(
                matches!(refused, Err(LockError::Busy { .. })),
                "a stranger got a key that was handed over: {refused:?}"
            );
            next.release().await.unwrap();
        }
        HandOver::Queued(place) => {
            assert_eq!(
                subject.traits.hand_over,
                HandOverKind::Queues,
                "it queued the next owner"
            );
            // Nobody else is queued: the place is first at once, and the key is not free.
            let refused = locks[1].try_acquire(&key, &testkit::owner()).await;
            assert!(
                matches!(refused, Err(LockError::Busy { .. })),
                "a stranger got a key whose next owner was queued: {refused:?}"
            );
            let next = place
                .granted(Instant::now() + Duration::from_secs(2))
                .await
                .expect("a place with nobody ahead is granted");
            assert!(next.is_held(), "a queued place's grant starts held");
            let next_token = next.fencing_token().map(|token| token.order());
            assert!(
                next_token > token,
                "the queued grant's token {next_token:?} is not newer than {token:?}"
            );
            next.release().await.unwrap();
        }
        // The backend cannot hand over: it released, as a release does.
        HandOver::Released => assert_eq!(
            subject.traits.hand_over,
            HandOverKind::Releases,
            "it released instead of handing over"
        ),
    }
    let granted = locks[1]
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .expect("free once the last grant is given back");
    granted.release().await.unwrap();
}

async fn different_keys_do_not_block_each_other(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let first = locks[0]
        .try_acquire(&testkit::unique_key("a"), &testkit::owner())
        .await
        .unwrap();
    let second = locks[1]
        .try_acquire(&testkit::unique_key("b"), &testkit::owner())
        .await
        .expect("another key is free");
    first.release().await.unwrap();
    second.release().await.unwrap();
}

async fn an_owner_reenters_a_key_it_holds_and_frees_it_only_at_its_last_release(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let (mine, theirs) = (Reentrant::new(locks[0].clone()), Reentrant::new(locks[1].clone()));
    let (me, stranger) = (testkit::owner(), testkit::owner());
    let key = testkit::unique_key("reentrant");

    let outer = mine.acquire(&key, &me, Duration::from_secs(1)).await.unwrap();
    let started = Instant::now();
    let inner = mine
        .acquire(&key, &me, Duration::from_secs(1))
        .await
        .expect("the owner re-enters");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "re-entry waited {:?}",
        started.elapsed()
    );
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "one grant, one token");

    inner.release().await.unwrap();
    let refused = theirs.try_acquire(&key, &stranger).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "freed at the first of two releases: {refused:?}"
    );
    outer.release().await.unwrap();
    let granted = theirs
        .acquire(&key, &stranger, Duration::from_secs(2))
        .await
        .expect("free after the last release");
    granted.release().await.unwrap();
}

/// A strategy that says it issues no tokens is held to that too: its sale runs unfenced,
/// and a token it gave anyway would be one the stock never checks.
async fn fencing_tokens_grow_strictly_with_every_grant(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("fence");
    let mut given = Vec::new();
    for round in 0..6 {
        let guard = locks[round % 2]
            .acquire(&key, &testkit::owner(), Duration::from_secs(2))
            .await
            .unwrap();
        given.push(guard.fencing_token().map(FencingToken::order));
        guard.release().await.unwrap();
    }
    if !subject.traits.fencing_tokens {
        assert!(
            given.iter().all(Option::is_none),
            "a strategy without tokens gave {given:?}"
        );
        return;
    }
    let tokens: Vec<(u64, u64)> = given
        .into_iter()
        .map(|token| token.expect("every grant carries a token"))
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[1] > pair[0]),
        "tokens did not grow: {tokens:?}"
    );
}

async fn a_lost_lease_is_seen_by_the_holder_and_its_write_is_refused(subject: &Subject) {
    if !subject.traits.lease {
        return a_grant_without_a_lease_lasts_until_it_is_released(subject).await;
    }
    let (_, mut contenders) = subject.contenders_with_hooks(2).await;
    let locks: Vec<Arc<dyn DistributedLock>> = contenders.iter().map(|c| c.lock.clone()).collect();
    let lose_lease = contenders.remove(0).lose_lease;
    let stock_client = testkit::redis_client().await;
    let store = StockStore::new(testkit::master_connection(&stock_client).await)
        .with_keys(testkit::TestSale::new().keys().clone());
    store.reset(10).await.unwrap();
    let key = testkit::unique_key("lost");

    let old = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let old_token = old.fencing_token().cloned();
    let StockRead::Stock { units: 10, sale } = store
        .read(Segment::WHOLE, old_token.as_ref(), "stale-write")
        .await
        .unwrap()
    else {
        panic!("the old holder's read was refused");
    };
    assert!(old.is_held());

    lose_lease(key.clone()).await;
    let new = locks[1]
        .acquire(&key, &testkit::owner(), Duration::from_secs(10))
        .await
        .expect("taken over");
    let new_token = new.fencing_token().cloned();
    assert!(matches!(
        store
            .read(Segment::WHOLE, new_token.as_ref(), "new-holder")
            .await
            .unwrap(),
        StockRead::Stock { units: 10, .. }
    ));

    tokio::time::timeout(Duration::from_secs(5), old.lease().lost())
        .await
        .expect("the old holder learns that its lease is gone");
    assert!(!old.is_held());
    let seller = Seller {
        instance: "old".into(),
        port: 0,
        strategy: "test",
    };
    let record = SaleRecord::new(&seller, "stale-write", Segment::WHOLE, 10, old_token.clone(), 0.0, 0);
    let written = store
        .write(Segment::WHOLE, &record, 9, &sale, old_token.as_ref())
        .await
        .unwrap();
    if !subject.traits.fencing_tokens {
        // Without a token the stock cannot tell a late write from a current one: the
        // hole `make chaos` shows on the `no_tokens` rows.
        assert_eq!(written, WriteOutcome::Sold, "a write without a token was refused");
    } else {
        assert_eq!(
            written,
            WriteOutcome::Fenced,
            "the stock took a write from a holder whose lock is gone"
        );
        let snapshot = store.snapshot().await.unwrap();
        assert_eq!(
            (snapshot.stock, snapshot.lucky),
            (10, 0),
            "something was sold: {snapshot:?}"
        );
    }
    assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
    new.release().await.unwrap();
}

/// A strategy whose grants have no lease says so: nothing outside takes the key away, so
/// the holder's lease never ends by itself, and the key stays held until it is released.
async fn a_grant_without_a_lease_lasts_until_it_is_released(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("no-lease");
    let guard = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_millis(300), guard.lease().lost()).await;
    assert!(lost.is_err(), "a grant without a lease was lost");
    assert!(guard.is_held());
    let refused = locks[1].try_acquire(&key, &testkit::owner()).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "the key was not held: {refused:?}"
    );
    guard.release().await.unwrap();
}

/// A holder that vanishes without a release, as a crash would, keeps the key no longer
/// than its lease or session. An in-process holder cannot vanish apart from its lock (its
/// `vanished_holder_frees_within` is `None`): its grant lives in the task that holds it,
/// and a task that ends (a panic, a request cut short) drops it, which frees the key at
/// once. The process dying takes the lock and its waiters with it.
async fn a_holder_that_vanishes_without_release_frees_the_key_within_its_lease(subject: &Subject) {
    let (_, mut contenders) = subject.contenders_with_hooks(2).await;
    let key = testkit::unique_key("vanish");
    let Contender { lock, vanish, .. } = contenders.remove(0);
    let guard = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    vanish(guard).await;
    drop(lock);
    let vanished_at = Instant::now();
    let survivor = &contenders[0].lock;
    let Some(bound) = subject.traits.vanished_holder_frees_within else {
        let granted = survivor.try_acquire(&key, &testkit::owner()).await;
        assert!(
            granted.is_ok(),
            "the key stayed held after its grant was dropped: {granted:?}"
        );
        return granted.unwrap().release().await.unwrap();
    };
    let granted = survivor
        .acquire(&key, &testkit::owner(), bound * 3)
        .await
        .expect("the key is freed");
    let waited = vanished_at.elapsed();
    assert!(waited < bound + Duration::from_secs(1), "freed only after {waited:?}");
    granted.release().await.unwrap();
}

async fn shutdown_frees_what_was_held_and_refuses_new_acquires(subject: &Subject) {
    let (_, locks) = subject.contenders(2).await;
    let key = testkit::unique_key("shutdown");
    let held = locks[0]
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    locks[0].shutdown().await.expect("shutdown succeeds");
    let refused = locks[0]
        .try_acquire(&testkit::unique_key("after"), &testkit::owner())
        .await;
    assert!(
        matches!(refused, Err(LockError::ShutDown { .. })),
        "expected ShutDown, got {refused:?}"
    );
    if subject.traits.separate_clients {
        // Another process gets the key at once, not after a lease runs out.
        let started = Instant::now();
        let granted = locks[1]
            .acquire(&key, &testkit::owner(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "freed only after {:?}",
            started.elapsed()
        );
        granted.release().await.unwrap();
    }
    drop(held);
}

/// Writes one `#[tokio::test]` per check for a strategy: the test calls the check with
/// the strategy's [`Subject`]. Nothing else happens in the macro.
macro_rules! conformance_suite {
    ($strategy:ident, $traits:expr, $contenders:expr) => {
        mod $strategy {
            use super::*;

            fn subject() -> Subject {
                Subject { traits: $traits, make_contenders: Box::new(|client, n| Box::pin(($contenders)(client, n))) }
            }

            checks! {
                one_thread: try_acquire_fails_fast_while_the_lock_is_held, acquire_gives_up_with_a_timeout_error_while_the_lock_is_held, a_waiter_gets_the_lock_soon_after_it_is_released, a_hand_over_gives_the_key_to_the_next_owner_or_frees_it, different_keys_do_not_block_each_other, an_owner_reenters_a_key_it_holds_and_frees_it_only_at_its_last_release, fencing_tokens_grow_strictly_with_every_grant, a_lost_lease_is_seen_by_the_holder_and_its_write_is_refused, shutdown_frees_what_was_held_and_refuses_new_acquires;
                two_threads: concurrent_read_modify_writes_under_the_lock_lose_no_update, a_holder_that_vanishes_without_release_frees_the_key_within_its_lease;
            }
        }
    };
}

/// The wrappers themselves. A check that races two contenders runs on two threads.
macro_rules! checks {
    (one_thread: $($check:ident),*; two_threads: $($racing:ident),*;) => {
        $(
            #[tokio::test]
            async fn $check() {
                super::$check(&subject()).await
            }
        )*
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $racing() {
                super::$racing(&subject()).await
            }
        )*
    };
}

conformance_suite!(
    redis,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        fencing_tokens: true,
        lease: true,
        vanished_holder_frees_within: Some(Duration::from_millis(900)),
    },
    |client: ::redis::Client, n: usize| async move {
        let mut contenders = Vec::new();
        for _ in 0..n {
            // One connection per contender, as from separate processes.
            let lock = RedisLock::connect(&client, testkit::redis_options(900, true))
                .await
                .unwrap();
            let redis = client.clone();
            contenders.push(Contender {
                lock: Arc::new(lock),
                // As if the lease ran out: the key is gone, and the renewal will find it so.
                lose_lease: Box::new(move |key: String| {
                    Box::pin(async move {
                        testkit::delete_key(&redis, &key).await;
                    })
                }),
                // A crashed holder stops renewing; dropping the guard stops its renewal.
                vanish: drop_the_guard(),
            });
        }
        contenders
    }
);

conformance_suite!(
    etcd,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Queues,
        fencing_tokens: true,
        lease: true,
        // etcd grants at least its minimum lease, 2 s with default settings.
        vanished_holder_frees_within: Some(Duration::from_secs(2)),
    },
    |_client: ::redis::Client, n: usize| async move {
        let mut contenders = Vec::new();
        for _ in 0..n {
            let lock = EtcdLock::connect(testkit::etcd_options(2000))
                .await
                .expect("etcd runs (`make services`)");
            let lease = lock.lease_id().await;
            contenders.push(Contender {
                lock: Arc::new(lock),
                // As if the lease expired: revoke it from another client.
                lose_lease: Box::new(move |_key: String| {
                    Box::pin(async move { testkit::revoke_etcd_lease(lease).await })
                }),
                // A crashed process stops its keep-alive: leak the guard, drop the handle.
                vanish: Box::new(|guard: LockGuard| Box::pin(async move { std::mem::forget(guard) })),
            });
        }
        contenders
    }
);

conformance_suite!(
    zookeeper,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Releases,
        fencing_tokens: true,
        lease: true,
        // A vanished holder's session ends when the server has heard nothing for the
        // session timeout (4 s). The server checks expiries once a tick (2 s), so it may
        // take a tick more.
        vanished_holder_frees_within: Some(Duration::from_secs(6)),
    },
    |_client: ::redis::Client, n: usize| async move {
        let mut contenders = Vec::new();
        for _ in 0..n {
            // Each contender talks to ZooKeeper through a nemesis of its own, which lives
            // as long as the test: the checks keep the lock and drop the hooks, and the
            // proxy's drop would close the session's connection.
            let proxy: &'static Proxy = Box::leak(Box::new(Proxy::start(testkit::zookeeper_port()).await));
            let lock = ZooKeeperLock::connect(testkit::zookeeper_options_via(proxy.address(), 4000))
                .await
                .expect("ZooKeeper runs");
            let session = lock.client().await.expect("the session is open");
            contenders.push(Contender {
                lock: Arc::new(lock),
                // As if the server expired the session.
                lose_lease: Box::new(move |_key: String| {
                    Box::pin(async move { testkit::expire_zookeeper_session(&session).await })
                }),
                // A crashed process: nothing more reaches the server, and no connection
                // closes. The server alone decides, by the session timeout.
                vanish: Box::new(move |guard: LockGuard| {
                    Box::pin(async move {
                        std::mem::forget(guard);
                        proxy.strike(Fault::Blackhole);
                    })
                }),
            });
        }
        contenders
    }
);

/// As if a MySQL lock's holder had stopped renewing long ago: its row is past expiry.
const EXPIRE_LOCK_ROW: &str = "UPDATE seckill_locks SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = ?";
const EXPIRE_VERSION_ROW: &str =
    "UPDATE seckill_version_locks SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = ?";

/// Runs one of the statements above on the row of `key`.
async fn expire_row(pool: &sqlx::MySqlPool, statement: &'static str, key: String) {
    sqlx::query(statement).bind(key).execute(pool).await.unwrap();
}

/// `n` contenders of a MySQL lock, each on a pool of its own as from separate
/// processes; `expire` is the statement that takes a holder's row away.
async fn mysql_contenders(
    n: usize,
    expire: &'static str,
    new_lock: impl Fn(sqlx::MySqlPool) -> Arc<dyn DistributedLock>,
) -> Vec<Contender> {
    let mut contenders = Vec::new();
    for _ in 0..n {
        let pool = testkit::mysql_pool().await;
        let lock = new_lock(pool.clone());
        contenders.push(Contender {
            lock,
            lose_lease: Box::new(move |key: String| Box::pin(async move { expire_row(&pool, expire, key).await })),
            // A crashed holder stops renewing; dropping the guard stops its renewal.
            vanish: drop_the_guard(),
        });
    }
    contenders
}

const MYSQL_TTL: Duration = Duration::from_millis(1000);

conformance_suite!(
    mysql,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        fencing_tokens: true,
        lease: true,
        vanished_holder_frees_within: Some(MYSQL_TTL),
    },
    |_client: ::redis::Client, n: usize| async move {
        let options = MySqlLockOptions {
            ttl: MYSQL_TTL,
            renew: true,
            permits: Some(3),
        };
        mysql_contenders(n, EXPIRE_LOCK_ROW, |pool| Arc::new(MySqlLock::new(pool, options))).await
    }
);

conformance_suite!(
    mysql_version,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        fencing_tokens: true,
        lease: true,
        vanished_holder_frees_within: Some(MYSQL_TTL),
    },
    |_client: ::redis::Client, n: usize| async move {
        let options = MySqlLockOptions {
            ttl: MYSQL_TTL,
            renew: true,
            permits: Some(3),
        };
        mysql_contenders(n, EXPIRE_VERSION_ROW, |pool| {
            Arc::new(MySqlVersionLock::new(pool, options))
        })
        .await
    }
);

conformance_suite!(
    redlock,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        // Redlock has no fencing token (see src/lock/redlock/mod.rs): the lost-lease test
        // checks that the holder sees the loss, not that the stock refuses its write.
        fencing_tokens: false,
        lease: true,
        vanished_holder_frees_within: Some(Duration::from_millis(1000)),
    },
    |_client: ::redis::Client, n: usize| async move {
        let urls = testkit::redlock_urls();
        let options = RedlockOptions {
            ttl: Duration::from_millis(1000),
            renew: true,
            node_timeout: Duration::from_millis(50),
        };
        let mut contenders = Vec::new();
        for _ in 0..n {
            // Connections of its own to every master, as from a separate process.
            let lock = Redlock::connect(&urls, options)
                .await
                .expect("the five Redlock masters run (`make services`)");
            let masters = urls.clone();
            contenders.push(Contender {
                lock: Arc::new(lock),
                // As if the lease ran out on every master.
                lose_lease: Box::new(move |key: String| {
                    Box::pin(async move {
                        for url in masters {
                            testkit::delete_key(&::redis::Client::open(url).unwrap(), &key).await;
                        }
                    })
                }),
                // A crashed holder stops renewing; dropping the guard stops its renewal.
                vanish: drop_the_guard(),
            });
        }
        contenders
    }
);

/// `n` degrading locks sharing a mode of their own, which starts as `mode` and, with
/// a recovery time of an hour, stays there.
async fn degrading_contenders(client: ::redis::Client, n: usize, mode: &str) -> Vec<Contender> {
    let mode_name = testkit::unique_key("mode");
    let setup = testkit::mysql_pool().await;
    sqlx::query("INSERT INTO seckill_lock_modes (name, mode, epoch, grants_from) VALUES (?, ?, 1, NOW(3))")
        .bind(&mode_name)
        .bind(mode)
        .execute(&setup)
        .await
        .unwrap();
    let ttl = Duration::from_millis(1000);
    let options = DegradeOptions {
        ttl,
        outage: OutageRule {
            after_failures: 3,
            after: Duration::from_millis(1000),
        },
        recover_after: Duration::from_secs(3600),
    };
    let mut contenders = Vec::new();
    for _ in 0..n {
        let pool = testkit::mysql_pool().await;
        let redis_lock = RedisLock::connect(&client, testkit::redis_options(1000, true))
            .await
            .unwrap();
        let mysql_lock = MySqlVersionLock::new(
            pool.clone(),
            MySqlLockOptions {
                ttl,
                renew: true,
                permits: Some(3),
            },
        );
        let shared = SharedMode::open(pool.clone(), &mode_name, &testkit::unique_key("instance"), ttl)
            .await
            .unwrap();
        let lock = DegradingLock::start(redis_lock, client.clone(), mysql_lock, shared, options)
            .await
            .unwrap();
        let (redis, in_mysql) = (client.clone(), mode == "mysql");
        contenders.push(Contender {
            lock: Arc::new(lock),
            // As if the lease ran out, in whichever lock the mode uses.
            lose_lease: Box::new(move |key: String| {
                Box::pin(async move {
                    if in_mysql {
                        expire_row(&pool, EXPIRE_VERSION_ROW, key).await;
                    } else {
                        testkit::delete_key(&redis, &key).await;
                    }
                })
            }),
            // A crashed holder stops renewing; dropping the guard stops its renewal.
            vanish: drop_the_guard(),
        });
    }
    contenders
}

conformance_suite!(
    redis_degrade_in_redis_mode,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        fencing_tokens: true,
        lease: true,
        vanished_holder_frees_within: Some(Duration::from_millis(1000)),
    },
    |client: ::redis::Client, n: usize| async move { degrading_contenders(client, n, "redis").await }
);

conformance_suite!(
    redis_degrade_in_mysql_mode,
    Traits {
        separate_clients: true,
        hand_over: HandOverKind::Grants,
        fencing_tokens: true,
        lease: true,
        vanished_holder_frees_within: Some(Duration::from_millis(1000)),
    },
    |client: ::redis::Client, n: usize| async move { degrading_contenders(client, n, "mysql").await }
);

conformance_suite!(
    local,
    Traits {
        separate_clients: false,
        hand_over: HandOverKind::Releases,
        fencing_tokens: false,
        lease: false,
        // An in-process lock lives and dies with its process: nothing outside to free.
        vanished_holder_frees_within: None,
    },
    |_client: ::redis::Client, n: usize| async move {
        // One process, one lock: every contender shares it.
        let lock: Arc<dyn DistributedLock> = Arc::new(LocalLock::default());
        (0..n)
            .map(|_| Contender {
                lock: lock.clone(),
                lose_lease: no_hook(),
                vanish: no_hook(),
            })
            .collect::<Vec<_>>()
    }
);
