//! One unit per buyer (`--one-per-buyer`): who is buying, and where the sale remembers
//! who already bought.
//!
//! A buyer names itself with `GET /stock/reduce?buyer=<id>`. With `--one-per-buyer`,
//! the script that takes a unit also checks and records the buyer, in the set
//! `stock:buyers` ([`crate::sale::keys::Keys::buyers`]): a second unit to the same buyer is refused (409 `already_bought`) in
//! the same atomic step, so two requests of one buyer cannot both pass the check, even
//! when they go to two instances or to two stock segments, whose locks do not exclude
//! each other. A check before the lock, or in the service's memory, would race.
//!
//! Without the option the buyer, when given, is only written into the sale record, so a
//! checker can count the buyers who got two units.
//!
//! ## On a Redis Cluster
//! There each segment keeps its own buyers, in its own hash slot
//! ([`crate::sale::keys`]), and no script sees them all. So a buyer always walks the
//! segments in one order, from a *home* segment its id picks ([`BuyerId::home`]), and
//! each segment it passes checks its buyers, even one it finds empty (the fenced read
//! does). A buyer who got a unit got it in the first segment of that walk that had one
//! left; every segment before it was empty then and stays empty, so a second walk
//! passes that segment again before any other that has units, and is refused there.
//! Segments the sold-out flag skips are asked too, without a lock: a set of buyers
//! only grows.

/// The longest buyer id taken.
pub const MAX_BUYER_ID_LEN: usize = 64;

/// A buyer's id: 1 to [`MAX_BUYER_ID_LEN`] letters, digits, `-`, `_`, `.` or `:`, so it
/// prints as it is in a log line or a sale record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuyerId(String);

impl BuyerId {
    pub fn parse(id: &str) -> Result<Self, String> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
        if id.is_empty() || id.len() > MAX_BUYER_ID_LEN || !id.chars().all(allowed) {
            return Err(format!(
                "buyer must be 1 to {MAX_BUYER_ID_LEN} letters, digits, '-', '_', '.' or ':', got {id:?}"
            ));
        }
        Ok(BuyerId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segment, of `count`, this buyer's walk starts from: a stable hash of the id
    /// (FNV-1a), the same in every instance and every run.
    pub fn home(&self, count: u32) -> u32 {
        let hash = self.0.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        (hash % u64::from(count)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyer_id_is_short_and_prints_as_it_is() {
        assert_eq!(BuyerId::parse("buyer-42").unwrap().as_str(), "buyer-42");
        assert!(BuyerId::parse("user:7.a_b").is_ok());
        assert!(BuyerId::parse("").is_err());
        assert!(BuyerId::parse("a b").is_err());
        assert!(BuyerId::parse("名字").is_err());
        assert!(BuyerId::parse(&"x".repeat(MAX_BUYER_ID_LEN + 1)).is_err());
        assert!(BuyerId::parse(&"x".repeat(MAX_BUYER_ID_LEN)).is_ok());
    }

    #[test]
    fn a_buyer_has_one_home_segment_and_buyers_spread_over_them() {
        let buyer = |id: &str| BuyerId::parse(id).unwrap();
        // FNV-1a of "buyer-42" is 8432372185460584121, which is 5 modulo 6: the same in
        // every instance and every run.
        assert_eq!(buyer("buyer-42").home(6), 5);
        let mut homes = [0; 6];
        for n in 0..600 {
            homes[buyer(&format!("buyer-{n}")).home(6) as usize] += 1;
        }
        assert!(homes.iter().all(|&count| (60..=140).contains(&count)), "{homes:?}");
    }
}
