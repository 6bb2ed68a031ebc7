//! The flash-sale load test, and the benchmark built on it.
//!
//! ## Reading order
//! 1. [`latency`]: the one percentile. Every latency is recorded in an HdrHistogram.
//! 2. [`history`]: what every buyer asked and heard, and every fault, on one clock; and
//!    the checks that judge it (`unique`, `sold-out`, `linearizable`, ...).
//! 3. [`verdict`]: the lesson. The crowd of 500 buyers, the sale read back from Redis
//!    and the checker that judges it, what it cost the database, and the report of one run.
//! 4. [`bench`]: `make bench`. Each strategy measured the same way: the crowd N times,
//!    one serial client and a sustained keep-alive load, against the bound of its
//!    critical path, with the CPU each process used; and `lockbench`, the locks alone.
//! 5. [`render`]: what a reader sees. The verdict as text, the tables, the SVG charts
//!    and the self-contained HTML report, with one escape for all of them.
//! 6. [`chaos`]: the tables of `make chaos` and `make clock-jump`, each run judged from
//!    its history, each row by what it promises.
//!
//! Each module imports only those above it. The binaries are thin: `loadtest` (the
//! verdict), `bench` (measure, then report) and `lockbench`. `make chaos`'s network
//! faults are the nemesis of the `testkit` crate, which the tests share.

pub mod latency;

pub mod history;

pub mod verdict;

pub mod bench;

pub mod render;

pub mod chaos;

pub use verdict::{run, InvalidRun, Options, Report, Verdict};
