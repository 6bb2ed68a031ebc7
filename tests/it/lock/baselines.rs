//! The teaching baselines fail exactly where they should. These tests also prove the
//! race in `racing_increments` is real, so the lock suite's passing runs mean something.

use std::sync::Arc;

use seckill::lock::local::LocalLock;
use seckill::lock::none::NoLock;
use seckill::lock::DistributedLock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_lock_concurrent_read_modify_writes_lose_updates() {
    let client = testkit::redis_client().await;
    let locks: Vec<Arc<dyn DistributedLock>> = vec![Arc::new(NoLock), Arc::new(NoLock)];
    let total = testkit::racing_increments(&client, locks, 4, 25).await;
    assert!(
        total < 200,
        "expected lost updates without a lock, but all 200 increments survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_their_own_in_process_locks_lose_updates() {
    let client = testkit::redis_client().await;
    // Two LocalLocks stand for the mutexes of two separate processes.
    let locks: Vec<Arc<dyn DistributedLock>> = vec![Arc::new(LocalLock::default()), Arc::new(LocalLock::default())];
    let total = testkit::racing_increments(&client, locks, 4, 25).await;
    assert!(
        total < 200,
        "expected lost updates across two in-process locks, but all 200 increments survived"
    );
}
