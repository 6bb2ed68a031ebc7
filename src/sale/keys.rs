//! Every key a sale keeps in Redis, named in one place.
//!
//! A sale is a handful of keys: the units left, the buyers who got one, the sale records,
//! the fence, the outcomes of writes, the orders stream, and the lock that guards them.
//! [`Keys`] names them all from one optional prefix (`--key-prefix`, empty by default),
//! so the default names stay the ones the lessons' `redis-cli` commands read (`stock`,
//! `lucky`, `lock:stock`), and two sales can share one Redis under two prefixes: the
//! tests each run a sale of their own that way.
//!
//! The Lua scripts take every key as `KEYS[]`, never by a name of their own, so a prefix
//! reaches them too.

use crate::sale::segments::{Segment, Segments};

/// The names of every key of one sale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of the sale whose names start with `prefix` (`""`: the default names).
    pub fn with_prefix(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    /// What every name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn named(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Units left, in every segment together.
    pub fn stock(&self) -> String {
        self.named("stock")
    }

    /// Buyers who got a unit.
    pub fn lucky(&self) -> String {
        self.named("lucky")
    }

    /// One JSON sale record per unit sold, in the order they were written.
    pub fn sales(&self) -> String {
        self.named("sales")
    }

    /// The stock the sale was last reset to, so a checker knows what to compare against.
    pub fn initial_stock(&self) -> String {
        self.named("stock:initial")
    }

    /// Grows by one with every reset, so a checker can tell that a sale was reset under it.
    pub fn generation(&self) -> String {
        self.named("stock:generation")
    }

    /// A random name every reset gives the sale. Unlike the generation it cannot come back:
    /// a Redis that lost its data counts generations from 1 again, but draws a new name.
    pub fn sale_name(&self) -> String {
        self.named("stock:sale")
    }

    /// One outcome (`sold` or `aborted`) per sale id that reached the write.
    pub fn outcomes(&self) -> String {
        self.named("stock:outcomes")
    }

    /// How many reads and writes the fence refused: a hash `{read, write}`.
    pub fn fence_refusals(&self) -> String {
        self.named("stock:fence:refusals")
    }

    /// The orders of `--orders` not yet written into MySQL, one entry per unit sold.
    pub fn orders(&self) -> String {
        self.named("stock:orders")
    }

    /// The buyers who got a unit of this sale (`--one-per-buyer`), a set.
    pub fn buyers(&self) -> String {
        self.named("stock:buyers")
    }

    /// How many segments the last reset made.
    pub fn segment_count(&self) -> String {
        self.named("stock:segments")
    }

    /// One JSON grant record per grant a sale held, appended after its release
    /// ([`crate::sale::grant_log`]).
    pub fn grants(&self) -> String {
        self.named("stock:grants")
    }

    /// Buyers turned away, by instance and error code (`seckill-8080 lock_timeout`): a
    /// hash each instance writes after its answer, off the sale's path, for the dashboard.
    pub fn refusals(&self) -> String {
        self.named("stock:refusals")
    }

    /// Where the units of `segment` are: `stock` for a stock in one piece.
    pub fn stock_of(&self, segment: Segment) -> String {
        self.of(segment, "stock", "stock:segment")
    }

    /// The fencing high-water mark of `segment`, a hash `{epoch, counter, sale}`.
    pub fn fence_of(&self, segment: Segment) -> String {
        self.of(segment, "stock:fence", "stock:fence")
    }

    /// The lock that guards `segment`: `lock:stock` for a stock in one piece.
    pub fn lock_of(&self, segment: Segment) -> String {
        self.of(segment, "lock:stock", "lock:stock")
    }

    /// Every key a segmented sale may have used, for a reset to delete: the units and
    /// the fences of every possible segment.
    pub fn every_possible_segment_key(&self) -> Vec<String> {
        Segments::most()
            .all()
            .flat_map(|segment| [self.stock_of(segment), self.fence_of(segment)])
            .collect()
    }

    fn of(&self, segment: Segment, whole: &str, part: &str) -> String {
        if segment.of == 1 {
            self.named(whole)
        } else {
            self.named(&format!("{part}:{}", segment.index))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_prefix_the_keys_are_the_names_the_lessons_read() {
        let keys = Keys::default();
        let whole = Segment::WHOLE;
        assert_eq!(
            [
                keys.stock(),
                keys.lucky(),
                keys.sales(),
                keys.stock_of(whole),
                keys.fence_of(whole),
                keys.lock_of(whole)
            ],
            ["stock", "lucky", "sales", "stock", "stock:fence", "lock:stock"]
        );
    }

    #[test]
    fn each_segment_has_keys_of_its_own() {
        let keys = Keys::default();
        let third = Segments::new(4).unwrap().all().nth(2).unwrap();
        assert_eq!(
            [keys.stock_of(third), keys.fence_of(third), keys.lock_of(third)],
            ["stock:segment:2", "stock:fence:2", "lock:stock:2"]
        );
    }

    #[test]
    fn a_prefix_starts_every_name() {
        let keys = Keys::with_prefix("shop-7:");
        let third = Segments::new(4).unwrap().all().nth(2).unwrap();
        let every = [
            keys.stock(),
            keys.lucky(),
            keys.sales(),
            keys.initial_stock(),
            keys.generation(),
            keys.sale_name(),
            keys.outcomes(),
            keys.fence_refusals(),
            keys.orders(),
            keys.buyers(),
            keys.segment_count(),
            keys.grants(),
            keys.refusals(),
            keys.stock_of(third),
            keys.fence_of(third),
            keys.lock_of(third),
        ];
        for key in &every {
            assert!(key.starts_with("shop-7:"), "{key} lacks the prefix");
        }
        let unprefixed = Keys::default();
        assert_eq!(every[0], format!("shop-7:{}", unprefixed.stock()));
        assert!(keys
            .every_possible_segment_key()
            .iter()
            .all(|key| key.starts_with("shop-7:")));
    }
}
