//! MySQL connections a lock keeps from one statement to the next.
//!
//! sqlx's pool pings every connection it takes back (`return_to_pool` in sqlx-core), in
//! case a cancelled statement left something unread on it. That is one more round trip
//! to MySQL for every statement. It is off the caller's path, but not off the server's:
//! on 2026-11-26, by turns with and without kept connections, `mysql` sold 1181 and 1085
//! sales/s sustained against 892 and 954, and `mysql-version` 1064 and 1085 against 959
//! and 958 (docs/results/bench.md).
//!
//! So the MySQL locks keep their connections. A statement answered with a result, or
//! with one of the errors a lock expects (a duplicate key, a deadlock victim), keeps its
//! connection for the lock's next statement, without a ping. Another error lets the
//! connection go back to the pool, whose ping tests it: a broken connection, or a server
//! error after which the server may close the connection (it shuts down, or someone
//! killed the connection).
//!
//! A kept connection is used again only within [`TRUSTED_WITHOUT_A_PING`] of its last
//! answer, the pool's own rule for skipping the ping before a statement
//! ([`crate::store::mysql`]). Older ones go back to the pool, whose ping on the way back
//! tests them.
//!
//! Every statement waits for its answer at most one TTL of the lock that sends it. sqlx
//! itself never stops waiting: against a server gone silent (frozen, or cut off by a
//! network that drops packets instead of refusing them) a statement would wait until TCP
//! gives up, about 15 minutes, and the sale would hold its instance's turn at the lock
//! all that time. Waiting longer than a TTL buys nothing: every row a lock writes
//! expires one TTL after `NOW(3)`, the start of the statement that wrote it, so a
//! statement that answers later wrote a row that has already expired. A statement left
//! without an answer closes its connection. It timed out, or its caller stopped waiting
//! (a renewal cut short by its own timeout, say). The pool's ping on the way back would
//! wait on the same silent server for as long as TCP does, and hold a place in the pool
//! meanwhile. The statement itself may still run on the server later, as one whose
//! answer the network lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlArguments, MySqlConnection, MySqlQueryResult, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::query::{Query, QueryAs};
use sqlx::{FromRow, MySql, MySqlPool};

use super::unpoisoned;

use crate::store::mysql::{error_number, ER_DUP_ENTRY, ER_LOCK_DEADLOCK, TRUSTED_WITHOUT_A_PING};

/// Between two tries of [`KeptConnections::execute_until_answered`].
const CLEAN_UP_RETRY_PAUSE: Duration = Duration::from_millis(10);

/// The connections a lock keeps, in front of its pool. Clones share them.
#[derive(Clone)]
pub struct KeptConnections {
    pool: MySqlPool,
    /// In the order they were kept: the last is the most recently answered.
    kept: Arc<Mutex<Vec<Kept>>>,
    /// How many it keeps at most: half the pool, so that whoever uses the pool directly
    /// (the sweeper, `redis-degrade`'s mode leases) finds connections too. A sale needs
    /// few at once: one attempt per instance asks, behind the local queue. A pool of one
    /// keeps nothing. Two locks on one pool could keep all of it; the service gives each
    /// MySQL lock a pool of its own.
    max_kept: usize,
    /// How long a statement waits for its answer: the lock's TTL (see the module notes).
    answer_timeout: Duration,
}

/// A kept connection, and when its last statement was answered.
struct Kept {
    connection: PoolConnection<MySql>,
    answered: Instant,
}

impl KeptConnections {
    /// The connections of a lock whose rows expire `ttl` after they are written.
    pub fn new(pool: MySqlPool, ttl: Duration) -> Self {
        let max_kept = pool.options().get_max_connections() as usize / 2;
        KeptConnections {
            pool,
            kept: Arc::default(),
            max_kept,
            answer_timeout: ttl,
        }
    }

    /// Runs one statement that returns no rows.
    pub async fn execute(&self, statement: Query<'_, MySql, MySqlArguments>) -> Result<MySqlQueryResult, sqlx::Error> {
        let mut connection = self.take().await?;
        match tokio::time::timeout(self.answer_timeout, statement.execute(connection.get())).await {
            Ok(answer) => connection.answered(answer),
            Err(_) => Err(no_answer(self.answer_timeout)), // `connection` closes as it drops
        }
    }

    /// Sends the statement `statement` makes until MySQL answers it, or until `give_up`:
    /// for a clean-up that must reach the server although the error that called for it
    /// (a lost answer, a broken connection) may meet its first try too.
    pub async fn execute_until_answered<'q>(
        &self,
        statement: impl Fn() -> Query<'q, MySql, MySqlArguments>,
        give_up: Instant,
    ) {
        while self.execute(statement()).await.is_err() && Instant::now() < give_up {
            tokio::time::sleep(CLEAN_UP_RETRY_PAUSE).await;
        }
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
        match tokio::time::timeout(self.answer_timeout, statement.fetch_optional(connection.get())).await {
            Ok(answer) => connection.answered(answer),
            Err(_) => Err(no_answer(self.answer_timeout)), // `connection` closes as it drops
        }
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
        let mut kept = unpoisoned(&self.kept);
        let last = kept.pop()?;
        if last.answered.elapsed() < TRUSTED_WITHOUT_A_PING {
            return Some(last.connection);
        }
        // Every other one is older still. All go back to the pool, whose ping tests them.
        kept.clear();
        None
    }

    fn keep(&self, connection: PoolConnection<MySql>) {
        let mut kept = unpoisoned(&self.kept);
        if kept.len() < self.max_kept {
            kept.push(Kept {
                connection,
                answered: Instant::now(),
            });
        } // else it goes back to the pool as it drops
    }
}

/// A connection taken for one statement. Answered, it is kept, or goes back to the
/// pool; dropped without an answer, it closes (see the module notes).
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

    /// Keeps the connection after a result or an error the lock expects; anything else
    /// sends it back to the pool, to be tested.
    fn answered<T>(mut self, answer: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        if let Some(connection) = self.connection.take() {
            if answer.as_ref().map_or_else(leaves_the_connection_usable, |_| true) {
                self.home.keep(connection);
            } // else it goes back to the pool as it drops
        }
        answer
    }
}

impl Drop for InUse {
    /// Still here: its statement got no answer. The socket closes without a word to the
    /// server, and the pool may open another connection in its place.
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            drop(connection.detach());
        }
    }
}

/// The error of a statement MySQL did not answer within `timeout`.
fn no_answer(timeout: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "MySQL did not answer a lock statement within {timeout:?}: is it running and reachable? \
             (`make status` shows the servers; `make services` starts them)"
        ),
    ))
}

/// The server errors a lock expects (the lock table's "held", a deadlock victim), after
/// which the connection is as good as before.
fn leaves_the_connection_usable(error: &sqlx::Error) -> bool {
    matches!(error_number(error), Some(ER_DUP_ENTRY | ER_LOCK_DEADLOCK))
}
