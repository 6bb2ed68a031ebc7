//! MySQL connections a lock keeps from one statement to the next.
//!
//! sqlx's pool pings every connection it takes back (`return_to_pool` in sqlx-core), in
//! case a cancelled statement left something unread on it. That is one more round trip
//! to MySQL for every statement. It is off the caller's path, but not off the server's:
//! on 2026-11-26, by turns with and without this stash, `mysql` sold 1181 and 1085
//! sales/s sustained against 892 and 954, and `mysql-version` 1064 and 1085 against 959
//! and 958 (docs/results/bench.md).
//!
//! So the MySQL locks keep their connections. A statement that got the server's answer
//! (a result, or the server's own error such as a duplicate key) puts its connection
//! back in the lock's stash, without a ping. A statement that failed on the way (a broken
//! connection, a timeout) or was cancelled lets its connection go back to the pool, whose
//! ping then tests it.
//!
//! A kept connection is used again only within [`TRUSTED_WITHOUT_A_PING`] of its last
//! answer, the pool's own rule for skipping the ping before a statement
//! ([`crate::mysql_store`]). Older ones go back to the pool, which pings a connection
//! idle that long before it hands it out.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sqlx::mysql::{MySqlArguments, MySqlConnection, MySqlQueryResult, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::query::{Query, QueryAs};
use sqlx::{FromRow, MySql, MySqlPool};

use super::unpoisoned;
use crate::mysql_store::TRUSTED_WITHOUT_A_PING;

/// A lock's stash of connections, in front of its pool. Clones share the stash.
#[derive(Clone)]
pub struct KeptConnections {
    pool: MySqlPool,
    stash: Arc<Mutex<Vec<Kept>>>,
    /// How many the stash holds at most: half the pool, so that whoever uses the pool
    /// directly (the sweeper, `redis-degrade`'s mode leases) finds connections too. A
    /// sale needs few at once: one attempt per instance asks, behind the local queue.
    /// A pool of one keeps nothing.
    most: usize,
}

/// A connection in the stash, and when its last statement was answered.
struct Kept {
    connection: PoolConnection<MySql>,
    answered: Instant,
}

impl KeptConnections {
    pub fn new(pool: MySqlPool) -> Self {
        let most = pool.options().get_max_connections() as usize / 2;
        KeptConnections {
            pool,
            stash: Arc::default(),
            most,
        }
    }

    /// Runs one statement that returns no rows.
    pub async fn execute(&self, statement: Query<'_, MySql, MySqlArguments>) -> Result<MySqlQueryResult, sqlx::Error> {
        let mut connection = self.take().await?;
        let answer = statement.execute(connection.get()).await;
        connection.answered(answer)
    }

    /// Runs one statement that returns at most one row.
    pub async fn fetch_optional<Row>(
        &self,
        statement: QueryAs<'_, MySql, Row, MySqlArguments>,
    ) -> Result<Option<Row>, sqlx::Error>
    where
        Row: Send + Unpin + for<'row> FromRow<'row, MySqlRow>,
    {
        let mut connection = self.take().await?;
        let answer = statement.fetch_optional(connection.get()).await;
        connection.answered(answer)
    }

    /// The most recently answered kept connection, if it is recent enough; else one from
    /// the pool.
    async fn take(&self) -> Result<InUse, sqlx::Error> {
        if let Some(connection) = self.take_recent() {
            return Ok(InUse::of(connection, self));
        }
        Ok(InUse::of(self.pool.acquire().await?, self))
    }

    fn take_recent(&self) -> Option<PoolConnection<MySql>> {
        let mut stash = unpoisoned(&self.stash);
        let kept = stash.pop()?;
        if kept.answered.elapsed() < TRUSTED_WITHOUT_A_PING {
            return Some(kept.connection);
        }
        // The stash is in the order of use: every other one is older still. All go
        // back to the pool, whose ping tests them.
        stash.clear();
        None
    }

    fn keep(&self, connection: PoolConnection<MySql>) {
        let mut stash = unpoisoned(&self.stash);
        if stash.len() < self.most {
            stash.push(Kept {
                connection,
                answered: Instant::now(),
            });
        } // else it goes back to the pool as it drops
    }
}

/// A connection out of the stash for one statement. Dropped without
/// [`InUse::answered`] (the statement was cancelled), it goes back to the pool.
struct InUse {
    connection: Option<PoolConnection<MySql>>,
    home: KeptConnections,
}

impl InUse {
    fn of(connection: PoolConnection<MySql>, home: &KeptConnections) -> Self {
        InUse {
            connection: Some(connection),
            home: home.clone(),
        }
    }

    fn get(&mut self) -> &mut MySqlConnection {
        self.connection.as_mut().expect("in use until answered")
    }

    /// Keeps the connection if the server answered the statement, even with an error of
    /// its own; any other failure sends it back to the pool, to be tested.
    fn answered<T>(mut self, answer: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        if matches!(answer, Ok(_) | Err(sqlx::Error::Database(_))) {
            if let Some(connection) = self.connection.take() {
                self.home.keep(connection);
            }
        }
        answer
    }
}
