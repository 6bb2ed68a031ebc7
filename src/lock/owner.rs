//! Who asks for a lock.

/// Who asks for a lock. An owner is one logical caller (one sale, one job) that takes
/// its locks one after another; asking again for a key it holds is granted at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// A new owner, unique across every instance: `label` followed by 64 random bits.
    pub fn new(label: &str) -> Self {
        Owner(format!("{label}:{:016x}", rand::random::<u64>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
