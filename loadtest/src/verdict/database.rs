//! What a database lock cost per sale: the original articles' "MySQL cannot hold under high
//! concurrency", measured.
//!
//! Two sources, read before and after the attack:
//! - **the MySQL server's own counters** (`SHOW GLOBAL STATUS`): every `SELECT`,
//!   `INSERT`, `UPDATE` and `DELETE` it ran, from every client (both instances, their
//!   renewals and sweepers; and anyone else using that server at the time);
//! - **each instance's lock counters** from `/healthz`: acquire attempts, grants,
//!   version conflicts, and the most attempts its semaphore let through at once.
//!
//! Divided by the units sold, they say what one sale cost the database.

use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use seckill::lock::redis_degrade::{self, DegradeStats};
use seckill::lock::LockStats;

/// The statements the server counts, by command.
const STATEMENT_COUNTERS: &str = "SHOW GLOBAL STATUS WHERE Variable_name IN \
     ('Com_select', 'Com_insert', 'Com_update', 'Com_delete')";

/// The strategies whose cost is counted here.
pub fn is_database_lock(strategy: &str) -> bool {
    matches!(strategy, "mysql" | "mysql-version" | "redis-degrade")
}

/// DML statements the MySQL server has run since it started.
pub async fn server_statements(mysql_url: &str) -> anyhow::Result<u64> {
    let connect = sqlx::MySqlConnection::connect(mysql_url);
    let mut connection = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .context("timed out")?
        .context("cannot connect")?;
    let counters: Vec<(String, String)> = sqlx::query_as(STATEMENT_COUNTERS).fetch_all(&mut connection).await?;
    let mut total = 0;
    for (name, value) in counters {
        total += value
            .parse::<u64>()
            .with_context(|| format!("{name} is not a number: {value}"))?;
    }
    connection.close().await.ok();
    Ok(total)
}

/// Every instance's lock counters, in host order; `None` for a strategy that keeps none.
pub async fn lock_stats(http: &reqwest::Client, hosts: &[String]) -> anyhow::Result<Option<Vec<LockStats>>> {
    let mut all = Vec::new();
    for host in hosts {
        let health: seckill::api::Health = http
            .get(format!("{host}/healthz"))
            .send()
            .await
            .and_then(|response| response.error_for_status())
            .with_context(|| format!("{host}/healthz"))?
            .json()
            .await
            .with_context(|| format!("{host}/healthz did not answer like seckill"))?;
        match health.lock_stats {
            Some(stats) => all.push(stats),
            None => return Ok(None),
        }
    }
    Ok(Some(all))
}

/// The counters at one moment.
pub struct Snapshot {
    lock_stats: Option<Vec<LockStats>>,
    statements: Result<u64, String>,
}

/// Reads both sources now. The server's counters may be out of reach (another
/// machine, no rights): then the report says so, and the rest is still measured.
pub async fn snapshot(hosts: &[String], mysql_url: &str) -> anyhow::Result<Snapshot> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let lock_stats = lock_stats(&http, hosts).await?;
    let statements = server_statements(mysql_url)
        .await
        .map_err(|error| format!("{}: {error:#}", seckill::store::mysql::without_password(mysql_url)));
    Ok(Snapshot { lock_stats, statements })
}

/// What the attack cost the database, both instances together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DatabaseCost {
    /// Statements the server ran during the attack; `None` if it could not be asked.
    pub statements: Option<u64>,
    pub attempts: u64,
    pub grants: u64,
    pub conflicts: u64,
    /// Each instance's semaphore; `None`: `--mysql-permits 0`, no semaphore.
    pub permits: Option<usize>,
    /// The most attempts one instance had talking to MySQL at once.
    pub peak_in_flight: usize,
    /// Units sold during the attack, the divisor of every "per sale".
    pub units_sold: i64,
    /// Why `statements` is missing, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statements_unmeasured: Option<String>,
    /// `redis-degrade`: each instance's mode, switches and time in each mode at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degrade: Vec<DegradeStats>,
}

impl DatabaseCost {
    /// From two snapshots; `None` when the instances keep no lock counters.
    pub fn from_snapshots(before: &Snapshot, after: &Snapshot, units_sold: i64) -> Option<Self> {
        let (Some(stats_before), Some(stats_after)) = (&before.lock_stats, &after.lock_stats) else {
            return None;
        };
        let statements = match (&before.statements, &after.statements) {
            (Ok(before), Ok(after)) => Ok((*before, *after)),
            (Err(error), _) | (_, Err(error)) => Err(error.clone()),
        };
        let mut cost = DatabaseCost::between(stats_before, stats_after, statements.as_ref().ok().copied(), units_sold);
        cost.statements_unmeasured = statements
            .err()
            .map(|error| format!("cannot read MySQL's counters at {error}"));
        Some(cost)
    }

    /// From the counters before and after the attack.
    pub fn between(before: &[LockStats], after: &[LockStats], statements: Option<(u64, u64)>, units_sold: i64) -> Self {
        let mut cost = DatabaseCost {
            statements: statements.map(|(before, after)| after.saturating_sub(before)),
            units_sold,
            ..DatabaseCost::default()
        };
        for (before, after) in before.iter().zip(after) {
            let (then, now) = (&before.counters, &after.counters);
            cost.attempts += now.attempts.saturating_sub(then.attempts);
            cost.grants += now.grants.saturating_sub(then.grants);
            cost.conflicts += now.conflicts.saturating_sub(then.conflicts);
            cost.permits = now.permits.permits;
            cost.peak_in_flight = cost.peak_in_flight.max(now.permits.peak_in_flight);
            cost.degrade
                .extend(after.own_part::<DegradeStats>(redis_degrade::STATS_KEY));
        }
        cost
    }

    fn per_sale(&self, count: u64) -> Option<f64> {
        (self.units_sold > 0).then(|| count as f64 / self.units_sold as f64)
    }

    pub fn statements_per_sale(&self) -> Option<f64> {
        self.per_sale(self.statements?)
    }

    pub fn conflicts_per_sale(&self) -> Option<f64> {
        self.per_sale(self.conflicts)
    }

    pub fn attempts_per_sale(&self) -> Option<f64> {
        self.per_sale(self.attempts)
    }

    /// The semaphore, as a reader should see it.
    pub fn semaphore_label(&self) -> String {
        match self.permits {
            Some(permits) => format!("{permits} permits per instance"),
            None => "none (--mysql-permits 0)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill::lock::{LockCounters, PermitStats};

    fn stats(attempts: u64, grants: u64, conflicts: u64, peak: usize) -> LockStats {
        let permits = PermitStats {
            permits: Some(10),
            peak_in_flight: peak,
        };
        let counters = LockCounters {
            attempts,
            grants,
            conflicts,
            permits,
        };
        LockStats::new(counters, None)
    }

    #[test]
    fn the_cost_is_the_difference_summed_over_instances_divided_by_units_sold() {
        let before = [stats(100, 10, 5, 10), stats(50, 5, 0, 7)];
        let after = [stats(400, 160, 65, 10), stats(350, 155, 60, 9)];
        let cost = DatabaseCost::between(&before, &after, Some((1000, 4000)), 300);
        assert_eq!((cost.attempts, cost.grants, cost.conflicts), (600, 300, 120));
        assert_eq!(cost.statements_per_sale(), Some(10.0));
        assert_eq!(cost.conflicts_per_sale(), Some(0.4));
        assert_eq!((cost.permits, cost.peak_in_flight), (Some(10), 10));
        assert_eq!(
            DatabaseCost::between(&before, &after, None, 0).statements_per_sale(),
            None
        );
    }
}
