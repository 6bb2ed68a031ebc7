//! What only the etcd lock must do: wake exactly the next waiter, with no request after
//! the release's event and none while it waits on its instance's kept watch, yet granted
//! by a release made while that watch was down; never let a waiter whose lease was
//! revoked believe it holds the lock; leave no key of a failed acquire in the queue; and
//! delete only its own key; and keep one holder at a time when the leader of three dies. And the release that queues the next local buyer (step 7, in
//! src/lock/etcd/hand_over.rs): behind the waiters already there, and gone from the queue
//! if nobody claims it. Against the etcd that `make test` starts; a proxy in front of it
//! loses or holds answers.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seckill::lock::etcd::{EtcdLock, EtcdLockOptions};
use seckill::lock::{DistributedLock, HandOver, LockError, LockGuard};
use testkit::nemesis::{Fault, Proxy};

use super::queue::*;

async fn etcd() -> Arc<EtcdLock> {
    Arc::new(
        EtcdLock::connect(testkit::etcd_options(2000))
            .await
            .expect("etcd runs (`make services`)"),
    )
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
    let key = testkit::unique_key("kept-watch");
    for wait in 1..=3 {
        let held = holder
            .acquire(&key, &testkit::owner(), Duration::from_secs(2))
            .await
            .unwrap();
        let (next, key) = (waiter.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            let guard = next
                .acquire(&key, &testkit::owner(), Duration::from_secs(5))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_release_queues_the_next_local_buyer_behind_the_waiters_already_there() {
    assert_a_release_queues_the_next_local_buyer_behind_the_waiters_already_there(etcd().await, etcd().await).await;
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
    let key = testkit::unique_key("place-cut-short");
    let held = one
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let other = {
        let (two, key) = (two.clone(), key.clone());
        tokio::spawn(async move {
            let guard = two
                .acquire(&key, &testkit::owner(), Duration::from_secs(5))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await; // the other instance queues
    let HandOver::Queued(place) = held.hand_over(&testkit::owner()).await.unwrap() else {
        panic!("the release did not queue the next owner");
    };
    let far = Instant::now() + Duration::from_secs(10);
    let cut_short = tokio::time::timeout(Duration::from_millis(100), place.granted(far)).await;
    assert!(
        cut_short.is_err(),
        "the place was granted while the other instance held the lock"
    );
    other.await.unwrap();
    let granted = three.acquire(&key, &testkit::owner(), Duration::from_secs(1)).await;
    assert!(granted.is_ok(), "the place cut short still held the queue: {granted:?}");
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_kept_watch_broke_is_still_granted_by_the_release() {
    // The kept watch's stream breaks when its etcd dies; deletes made while it is gone
    // never reach it. A waiter on it must look at the queue instead of waiting forever.
    let mut etcd = testkit::PrivateServer::etcd();
    let endpoint = format!("http://127.0.0.1:{}", etcd.port);
    let connect = || EtcdLock::connect(testkit::etcd_options_via(vec![endpoint.clone()], 10_000));
    let (holder, waiter) = (Arc::new(connect().await.unwrap()), Arc::new(connect().await.unwrap()));
    let key = testkit::unique_key("kept-watch-broke");
    let wait_behind = |held: LockGuard| {
        let (waiter, key) = (waiter.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            waiter
                .acquire(&key, &testkit::owner(), Duration::from_secs(20))
                .await
                .map(|_guard| ())
        });
        (held, waiting)
    };
    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let (held, waiting) = wait_behind(held); // opens the kept watch
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    let asked_on_the_kept_watch = waiter.requests_while_waiting();

    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
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
    let mut members = testkit::PrivateServer::etcd_cluster(3);
    let endpoint = |member: &testkit::PrivateServer| format!("http://127.0.0.1:{}", member.port);
    // A follower: its death calls no election, so the holder's release commits at once.
    // (Leadership could still move to it before the kill; see the release below.)
    let waiters_member = (testkit::etcd_leader(&members).await + 1) % members.len();
    let connect_via = |endpoints: Vec<String>| EtcdLock::connect(testkit::etcd_options_via(endpoints, 10_000));
    let others = members.iter().enumerate().filter(|(index, _)| *index != waiters_member);
    let holder = connect_via(others.map(|(_, member)| endpoint(member)).collect())
        .await
        .unwrap();
    let waiter = Arc::new(connect_via(vec![endpoint(&members[waiters_member])]).await.unwrap());
    let key = testkit::unique_key("released-in-the-gap");
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
async fn etcd_grants_in_the_order_of_requests() {
    let mut waiters: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..5 {
        waiters.push(etcd().await);
    }
    assert_granted_in_order_of_requests(etcd().await, waiters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_giving_up_does_not_grant_the_one_behind_it() {
    assert_a_waiter_giving_up_does_not_grant_the_one_behind_it(etcd().await, etcd().await, etcd().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_whose_session_is_revoked_queues_again_instead_of_believing_it_holds_its_dead_key() {
    let key = testkit::unique_key("revoked-waiter");
    let (holder, waiter) = (etcd().await, etcd().await);
    let (held, waiting) = queue_behind_a_holder(&*holder, &waiter, &key, Duration::from_secs(10)).await;
    let revoked = waiter.lease_id().await;
    testkit::revoke_etcd_lease(revoked).await;
    let revoked_at = testkit::etcd_revision().await;
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
async fn an_etcd_key_whose_enqueue_answer_was_lost_is_deleted_instead_of_blocking_the_queue() {
    let proxy = Proxy::start(testkit::etcd_port()).await;
    // A long lease, so this instance's session outlives the test: only a delete frees its key.
    let unlucky = EtcdLock::connect(testkit::etcd_options_via(vec![proxy.http_url()], 10_000))
        .await
        .expect("etcd runs (`make services`)");
    let lost = LostAnswer {
        acquire_timeout: Duration::from_secs(1),
        held_past_it: Duration::from_secs(1),
        next_granted_within: Duration::from_secs(2),
    };
    let (holder, next) = (etcd().await, etcd().await);
    let key = testkit::unique_key("lost-enqueue");
    assert_a_place_whose_answer_was_lost_does_not_block_the_queue(&unlucky, &proxy, holder.as_ref(), next, &key, lost)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_renewal_that_timed_out_does_not_count_its_late_answer_as_a_later_renewal() {
    let key = testkit::unique_key("stale-renewal");
    let proxy = Proxy::start(testkit::etcd_port()).await;
    let ttl = Duration::from_secs(9);
    let connecting = Instant::now();
    let lock = EtcdLock::connect(testkit::etcd_options_via(vec![proxy.http_url()], 9000))
        .await
        .expect("etcd runs (`make services`)");
    // The lease is renewed every 3 s from here (at 3, 6, 9 s...), each renewal given up after 1.5 s.
    let at = |seconds: f64| tokio::time::sleep_until((connecting + Duration::from_secs_f64(seconds)).into());
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();

    // The renewal at 6 s reaches etcd, but its answer comes only after it timed out (7.5 s).
    at(4.5).await;
    proxy.strike(Fault::HoldAnswers);
    at(8.0).await;
    proxy.strike(Fault::Healed);
    // From here on nothing reaches etcd: the renewal at 9 s is never seen, and etcd may end
    // the lease one TTL after the cut. A renewal that read the late answer as its own
    // would trust the lease until 9 s + TTL.
    at(8.3).await;
    let cut_at = Instant::now();
    proxy.strike(Fault::Blackhole);
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
    etcd_client::Client::connect(testkit::etcd_endpoints(), None)
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
    let key = testkit::unique_key("reused-name");
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
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
        testkit::unique_key("own-key-deleted-0"),
        testkit::unique_key("own-key-deleted-1"),
    );
    let held = instance
        .acquire(&first, &testkit::owner(), Duration::from_secs(2))
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
    let key = testkit::unique_key("silent-midway");
    let proxy = Proxy::start(testkit::etcd_port()).await;
    // A long lease: no renewal falls in the test, so only the watch tells of the revoke.
    let waiter = Arc::new(
        EtcdLock::connect(testkit::etcd_options_via(vec![proxy.http_url()], 10_000))
            .await
            .expect("etcd runs (`make services`)"),
    );
    let holder = etcd().await;
    let held = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(2))
        .await
        .unwrap();
    let started = Instant::now();
    let waiting = start_acquiring(&waiter, &key, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await; // the waiter queues
    let own_key = etcd_own_key(&waiter, &key).await;
    // Its next request that names its key gets no answer for 4 s, nor does any after it.
    proxy.hold_the_answer_to(own_key.as_bytes(), Duration::from_secs(4));
    testkit::revoke_etcd_lease(waiter.lease_id().await).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_lock_goes_on_granting_one_holder_at_a_time_when_the_leader_of_three_dies() {
    let mut members = testkit::PrivateServer::etcd_cluster(3);
    let endpoints: Vec<String> = members
        .iter()
        .map(|member| format!("http://127.0.0.1:{}", member.port))
        .collect();
    let options = || EtcdLockOptions {
        endpoints: endpoints.clone(),
        ttl: Duration::from_secs(3),
    };
    // Two instances, four buyers each, on one key.
    let (one, two) = (
        EtcdLock::connect(options()).await.unwrap(),
        EtcdLock::connect(options()).await.unwrap(),
    );
    let instances: [Arc<dyn DistributedLock>; 2] = [Arc::new(one), Arc::new(two)];
    let key = testkit::unique_key("leader-dies");
    let (inside, overlaps, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let grants = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    // A holder whose keep-alive could not renew through the election counts its lease
    // lost (safe: a sale would stop before its write) and its release says so.
    let lost_at_release = Arc::new(AtomicUsize::new(0));
    let buyers: Vec<_> = (0..8)
        .map(|buyer| {
            let lock = instances[buyer % 2].clone();
            let (key, inside, overlaps, stop) = (key.clone(), inside.clone(), overlaps.clone(), stop.clone());
            let (grants, errors, lost_at_release) = (grants.clone(), errors.clone(), lost_at_release.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match lock.acquire(&key, &testkit::owner(), Duration::from_secs(20)).await {
                        Ok(guard) => {
                            if inside.swap(true, Ordering::SeqCst) {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            inside.store(false, Ordering::SeqCst);
                            grants.lock().unwrap().push(Instant::now());
                            match guard.release().await {
                                Ok(()) => {}
                                Err(LockError::Lost { .. }) => _ = lost_at_release.fetch_add(1, Ordering::SeqCst),
                                Err(error) => errors.lock().unwrap().push(format!("release: {error}")),
                            }
                        }
                        Err(error) => errors.lock().unwrap().push(format!("acquire: {error}")),
                    }
                }
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = testkit::etcd_leader(&members).await;
    let killed_at = Instant::now();
    members[leader].stop(); // SIGKILL
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, Ordering::SeqCst);
    for buyer in buyers {
        buyer.await.unwrap();
    }

    let grants = grants.lock().unwrap();
    let after: Vec<Instant> = grants.iter().copied().filter(|grant| *grant > killed_at).collect();
    let stall = after.first().map(|first| first.duration_since(killed_at));
    let lost = lost_at_release.load(Ordering::SeqCst);
    println!(
        "{} grants, {} after the leader died, the first after {stall:?}; {lost} leases lost",
        grants.len(),
        after.len()
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert!(
        errors.lock().unwrap().is_empty(),
        "buyers saw errors: {:?}",
        errors.lock().unwrap()
    );
    assert!(
        stall.is_some_and(|stall| stall < Duration::from_secs(4)),
        "no grant within 4 s of the leader's death"
    );
    assert!(
        after.len() >= 50,
        "only {} grants in the 6 s after the leader died",
        after.len()
    );
    assert!(
        lost * 10 <= grants.len(),
        "{lost} of {} grants lost their lease",
        grants.len()
    );
}
