//! # seckill: distributed locks guarding a flash sale
//!
//! A stock of 300 units lives in Redis. Five hundred buyers hit two instances of this
//! service at once. Each request must read the stock, check it, and write it back one
//! lower; a lock decides who goes next. Swap the lock, rerun the load test, and see
//! which strategies oversell.
//!
//! ## Reading order
//! 1. [`stock`]: the sale itself, the read-check-write that needs a lock, and the
//!    atomic script that needs none.
//! 2. [`lock`]: the one trait, then one file per strategy:
//!    [`lock::none`], [`lock::local`], [`lock::redis`]; and [`lock::keepalive`], the
//!    renewal that keeps a live holder's lease from expiring.
//! 3. [`http`]: routes and handlers; [`error`]: how failures become HTTP answers.
//! 4. The load test lives in the `loadtest/` crate: goose fires the buyers, and its
//!    checker reads Redis to decide whether the sale oversold.
//! 5. Glue: [`config`] (flags and `SECKILL_*` variables), [`redis_store`] (connections
//!    with useful errors), [`server`] (start-up and graceful shutdown), [`telemetry`].

pub mod config;
pub mod error;
pub mod http;
pub mod lock;
pub mod redis_store;
pub mod server;
pub mod stock;
pub mod telemetry;
