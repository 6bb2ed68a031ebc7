//! The setup's MariaDB killed and started again on its data: the lock's table (`mysql`,
//! `mysql-version`, `redis-degrade`'s fallback) or the orders' (lesson 7). While it is
//! down, a lock on it grants nothing and the orders wait in their stream; a grant made
//! before the kill must not outlive it unnoticed.

use std::time::Duration;

use anyhow::bail;
use loadtest::history::Fault;

use crate::lab::Lab;

/// The name the history gives it.
const TARGET: &str = "mariadb";

impl Lab {
    /// Kills the setup's MariaDB, and starts it again after `ms`. It is taken out of the
    /// stage while down and starting, so the lab answers meanwhile; if the setup changed
    /// in the meantime, it is dropped (stopped) instead of put back.
    pub(crate) async fn restart_mariadb(&self, generation: u64, ms: u64) -> anyhow::Result<()> {
        let Some(mut mariadb) = self.take_mariadb(generation).await else {
            // The refusal let the strike through, so the setup has one: it is out already.
            bail!("MariaDB is already down or starting again: wait until it is back");
        };
        mariadb = tokio::task::spawn_blocking(move || {
            mariadb.stop(); // SIGKILL, and reaped
            mariadb
        })
        .await?;
        // From here on MariaDB must come back, whatever happens to the history.
        if let Err(error) = self.record_if_current(generation, Fault::Kill, TARGET, "").await {
            self.say(format!("the history did not take the kill of MariaDB: {error:#}"));
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let restarted = tokio::task::spawn_blocking(move || {
            mariadb.restart(); // waits until its port answers; panics if it does not
            mariadb
        })
        .await
        .map_err(|failed| anyhow::anyhow!(crate::servers::panic_text(failed)))?;
        let mut inner = self.inner.lock().await;
        let Some(stage) = inner.stage.as_mut().filter(|stage| stage.generation == generation) else {
            return Ok(()); // the setup changed: `restarted` is dropped, and stopped
        };
        if let Some(slot) = stage.mariadb_slot() {
            *slot = Some(restarted);
        }
        self.record(&inner, Fault::Start, TARGET, "on its data")
    }

    /// The setup `generation`'s MariaDB, taken out of its servers.
    async fn take_mariadb(&self, generation: u64) -> Option<testkit::PrivateServer> {
        let mut inner = self.inner.lock().await;
        let stage = inner.stage.as_mut().filter(|stage| stage.generation == generation)?;
        stage.mariadb_slot()?.take()
    }
}
