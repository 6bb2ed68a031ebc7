//! The sold-out flag: once an instance has seen every segment empty, it answers "sold
//! out" without asking a lock (`--sold-out-flag`).
//!
//! The tail of a flash sale is most of its traffic: thousands of buyers arrive after the
//! last unit went. Without the flag each of them queues for a lock and reads the stock,
//! one segment after another ([`crate::sale::segments`]): N grants to learn what the instance
//! knew already. With it, a buyer costs one read of the sale's name.
//!
//! ## What the instance remembers
//! The segments it saw empty, and the name of the sale they were empty in: a segment
//! read at 0 under its lock, or written to 0 by the sale that took its last unit. Every
//! reset draws the sale a new random name (`stock:sale`). Within one sale units never
//! come back (only a reset puts them there), so a segment once empty stays empty until
//! the next reset. A write committed under a lock that gives no token (`redlock`,
//! `--fencing off`) cannot bring them back either: it commits only in the sale its read
//! saw ([`crate::sale::stock`]), so an old read never becomes a new sale's stock. A name, not the generation counter: a Redis that lost its data counts
//! generations from 1 again, and an old memory of generation 1 would then pass for the
//! new sale's.
//!
//! ## Why it still reads the sale's name
//! A reset through another instance must end the flag at once, or a buyer would hear
//! "sold out" while the new sale has units: a lie. A notice on a Redis channel is not
//! enough: it can arrive after a buyer's request does, and it is lost while the
//! subscription is down. So every buyer first reads `stock:sale` (one `GET`, no lock):
//! the memory counts only while the name matches. What a buyer learns is filed under the
//! name the segment itself showed, in the same read as its stock, not under the name the
//! buyer read before it. On a Redis Cluster a reset renames the sale first and resets each
//! segment after: a segment not reset yet shows the old name, so what a buyer learns there
//! is filed under the old sale, which no later buyer matches.
//!
//! ## Limits
//! - A stock changed by hand in Redis (`redis-cli set stock:segment:0 5`) does not rename
//!   the sale, so the flag does not see it; `POST /stock/reset` does. So the flag is off by
//!   default, and the lessons that edit the stock by hand leave it off.
//! - Under a lock that lets two holders write (`none`, `local`), a late write can put a
//!   unit back into a segment the flag counts empty: the flag is refused there. With
//!   `--fencing off`, a holder whose lease ran out can do the same; the flag then trusts
//!   the lock's lease, as the sale itself does.

use std::sync::Mutex;

use crate::lock::parts::unpoisoned;
use crate::sale::segments::{Segment, Segments};

/// What one instance knows about the empty segments of the current sale.
pub struct SoldOutMemory {
    segments: Segments,
    known: Mutex<KnownEmpty>,
}

/// The segments known empty in one sale, named as its reset named it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownEmpty {
    /// `None`: nothing is known.
    pub sale: Option<String>,
    empty: Vec<bool>,
}

impl KnownEmpty {
    /// No segment known empty yet in `sale`.
    fn nothing_yet(sale: &str, segments: Segments) -> Self {
        KnownEmpty {
            sale: Some(sale.to_owned()),
            empty: vec![false; segments.count() as usize],
        }
    }

    pub fn is_empty(&self, segment: Segment) -> bool {
        self.empty.get(segment.index as usize).copied().unwrap_or(false)
    }
}

impl SoldOutMemory {
    pub fn new(segments: Segments) -> Self {
        SoldOutMemory {
            segments,
            known: Mutex::default(),
        }
    }

    /// What is known about `sale`, the name just read; what was learned about another
    /// sale is forgotten.
    pub fn known_in(&self, sale: &str) -> KnownEmpty {
        let mut known = unpoisoned(&self.known);
        if known.sale.as_deref() != Some(sale) {
            *known = KnownEmpty::nothing_yet(sale, self.segments);
        }
        known.clone()
    }

    /// `segment` was read (or written) empty in the sale named `sale`, the name the
    /// segment showed in that read. What a segment of an older sale showed is filed
    /// under that sale, which the next buyer's name does not match.
    pub fn learn_empty(&self, sale: &str, segment: Segment) {
        let mut known = unpoisoned(&self.known);
        if known.sale.as_deref() != Some(sale) {
            *known = KnownEmpty::nothing_yet(sale, self.segments);
        }
        known.empty[segment.index as usize] = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> (SoldOutMemory, Segment, Segment) {
        let segments = Segments::new(2).unwrap();
        let mut all = segments.all();
        (SoldOutMemory::new(segments), all.next().unwrap(), all.next().unwrap())
    }

    fn empty(known: &KnownEmpty, segments: [Segment; 2]) -> [bool; 2] {
        segments.map(|segment| known.is_empty(segment))
    }

    #[test]
    fn a_segment_seen_empty_stays_empty_for_the_rest_of_its_sale() {
        let (memory, first, second) = two();
        assert_eq!(
            empty(&memory.known_in("a"), [first, second]),
            [false, false],
            "nothing known yet"
        );
        memory.learn_empty("a", first);
        assert_eq!(empty(&memory.known_in("a"), [first, second]), [true, false]);
        memory.learn_empty("a", second);
        assert_eq!(empty(&memory.known_in("a"), [first, second]), [true, true]);
    }

    #[test]
    fn a_sale_of_another_name_forgets_what_was_known() {
        let (memory, first, second) = two();
        memory.learn_empty("a", first);
        memory.learn_empty("a", second);
        assert_eq!(
            empty(&memory.known_in("b"), [first, second]),
            [false, false],
            "a reset put units back"
        );
        assert_eq!(
            empty(&memory.known_in("a"), [first, second]),
            [false, false],
            "the old sale is forgotten"
        );
    }

    #[test]
    fn an_empty_read_of_an_older_sale_never_counts_for_the_newer_one() {
        let (memory, first, second) = two();
        memory.learn_empty("new", first);
        memory.learn_empty("old", second); // read before the reset, learned after it
        assert_eq!(empty(&memory.known_in("new"), [first, second]), [false, false]);
    }
}
