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
//!
//! ## On a Redis Cluster
//! A script may touch keys of one hash slot only ([`crate::store::redis_cluster`]). On
//! one Redis the sale's counts are shared by every segment (`lucky`, `sales`, the
//! outcomes...); on a cluster each segment keeps its own, under a hash tag of its own
//! (`{segment:2}:lucky`), so that the scripts that sell from it stay in one slot and
//! the segments spread over the masters. Each segment also keeps a copy of the sale's
//! name and segment count, which its scripts check. The keys of the sale as a whole
//! (its name, generation, initial stock, grants) share the tag `{sale}`. The methods
//! ending in `_of(segment)` name the key a script of that segment touches, on either;
//! [`Keys::groups`] lists where the counts are, for a reader that adds them up.

use crate::sale::segments::{Segment, Segments};
use crate::store::redis_cluster::CLUSTER_SCHEME;

/// The names of every key of one sale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
    /// Whether every segment keeps its own counts under a hash tag (a Redis Cluster).
    on_cluster: bool,
}

impl Keys {
    /// The keys of the sale whose names start with `prefix` (`""`: the default names).
    pub fn with_prefix(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
            on_cluster: false,
        }
    }

    /// The keys of the sale whose stock is at `redis_url`: laid out for a cluster when the
    /// URL names one (`redis-cluster://`).
    pub fn for_stock_at(prefix: &str, redis_url: &str) -> Self {
        Keys::with_prefix(prefix).on_cluster(redis_url.starts_with(CLUSTER_SCHEME))
    }

    /// The same keys, laid out for a Redis Cluster when `on_cluster` (see the module's docs).
    pub fn on_cluster(mut self, on_cluster: bool) -> Self {
        self.on_cluster = on_cluster;
        self
    }

    pub fn is_on_cluster(&self) -> bool {
        self.on_cluster
    }

    /// What every name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn named(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// A key of the sale as a whole: on a cluster, under the tag `{sale}`.
    fn of_the_sale(&self, name: &str) -> String {
        match self.on_cluster {
            false => self.named(name),
            true => self.named(&format!("{{sale}}:{name}")),
        }
    }

    /// A count every segment shares on one Redis (`name`), which each segment keeps under
    /// its own tag on a cluster.
    fn counted_in(&self, segment: Segment, name: &str) -> String {
        match self.on_cluster {
            false => self.named(name),
            true => self.named(&format!("{{segment:{}}}:{name}", segment.index)),
        }
    }

    /// Where the sale's counts are, for a reader that adds them up: the one place on one
    /// Redis ([`Segment::WHOLE`]), each segment on a cluster.
    pub fn groups(&self, segments: Segments) -> Vec<Segment> {
        match self.on_cluster {
            false => vec![Segment::WHOLE],
            true => segments.all().collect(),
        }
    }

    /// Units left, in every segment together (on a cluster, segment 0's: a cluster keeps
    /// no total, see [`Keys::total_stock_of`]).
    pub fn stock(&self) -> String {
        match self.on_cluster {
            false => self.named("stock"),
            true => self.stock_of(Segment::WHOLE),
        }
    }

    /// Buyers who got a unit (on a cluster, from segment 0: see [`Keys::lucky_of`]).
    pub fn lucky(&self) -> String {
        self.lucky_of(Segment::WHOLE)
    }

    /// One JSON sale record per unit sold, in the order they were written.
    pub fn sales(&self) -> String {
        self.sales_of(Segment::WHOLE)
    }

    /// The stock the sale was last reset to, so a checker knows what to compare against.
    pub fn initial_stock(&self) -> String {
        self.of_the_sale("stock:initial")
    }

    /// Grows by one with every reset, so a checker can tell that a sale was reset under it.
    pub fn generation(&self) -> String {
        self.of_the_sale("stock:generation")
    }

    /// A random name every reset gives the sale. Unlike the generation it cannot come back:
    /// a Redis that lost its data counts generations from 1 again, but draws a new name.
    pub fn sale_name(&self) -> String {
        self.of_the_sale("stock:sale")
    }

    /// One outcome (`sold` or `aborted`) per sale id that reached the write.
    pub fn outcomes(&self) -> String {
        self.outcomes_of(Segment::WHOLE)
    }

    /// How many reads and writes the fence refused: a hash `{read, write}`.
    pub fn fence_refusals(&self) -> String {
        self.fence_refusals_of(Segment::WHOLE)
    }

    /// The orders of `--orders` not yet written into MySQL, one entry per unit sold.
    pub fn orders(&self) -> String {
        self.orders_of(Segment::WHOLE)
    }

    /// The buyers who got a unit of this sale (`--one-per-buyer`), a set.
    pub fn buyers(&self) -> String {
        self.buyers_of(Segment::WHOLE)
    }

    /// How many segments the last reset made.
    pub fn segment_count(&self) -> String {
        self.of_the_sale("stock:segments")
    }

    /// One JSON grant record per grant a sale held, appended after its release
    /// ([`crate::sale::grant_log`]).
    pub fn grants(&self) -> String {
        self.of_the_sale("stock:grants")
    }

    /// Buyers turned away, by instance and error code (`seckill-8080 lock_timeout`): a
    /// hash each instance writes after its answer, off the sale's path, for the dashboard.
    pub fn refusals(&self) -> String {
        self.of_the_sale("stock:refusals")
    }

    /// Where the units of `segment` are: `stock` for a stock in one piece.
    pub fn stock_of(&self, segment: Segment) -> String {
        match self.on_cluster {
            false => self.of(segment, "stock", "stock:segment"),
            true => self.counted_in(segment, "stock"),
        }
    }

    /// The fencing high-water mark of `segment`, a hash `{epoch, counter, sale}`.
    pub fn fence_of(&self, segment: Segment) -> String {
        match self.on_cluster {
            false => self.of(segment, "stock:fence", "stock:fence"),
            true => self.counted_in(segment, "stock:fence"),
        }
    }

    /// The key that counts the units left of every segment, which a sale from `segment`
    /// lowers too: `stock`; on a cluster, the segment's own units.
    pub fn total_stock_of(&self, segment: Segment) -> String {
        match self.on_cluster {
            false => self.stock(),
            true => self.stock_of(segment),
        }
    }

    /// The buyers who got a unit from `segment`: [`Keys::lucky`], or the segment's own.
    pub fn lucky_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "lucky")
    }

    /// The sale records of `segment`: [`Keys::sales`], or the segment's own.
    pub fn sales_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "sales")
    }

    /// The outcomes of the writes to `segment`: [`Keys::outcomes`], or the segment's own.
    pub fn outcomes_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "stock:outcomes")
    }

    /// The fence's refusals in `segment`: [`Keys::fence_refusals`], or the segment's own.
    pub fn fence_refusals_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "stock:fence:refusals")
    }

    /// The buyers of `segment` (`--one-per-buyer`): [`Keys::buyers`], or the segment's own.
    pub fn buyers_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "stock:buyers")
    }

    /// The orders stream `segment` appends to: [`Keys::orders`], or the segment's own.
    pub fn orders_of(&self, segment: Segment) -> String {
        self.counted_in(segment, "stock:orders")
    }

    /// The sale's name as `segment`'s scripts check it: [`Keys::sale_name`], or the
    /// segment's copy, which a reset writes with the rest of the segment.
    pub fn sale_name_of(&self, segment: Segment) -> String {
        match self.on_cluster {
            false => self.sale_name(),
            true => self.counted_in(segment, "stock:sale"),
        }
    }

    /// The segment count as `segment`'s scripts check it: [`Keys::segment_count`], or the
    /// segment's copy.
    pub fn segment_count_of(&self, segment: Segment) -> String {
        match self.on_cluster {
            false => self.segment_count(),
            true => self.counted_in(segment, "stock:segments"),
        }
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

    /// Every key of `segment`'s group on a cluster that a reset deletes before it puts
    /// the segment on sale again. Not the orders stream: its entries are orders not yet
    /// written into MySQL, of buyers already told `sold`, and a reset must not lose them.
    pub fn every_key_a_reset_deletes(&self, segment: Segment) -> Vec<String> {
        vec![
            self.stock_of(segment),
            self.fence_of(segment),
            self.lucky_of(segment),
            self.sales_of(segment),
            self.outcomes_of(segment),
            self.fence_refusals_of(segment),
            self.buyers_of(segment),
            self.sale_name_of(segment),
            self.segment_count_of(segment),
        ]
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
    fn on_a_cluster_each_segment_keeps_its_keys_in_one_slot_of_its_own() {
        use crate::store::redis_cluster::slot_of;
        let keys = Keys::with_prefix("shop-7:").on_cluster(true);
        let segments = Segments::new(4).unwrap();
        let mut slots = Vec::new();
        for segment in keys.groups(segments) {
            let mut every = keys.every_key_a_reset_deletes(segment);
            every.push(keys.orders_of(segment));
            assert!(every.iter().all(|key| key.starts_with("shop-7:")), "{every:?}");
            let slot = slot_of(&every[0]);
            assert!(every.iter().all(|key| slot_of(key) == slot), "{every:?}");
            slots.push(slot);
        }
        slots.dedup();
        assert_eq!(slots.len(), 4, "four segments, four slots");
        let whole = [
            keys.generation(),
            keys.sale_name(),
            keys.initial_stock(),
            keys.grants(),
            keys.refusals(),
        ];
        assert!(whole.iter().all(|key| slot_of(key) == slot_of(&whole[0])), "{whole:?}");
    }

    #[test]
    fn on_one_redis_every_segment_shares_the_counts() {
        let keys = Keys::default();
        let third = Segments::new(4).unwrap().all().nth(2).unwrap();
        assert_eq!(
            [
                keys.lucky_of(third),
                keys.sales_of(third),
                keys.total_stock_of(third),
                keys.sale_name_of(third)
            ],
            ["lucky", "sales", "stock", "stock:sale"]
        );
        assert_eq!(keys.groups(Segments::new(4).unwrap()), [Segment::WHOLE]);
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
