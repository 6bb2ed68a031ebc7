//! What every strategy's `build` gets from the config beside its own flags, and the
//! one step several of them share: release notices on the stock Redis.
//!
//! Each strategy reads its own flags (a clap `Args` struct beside its lock, flattened
//! into the config) and builds itself; `crate::wiring` only picks which one.

use std::time::Duration;

use anyhow::Context;

use super::release_notices::ReleaseNotices;
use crate::store::redis_master::{MasterAddress, MasterConnection};

/// The flags every strategy may read, as the config set them.
#[derive(Clone, Debug)]
pub struct Setup {
    /// `--lock-ttl-ms`: the lease of a grant.
    pub ttl: Duration,
    /// The Redis holding the stock (`--redis-url`), and its URL for messages.
    pub stock_redis: MasterAddress,
    pub stock_redis_url: String,
    /// `--release-notices`: whether the locks that poll hear of releases.
    pub release_notices: bool,
    /// `--mysql-url`, for the MySQL locks.
    pub mysql_url: String,
    /// This instance's name (`--instance`).
    pub instance: String,
}

impl Setup {
    /// Release notices on the stock Redis, for the locks whose backend cannot wake a
    /// waiter; `None` when `--release-notices false` leaves them polling.
    pub async fn release_notices(&self) -> anyhow::Result<Option<ReleaseNotices>> {
        if !self.release_notices {
            return Ok(None);
        }
        let board = MasterConnection::connect(&self.stock_redis).await;
        let notices = board.map(ReleaseNotices::announce_on).with_context(|| {
            format!(
                "cannot reach the stock Redis ({}) to announce lock releases on it.\n  Start it with \
                 `make services`, or point --redis-url / SECKILL_REDIS_URL at a running server",
                self.stock_redis_url
            )
        })?;
        Ok(Some(notices))
    }
}
