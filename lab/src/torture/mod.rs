//! Faults nobody wrote down: rounds drawn at random from a seed, each a setup of the lab
//! and a schedule of faults over the crowd, each judged by the history's checks. Every
//! fault of `make chaos` is a row someone wrote; the holes the safety reviews found by
//! reading were in combinations no row tried. Jepsen finds its bugs with generators, and
//! so does `make torture`.
//!
//! | file | what |
//! | --- | --- |
//! | [`plan`] | a round drawn from its seed: the setup, the faults and their times |
//! | [`play`] | a round played on the lab, and what its checks said |
//! | [`shrink`] | a failing round made small: fewer faults, fewer buyers, shorter faults |
//! | [`regressions`] | shrunk rounds kept in `lab/regressions/`, played again by `make chaos` |
//! | [`tally`] | the rounds of a run, counted by configuration and by fault |

pub mod plan;
pub mod play;
pub mod shrink;
pub mod regressions;
pub mod tally;
