//! # seckill: distributed locks guarding a flash sale
//!
//! A stock of 300 units lives in Redis. Five hundred buyers hit two instances of this
//! service at once. Each request must read the stock, check it, and write it back one
//! lower; a lock decides who goes next. Swap the lock, rerun the load test, and see
//! which strategies oversell.
//!
//! ## Reading order
//! 1. [`sale`]: one sale, start to end: acquire, read, check, write, release, and
//!    what the buyer is told.
//! 2. [`stock`]: the stock in Redis, the fenced read and write that refuse a holder
//!    whose lock is gone, and the atomic script that needs no lock.
//! 3. [`lock`]: the one trait and the guard (the contract a backend meets), then one
//!    file per strategy: [`lock::none`], [`lock::local`], [`lock::redis`],
//!    [`lock::redlock`], [`lock::etcd`], [`lock::zookeeper`], [`lock::mysql`],
//!    [`lock::mysql_version`], and [`lock::degrade`], which composes two of them;
//!    beside them [`lock::keepalive`] (lease renewal), [`lock::reentrant`] (hold
//!    counts), [`lock::permits`] (the semaphore in front of MySQL) and
//!    [`lock::lock_mode`] (the mode `degrade` shares between instances).
//! 4. [`strategy`]: the closed list of strategies and the one `match` that builds them.
//! 5. [`http`]: routes, limits and handlers; [`error`]: how failures become HTTP answers;
//!    [`admin`]: who may reset the sale; [`metrics`]: what `GET /metrics` counts;
//!    [`dashboard`]: the live page at `GET /` and its event stream.
//! 6. The load test lives in the `loadtest/` crate: goose fires the buyers
//!    (`crowd.rs`), the checker reads Redis and judges (`checker.rs`), `database.rs`
//!    counts what a MySQL lock cost, and `report.rs` prints it.
//! 7. Glue: [`config`] (flags and `SECKILL_*` variables), [`redis_store`] and
//!    [`mysql_store`] (connections with useful errors, migrations), [`server`] (start-up and graceful shutdown), [`telemetry`].

pub mod admin;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod http;
pub mod lock;
pub mod metrics;
pub mod mysql_store;
pub mod redis_store;
pub mod sale;
pub mod server;
pub mod stock;
pub mod strategy;
pub mod telemetry;
