//! The sold-out flag: once an instance has seen every segment empty, it answers "sold
//! out" without asking a lock (`--sold-out-flag`).
//!
//! The tail of a flash sale is most of its traffic: thousands of buyers arrive after the
//! last unit went. Without the flag each of them queues for a lock and reads the stock,
//! one segment after another ([`crate::segments`]): N grants to learn what the instance
//! knew already. With it, a buyer costs one read of `stock:generation`.
//!
//! ## What the instance remembers
//! The segments it saw empty, and the generation of the sale they were empty in: a
//! segment read at 0 under its lock, or written to 0 by the sale that took its last unit.
//! Within one generation units never come back (only a reset puts them there, and a reset
//! moves the generation), so a segment once empty stays empty until the next reset.
//!
//! ## Why it still reads the generation
//! A reset through another instance must end the flag at once, or a buyer would hear
//! "sold out" while the new sale has units: a lie. A notice on a Redis channel is not
//! enough: it can arrive after a buyer's request does, and it is lost while the
//! subscription is down. So every buyer the memory could answer first reads
//! `stock:generation` (one `GET`, no lock): the memory counts only while it matches.
//! The knowledge itself is learned under the generation read *before* the segment was:
//! a reset in between makes the memory older than the sale, never newer.
//!
//! ## Limits
//! A stock changed by hand in Redis (`redis-cli set stock:segment:0 5`) does not move the
//! generation, so the flag does not see it; `POST /stock/reset` does. So the flag is off by
//! default, and the lessons that edit the stock by hand leave it off.

use std::sync::Mutex;

use crate::lock::parts::unpoisoned;
use crate::segments::{Segment, Segments};

/// What one instance knows about the empty segments of the current sale.
pub struct SoldOutMemory {
    segments: Segments,
    known: Mutex<Known>,
}

/// The segments seen empty in one generation of the sale.
#[derive(Default)]
struct Known {
    generation: Option<i64>,
    empty: Vec<bool>,
}

impl Known {
    /// No segment known empty yet in `generation`.
    fn nothing_yet(generation: i64, segments: Segments) -> Self {
        Known {
            generation: Some(generation),
            empty: vec![false; segments.count() as usize],
        }
    }
}

impl SoldOutMemory {
    pub fn new(segments: Segments) -> Self {
        SoldOutMemory {
            segments,
            known: Mutex::default(),
        }
    }

    /// Which segments are known empty in `generation`, the one just read; what was
    /// learned in another generation is forgotten.
    pub fn empty_in(&self, generation: i64) -> Vec<bool> {
        let mut known = unpoisoned(&self.known);
        if known.generation != Some(generation) {
            *known = Known::nothing_yet(generation, self.segments);
        }
        known.empty.clone()
    }

    /// `segment` was read (or written) empty, in a sale whose generation was read as
    /// `generation` before that read.
    pub fn learn_empty(&self, generation: i64, segment: Segment) {
        let mut known = unpoisoned(&self.known);
        if known.generation != Some(generation) {
            // A newer generation is known already: this read came from an older sale.
            if known.generation.is_some_and(|newest| newest > generation) {
                return;
            }
            *known = Known::nothing_yet(generation, self.segments);
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

    #[test]
    fn a_segment_seen_empty_stays_empty_for_the_rest_of_its_generation() {
        let (memory, first, second) = two();
        assert_eq!(memory.empty_in(7), [false, false], "nothing known yet");
        memory.learn_empty(7, first);
        assert_eq!(memory.empty_in(7), [true, false]);
        memory.learn_empty(7, second);
        assert_eq!(memory.empty_in(7), [true, true]);
    }

    #[test]
    fn a_new_generation_forgets_what_was_known() {
        let (memory, first, second) = two();
        memory.learn_empty(7, first);
        memory.learn_empty(7, second);
        assert_eq!(memory.empty_in(8), [false, false], "a reset put units back");
        assert_eq!(memory.empty_in(7), [false, false], "and the old sale is forgotten");
    }

    #[test]
    fn an_empty_read_of_an_older_sale_is_not_learned() {
        let (memory, first, second) = two();
        memory.learn_empty(8, first);
        memory.learn_empty(7, second); // read before the reset, learned after it
        assert_eq!(memory.empty_in(8), [true, false]);
    }
}
