//! What one lock handle holds right now, so that `shutdown` can give it all back.
//!
//! A grant is added when it is made and removed when its guard is released; whatever
//! is left at shutdown belongs to sales that will never release it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use super::unpoisoned;

/// A map from a grant's identity to what its release needs, shared by the lock and
/// its guards (cloning shares it).
pub struct HeldGrants<K, V>(Arc<Mutex<HashMap<K, V>>>);

impl<K, V> Clone for HeldGrants<K, V> {
    fn clone(&self) -> Self {
        HeldGrants(self.0.clone())
    }
}

impl<K, V> Default for HeldGrants<K, V> {
    fn default() -> Self {
        HeldGrants(Arc::default())
    }
}

impl<K: Eq + Hash, V> HeldGrants<K, V> {
    pub fn insert(&self, grant: K, release_needs: V) {
        unpoisoned(&self.0).insert(grant, release_needs);
    }

    pub fn remove(&self, grant: &K) {
        unpoisoned(&self.0).remove(grant);
    }

    /// Everything still held, emptying the map: for `shutdown`.
    pub fn take_all(&self) -> Vec<(K, V)> {
        unpoisoned(&self.0).drain().collect()
    }
}
