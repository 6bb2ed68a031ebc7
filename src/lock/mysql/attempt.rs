//! Steps 1 to 4: one attempt. It waits for a permit, then inserts the row; after a refused
//! insert it re-enters its own row or takes over an expired one. A grant answered after the
//! acquire's deadline is given back.

use std::time::Instant;

use super::grants::{is_deadlock, Granted, Grants, RowGrant};
use super::statements::{DELETE_EXPIRED, DELETE_LAST_HOLD, INSERT_ROW, READ_HOLDER, REENTER, RELEASE_ONE_HOLD};
use super::{backend_error, MySqlLock};
use crate::lock::parts::permits::Turn;
use crate::lock::polling::answer_by;
use crate::lock::{LockError, LockGuard, Owner};
use crate::store::mysql::micros;

impl MySqlLock {
    /// One attempt. With a `deadline` (an acquire's, step 4), the wait for a permit ends
    /// there, and so does the wait for MySQL's answer. The statements go on in their
    /// own task, and a grant answered after the deadline is given back.
    pub(super) async fn attempt(
        &self,
        key: &str,
        owner: &Owner,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let pass = match self.permits.enter_by(deadline).await {
            Turn::Pass(pass) => pass,
            // Our turn did not come in time: as for a held row, the poll times out.
            Turn::Late => return Err(LockError::Busy { key: key.to_owned() }),
            Turn::Closed => return Err(self.shut_down.refusal()),
        };
        let sent = Instant::now();
        self.grants.counters.attempt();
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let granting = async move {
            let granted = grants.grant_row(&name, &owned).await;
            drop(pass); // the permit is held as long as the statements run
            granted
        };
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let undo = move |late| grants.give_back_late(&name, &owned, late);
        // No answer by the deadline: as for a held row, the poll times out.
        let granted = answer_by(deadline, granting, undo).await.unwrap_or(Ok(None));
        let Some((granted, row)) = granted.map_err(backend_error)? else {
            return Err(LockError::Busy { key: key.to_owned() });
        };
        Ok(self.grants.guard(key, owner, row, granted, sent))
    }
}

impl Grants {
    /// Steps 1 to 3: `None` if someone else holds `name`.
    ///
    /// InnoDB may pick this transaction as a deadlock victim when several buyers insert
    /// the same name while its holder deletes it (a known pattern of duplicate-key
    /// checks); the server has rolled it back by then, and it counts as "held": the
    /// caller backs off and tries again.
    async fn grant_row(&self, name: &str, owner: &Owner) -> Result<Option<(Granted, RowGrant)>, sqlx::Error> {
        match self.try_grant_row(name, owner).await {
            Err(error) if is_deadlock(&error) => Ok(None),
            granted_or_failed => granted_or_failed,
        }
    }

    /// A refused attempt costs two statements (the insert, and a read of who holds the row and until when);
    /// only a re-entry or a take-over writes again. Each statement commits on its own: under InnoDB's
    /// default isolation an `UPDATE` keeps the rows it scanned locked until its transaction ends, and a
    /// crowd of waiters in open transactions would stall the holder.
    async fn try_grant_row(&self, name: &str, owner: &Owner) -> Result<Option<(Granted, RowGrant)>, sqlx::Error> {
        // Each statement runs on its own (autocommit), so a waiter's attempt holds row
        // locks only for one statement, never across the next: waiters cannot queue up
        // behind each other on the holder's row.
        if let Some(grant_id) = self.insert_row(name, owner).await? {
            return Ok(Some((Granted::Fresh, RowGrant::inserted(grant_id))));
        }
        // Held: one read says by whom and until when, so that a refused attempt costs a
        // write and a read, and only the rare re-entry or take-over writes again.
        let holder: Option<(String, i64, u64, u64)> = self
            .connections
            .fetch_optional(sqlx::query_as(READ_HOLDER).bind(name))
            .await?;
        match holder {
            Some((holder, expired, grant_id, hand_overs)) if holder == owner.as_str() && expired == 0 => {
                let reentered = self
                    .connections
                    .execute(sqlx::query(REENTER).bind(name).bind(owner.as_str()))
                    .await?;
                let row = RowGrant { grant_id, hand_overs };
                Ok((reentered.rows_affected() == 1).then_some((Granted::Reentered, row)))
            }
            Some((_, expired, _, _)) if expired != 0 => {
                self.connections.execute(sqlx::query(DELETE_EXPIRED).bind(name)).await?;
                // Another taker may insert first; then its row is the grant, and ours is "held".
                let inserted = self.insert_row(name, owner).await?;
                Ok(inserted.map(|grant_id| (Granted::Fresh, RowGrant::inserted(grant_id))))
            }
            Some(_) => Ok(None), // held, and alive
            None => Ok(None),    // released since our insert: the next attempt finds it free
        }
    }

    /// Step 1: the row's id if the insert made it ours, `None` on a duplicate key. The primary key on
    /// `name` does the locking: a second insert for a held name fails with a duplicate-key error, which
    /// means "held". The row's `grant_id` is AUTO_INCREMENT, and that id is the fencing token (step 5).
    async fn insert_row(&self, name: &str, owner: &Owner) -> Result<Option<u64>, sqlx::Error> {
        let inserted = self
            .connections
            .execute(
                sqlx::query(INSERT_ROW)
                    .bind(name)
                    .bind(owner.as_str())
                    .bind(micros(self.options.ttl)),
            )
            .await;
        match inserted {
            Ok(inserted) => Ok(Some(inserted.last_insert_id())),
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Step 4: an attempt answered after its acquire's deadline granted nothing to
    /// anyone, so what it did goes back: the new row, or the extra hold.
    fn give_back_late(&self, name: &str, owner: &Owner, late: Result<Option<(Granted, RowGrant)>, sqlx::Error>) {
        let Ok(Some((granted, row))) = late else { return };
        let statement = match granted {
            Granted::Fresh => DELETE_LAST_HOLD,
            Granted::Reentered => RELEASE_ONE_HOLD,
        };
        let (grants, name, owner) = (self.clone(), name.to_owned(), owner.as_str().to_owned());
        let give_up = Instant::now() + self.options.ttl;
        tracing::info!(
            name,
            "a grant was answered after its acquire's deadline: giving it back"
        );
        tokio::spawn(async move {
            let give_back = || sqlx::query(statement).bind(&name).bind(&owner).bind(row.grant_id);
            grants.connections.execute_until_answered(give_back, give_up).await;
            if let (Granted::Fresh, Some(notices)) = (granted, &grants.notices) {
                notices.announce(&name);
            }
        });
    }
}
