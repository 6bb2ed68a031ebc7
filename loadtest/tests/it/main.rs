//! The integration tests of `loadtest`: one binary, whose modules follow `src/`. `run`
//! is the crowd of `loadtest` itself against two instances; `history` times the
//! history checker on generated histories; `chaos_table` judges made-up chaos runs;
//! `degrade_under_load` plays `redis-degrade` under a sustained load; `bench::` and
//! `render::` check `make bench`, `make lockbench` and their report. The shared helpers are the `testkit` crate.
//!
//! Run one module with a filter: `cargo test -p loadtest --test it bench::`.

mod run;
mod history;
mod chaos_table;
mod safety_matrix;
mod degrade_under_load;
mod bench {
    mod bound;
    mod sale;
    mod lockbench;
    mod peers;
}
mod render {
    mod report;
}
