//! The switch every lock turns at shutdown: from then on it grants nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::lock::LockError;

/// Off until [`ShutDownSwitch::turn`] is called; then every acquire is refused.
pub struct ShutDownSwitch {
    backend: &'static str,
    shut_down: AtomicBool,
}

impl ShutDownSwitch {
    /// A switch for the lock named `backend` (the name the refusal carries).
    pub const fn new(backend: &'static str) -> Self {
        ShutDownSwitch {
            backend,
            shut_down: AtomicBool::new(false),
        }
    }

    /// Called at shutdown: later acquires are refused.
    pub fn turn(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
    }

    /// [`LockError::ShutDown`] once the switch is turned; the first thing an acquire checks.
    pub fn refuse_if_shut_down(&self) -> Result<(), LockError> {
        match self.shut_down.load(Ordering::SeqCst) {
            true => Err(self.refusal()),
            false => Ok(()),
        }
    }

    /// The error a shut-down lock answers with.
    pub fn refusal(&self) -> LockError {
        LockError::ShutDown { backend: self.backend }
    }
}
