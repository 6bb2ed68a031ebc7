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
}
