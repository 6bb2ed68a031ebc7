//! Fencing tokens: the number a storage checks to refuse a holder whose lock is gone.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// A number that grows with every grant of one key, across everything that grants it.
///
/// A storage that remembers the highest token it has seen for a key can refuse a
/// holder whose lease already ran out: its token is older (Kleppmann's fencing token).
/// Tokens compare by `(epoch, counter)`: the counter comes from the backend; the epoch
/// grows whenever a strategy switches to another token source, so that a token from
/// the new source is newer than every token from the old one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencingToken {
    /// What issued the counter, for reports: `redis` for `INCR lock:stock:fence`.
    pub source: Cow<'static, str>,
    pub epoch: u64,
    pub counter: u64,
}

impl FencingToken {
    pub fn new(source: &'static str, epoch: u64, counter: u64) -> Self {
        FencingToken {
            source: Cow::Borrowed(source),
            epoch,
            counter,
        }
    }

    /// The total order of tokens: epoch first, then counter.
    pub fn order(&self) -> (u64, u64) {
        (self.epoch, self.counter)
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}.{}", self.source, self.epoch, self.counter)
    }
}
