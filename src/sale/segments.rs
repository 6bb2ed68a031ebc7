//! The stock split into segments, each behind a lock of its own (`--stock-segments N`).
//!
//! Every strategy here puts every sale through one lock key, so a sale can never go
//! faster than one critical path from grant to grant (`make bench` measures it). That
//! key is the **hot key**. Real flash sales split the stock: N keys of units, each with
//! its own lock key, so N holders sell at once, one per segment.
//!
//! ## The keys
//! With one segment (the default) nothing changes: the units are in `stock`, the fence
//! in `stock:fence`, the lock is `lock:stock`. With N > 1, segment `i` keeps its units in
//! `stock:segment:i`, its fence in `stock:fence:i`, and its lock is `lock:stock:i`
//! ([`crate::sale::keys`] names them).
//! `stock` still counts every unit left: the write that sells from a segment takes one
//! from it in the same script, so `stock + lucky` is the initial stock as before.
//! A reset writes the count in `stock:segments`, and every fenced read checks it: an
//! instance started with another `--stock-segments` is refused with a 503 that says so,
//! instead of selling from keys nobody else guards.
//!
//! ## Which segment a buyer takes
//! A buyer starts at a segment picked at random, so the buyers spread over the locks,
//! and tries the others in turn while the one it holds is empty.
//!
//! ## The lie a segment could tell
//! A segment that is empty does not mean the sale is: another may still hold units.
//! So a buyer is told "sold out" only after it read every segment empty, each under
//! that segment's lock. Units never come back (only a reset puts them there), so every
//! segment was empty at the end of that walk: "sold out" is then true. The price is
//! the tail: a sold-out answer costs N lock grants. (A walk that straddles a reset reads
//! two sales; the load test refuses a run with a reset under it.)

use std::fmt;

pub use crate::config::MAX_SEGMENTS;

/// How many segments the stock is split into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments(u32);

/// One segment of a stock split into `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub index: u32,
    pub of: u32,
}

impl Segments {
    /// The stock in one piece: the keys every strategy used before segments.
    pub const ONE: Segments = Segments(1);

    /// `count` segments, from 1 to [`MAX_SEGMENTS`].
    pub fn new(count: u32) -> Result<Self, String> {
        if (1..=MAX_SEGMENTS).contains(&count) {
            Ok(Segments(count))
        } else {
            Err(format!(
                "the stock can be split into 1 to {MAX_SEGMENTS} segments, not {count}"
            ))
        }
    }

    pub fn count(self) -> u32 {
        self.0
    }

    /// The segments the last reset made, from the count it stored
    /// ([`crate::sale::keys::Keys::segment_count`]): the stock in one piece when there is
    /// none, or one no reset could have stored.
    pub fn as_stored(count: Option<u32>) -> Self {
        count
            .and_then(|count| Segments::new(count).ok())
            .unwrap_or(Segments::ONE)
    }

    /// Every segment, in order.
    pub fn all(self) -> impl Iterator<Item = Segment> {
        self.visiting_order(0)
    }

    /// The order a buyer visits the segments in: from `start`, then the next ones,
    /// wrapping around, each once.
    pub fn visiting_order(self, start: u32) -> impl Iterator<Item = Segment> {
        (0..self.0).map(move |step| Segment {
            index: (start + step) % self.0,
            of: self.0,
        })
    }

    /// A buyer's order, from a segment picked at random.
    pub fn random_visiting_order(self) -> impl Iterator<Item = Segment> {
        self.visiting_order(rand::random::<u32>() % self.0)
    }

    /// How `stock` units are shared out: as evenly as they go, the first segments
    /// taking one more when they do not divide.
    pub fn split(self, stock: i64) -> Vec<i64> {
        let count = i64::from(self.0);
        (0..count)
            .map(|index| stock / count + i64::from(index < stock % count))
            .collect()
    }

    /// As many segments as a sale may have.
    pub fn most() -> Self {
        Segments(MAX_SEGMENTS)
    }
}

impl Segment {
    /// The one segment of a stock in one piece.
    pub const WHOLE: Segment = Segment { index: 0, of: 1 };

    /// What a sale or grant record says: nothing for a stock in one piece, so those
    /// records read as they always did.
    pub fn label(self) -> Option<u32> {
        (self.of > 1).then_some(self.index)
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "segment {} of {}", self.index, self.of)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_segment_is_the_whole_stock_and_its_records_name_no_segment() {
        let whole = Segments::ONE.all().next().unwrap();
        assert_eq!(whole, Segment::WHOLE);
        assert_eq!(whole.label(), None);
        assert_eq!(Segments::new(4).unwrap().all().nth(2).unwrap().label(), Some(2));
    }

    #[test]
    fn the_split_shares_every_unit_out_and_evenly() {
        assert_eq!(Segments::new(4).unwrap().split(300), [75, 75, 75, 75]);
        assert_eq!(Segments::new(4).unwrap().split(7), [2, 2, 2, 1]);
        assert_eq!(Segments::new(4).unwrap().split(3), [1, 1, 1, 0]);
        assert_eq!(Segments::ONE.split(300), [300]);
    }

    #[test]
    fn a_buyer_visits_every_segment_once_from_where_it_started() {
        let order: Vec<u32> = Segments::new(4)
            .unwrap()
            .visiting_order(2)
            .map(|segment| segment.index)
            .collect();
        assert_eq!(order, [2, 3, 0, 1]);
    }

    #[test]
    fn a_count_outside_one_to_the_maximum_is_refused() {
        assert!(Segments::new(0).is_err());
        assert!(Segments::new(MAX_SEGMENTS + 1).is_err());
        assert_eq!(Segments::new(MAX_SEGMENTS).unwrap().count(), MAX_SEGMENTS);
    }
}
