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
//! Each module uses only modules above it in this list, and each folder's files only
//! the files its `mod.rs` lists before them, so the tree reads top down.
//! 1. [`store`]: the connections to Redis and MySQL, which fail with an error naming
//!    the fix, and the MySQL migrations.
//! 2. [`lock`]: the one trait and its guard (the contract a backend meets), then one
//!    file (or folder) per strategy, named as `--lock` names it (the table in [`lock`]
//!    lists them; [`lock::redis_degrade`] composes two of them). The building blocks
//!    they share (lease renewal, reentrancy, the semaphore in front of MySQL) stand
//!    apart in [`lock::parts`].
//! 3. [`strategy`]: the closed list of strategies and what each one promises.
//! 4. [`config`]: flags and `SECKILL_*` variables; a strategy's own flags are declared
//!    beside its lock and flattened in.
//! 5. [`metrics`]: what `GET /metrics` counts, which the sale, the locks and the orders
//!    add to; [`api`]: the HTTP contract, every JSON body the service answers with.
//! 6. [`sale`]: one sale, start to end, and its parts: [`sale::segments`] (the stock
//!    split, each part behind a lock of its own), [`sale::keys`] (every key of a sale,
//!    from one prefix), [`sale::buyers`] (who buys, one unit per buyer), [`sale::stock`]
//!    (the stock in Redis, the fenced read and write, the atomic script),
//!    [`sale::sold_out`] (the flag that answers "sold out" without a lock),
//!    [`sale::grant_log`] (each grant from grant to release, to count overlaps),
//!    [`sale::local_queue`] (the buyers of one instance in line for a lock),
//!    [`sale::error`] (every way a request fails, and the code a buyer reads)
//!    and [`sale::group`] (group commit: one grant sells to every buyer in line).
//! 7. [`orders`]: each unit sold becomes an order, written from the stock's Redis
//!    Stream into MySQL by a consumer group.
//! 8. [`wiring`]: from the config to the lock: it picks the strategy, which builds itself.
//! 9. [`http`]: routes, limits and handlers, with [`http::errors`] (each failure's status
//!    and the one JSON shape of an error), [`http::admin`] (who may reset the
//!    sale) and [`http::dashboard`] (the live page at `GET /` and its event stream).
//! 10. [`server`]: start-up and graceful shutdown; [`telemetry`]: logs.
//!
//! The load test lives in the `loadtest/` crate: it fires the buyers, reads the sale
//! back from Redis, and judges it; `make bench` measures each lock against its bound.

pub mod store;
pub mod lock;
pub mod strategy;
pub mod config;
pub mod metrics;
pub mod api;
pub mod sale;
pub mod orders;
pub mod wiring;
pub mod http;
pub mod server;
pub mod telemetry;
