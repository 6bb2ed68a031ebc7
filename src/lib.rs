//! # seckill: distributed locks guarding a flash sale
//!
//! A stock of 300 units lives in Redis. Five hundred buyers hit two instances of this
//! service at once. Each request must read the stock, check it, and write it back one
//! lower; a lock decides who goes next. Swap the lock, rerun the load test, and see
//! which strategies oversell.
//!
//! If you read one file, read [`sale`]: one sale, start to end.
//!
//! ## Reading order
//! Each module uses only modules above it in this list, so the tree reads top down.
//! 1. [`redis_store`] and [`mysql_store`]: connections that fail with an error naming
//!    the fix, and the MySQL migrations.
//! 2. [`lock`]: the one trait and its guard (the contract a backend meets), then one
//!    file per strategy, named as `--lock` names it: [`lock::none`], [`lock::local`],
//!    [`lock::redis`], [`lock::redlock`], [`lock::etcd`], [`lock::zookeeper`],
//!    [`lock::mysql`], [`lock::mysql_version`] and [`lock::redis_degrade`], which
//!    composes two of them. The building blocks they share (lease renewal,
//!    reentrancy, the semaphore in front of MySQL) stand apart in [`lock::parts`].
//! 3. [`strategy`]: the closed list of strategies and what each one promises.
//! 4. [`config`]: flags and `SECKILL_*` variables.
//! 5. [`segments`]: the stock split into segments, each behind a lock of its own;
//!    [`buyers`]: who buys, and one unit per buyer;
//!    [`stock`]: the stock in Redis, the fenced read and write that refuse a holder
//!    whose lock is gone, and the atomic script that needs no lock; [`grant_log`]: each
//!    grant a sale held, from grant to release, to count holders that overlapped;
//!    [`sold_out`]: the flag that answers "sold out" without a lock once every segment
//!    is known empty.
//! 6. [`metrics`]: what `GET /metrics` counts; [`orders`]: each unit sold becomes an
//!    order, written from the stock's Redis Stream into MySQL by a consumer group;
//!    [`error`]: how failures become HTTP answers.
//! 7. [`local_queue`]: the buyers of one instance in line for a lock, and the release
//!    that hands the lock to the next of them; [`sale`]: one sale, start to end: the
//!    local queue, acquire, read, check, write, release, and what the buyer is told.
//! 8. [`wiring`]: from the config to the lock, the one place that builds every strategy.
//! 9. [`dashboard`]: the live page at `GET /` and its event stream; [`admin`]: who may
//!    reset the sale; [`http`]: routes, limits and handlers.
//! 10. [`server`]: start-up and graceful shutdown; [`telemetry`]: logs.
//!
//! The load test lives in the `loadtest/` crate: it fires the buyers, reads the sale
//! back from Redis, and judges it; `make bench` measures each lock against its bound.

pub mod redis_store;
pub mod mysql_store;
pub mod lock;
pub mod strategy;
pub mod config;
pub mod segments;
pub mod buyers;
pub mod stock;
pub mod sold_out;
pub mod grant_log;
pub mod metrics;
pub mod orders;
pub mod error;
pub mod local_queue;
pub mod sale;
pub mod wiring;
pub mod dashboard;
pub mod admin;
pub mod http;
pub mod server;
pub mod telemetry;
