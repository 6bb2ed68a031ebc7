//! Turns for the tests that stop processes, kill servers or count on the timing of two
//! cores. Each crate's tests are one binary, so a lock in this process reaches all of
//! them: a test that takes its turn never runs beside another that took one.

use tokio::sync::{Mutex, MutexGuard};

static TURN: Mutex<()> = Mutex::const_new(());

/// Waits until no other test holds a turn; the turn lasts as long as the guard.
pub async fn take_turn() -> MutexGuard<'static, ()> {
    TURN.lock().await
}

/// [`take_turn`] for code that blocks. It may run inside a runtime: the wait happens on
/// a thread of its own, where blocking is allowed.
pub fn take_turn_blocking() -> MutexGuard<'static, ()> {
    std::thread::spawn(|| TURN.blocking_lock())
        .join()
        .expect("waiting for a turn does not panic")
}
