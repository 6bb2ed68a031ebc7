//! Steps 1, 5 and 7: making a grant. The acquire script, the epoch a new lock Redis or a new master
//! begins, the replica wait, and the clean-up of an acquire that failed. Apart from the lock because an
//! attempt runs it in a task of its own, with a copy of [`Grants`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use super::{NotReplicated, RedisLock, RedisLockOptions, Scripts, BACKEND};
use crate::lock::parts::release_notices::RELEASE_CHANNEL;
use crate::lock::parts::unpoisoned;
use crate::lock::LockError;
use crate::store::redis_master::{may_mean_the_master_moved, MasterConnection, ReplicaWait};

/// Between two tries of a failed acquire's clean-up.
const CLEANUP_RETRY: Duration = Duration::from_millis(100);
/// A failed acquire's clean-up gives up after this many TTLs of Redis not answering.
pub(super) const CLEANUP_TTLS: u32 = 20;

/// What making a grant needs. An attempt takes a copy into a task of its own (step 4),
/// where it may outlive its waiter; copies share the connections.
#[derive(Clone)]
pub(super) struct Grants {
    pub(super) connection: MasterConnection,
    /// Where grants and renewals go. With `wait_for_replicas`, a connection of their
    /// own: `WAIT` blocks the connection it is sent on, and releases must not wait behind it.
    pub(super) granting: MasterConnection,
    /// Where a new epoch comes from (step 1): the Redis of the stock's fence.
    pub(super) epochs: MasterConnection,
    pub(super) options: RedisLockOptions,
    pub(super) scripts: Arc<Scripts>,
    /// Per key, the epochs this handle began (step 1).
    pub(super) epochs_begun: Arc<StdMutex<HashMap<String, Arc<EpochsBegun>>>>,
}

/// What Redis granted: the fencing token's parts, and when the request was sent (the
/// lease counts from there).
pub(super) struct Granted {
    pub(super) epoch: u64,
    pub(super) counter: u64,
    pub(super) sent: Instant,
}

/// The epochs one handle began for one key (step 1). A crowd of waiters who all find
/// the epoch missing (the lock Redis restarted, or degrading came back to it) take
/// turns to begin one, and the ones after the first see that it began and use it: one
/// new epoch per instance, not one per waiter (133 in 40 ms, before).
#[derive(Default)]
pub(super) struct EpochsBegun {
    /// How many this handle began.
    count: AtomicU64,
    /// The master (counted in the connection's moves) where it began the last one:
    /// behind Sentinels, one on the first master, and one more after every move.
    on_master: StdMutex<Option<u64>>,
    /// One beginning at a time.
    turn: tokio::sync::Mutex<()>,
}

impl EpochsBegun {
    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

impl Grants {
    /// Steps 1 and 7: the acquire script (after a new epoch, when one is due), then the
    /// replica wait. [`LockError::Busy`] when the key is taken.
    pub(super) async fn grant(&self, key: &str, token: String) -> Result<Granted, LockError> {
        let begun = self.epochs_begun(key);
        let seen = begun.count();
        if self.on_a_new_master(&begun) {
            self.begin_epoch(key, &begun, seen)
                .await
                .map_err(|error| self.failed(key, error))?;
        }
        let seen = begun.count();
        let mut sent = Instant::now();
        // Where the grant goes: a WAIT after a move would go elsewhere (step 7).
        let mut moves_before = self.granting.moves();
        let mut answer = self.run_acquire_script(key, &token).await;
        if let Ok((-1, _)) = answer {
            self.begin_epoch(key, &begun, seen)
                .await
                .map_err(|error| self.failed(key, error))?;
            sent = Instant::now();
            moves_before = self.granting.moves();
            answer = self.run_acquire_script(key, &token).await;
        }
        let (epoch, counter) = match answer {
            Ok((epoch, counter)) if epoch >= 0 => (epoch as u64, counter),
            Ok(_) => return Err(LockError::Busy { key: key.to_owned() }), // the epoch vanished again: retry later
            Err(error) => {
                self.clean_up_failed_acquire(key, token);
                return Err(self.failed(key, error));
            }
        };
        if counter == 0 {
            return Err(LockError::Busy { key: key.to_owned() });
        }
        // Step 7: a grant that no replica has yet would not survive a failover.
        let wait = self.options.wait_for_replicas;
        if let Err(error) = wait_for_replicas(&mut self.granting.clone(), wait, moves_before, "grant").await {
            self.clean_up_failed_acquire(key, token);
            return Err(error);
        }
        Ok(Granted { epoch, counter, sent })
    }

    /// The acquire script: `(epoch, counter)`, the counter 0 when the key is taken.
    async fn run_acquire_script(&self, key: &str, token: &str) -> redis::RedisResult<(i64, u64)> {
        self.scripts
            .acquire
            .key(key)
            .key(RedisLock::fencing_key(key))
            .key(RedisLock::epoch_key(key))
            .arg(token)
            .arg(self.options.ttl.as_millis() as u64)
            .invoke_async(&mut self.granting.clone())
            .await
    }

    /// Step 1: the lock Redis has no epoch for `key`'s counter (it is new, or it restarted empty), or it is
    /// a promoted replica whose counter may lag. The token is `(epoch, counter)`, and the epoch is the life
    /// of that counter. A lock Redis that restarts empty counts from 1 again while the stock still
    /// remembers token N, and would refuse every holder until the counter passed N. So the counter lives
    /// beside its epoch (`lock:stock:fence:epoch`), and the acquire script grants nothing while the epoch
    /// is missing. The lock then takes the next epoch from where the stock's fence lives:
    /// `INCR lock:stock:fence:epochs` on the stock Redis, which forgets that count only together with the
    /// fence's marks. It stores it (the first instance to do so wins, as the stored epoch only grows) and
    /// tries again. Every token of the new server outranks every token of the old one.
    ///
    /// `seen` is how many epochs this handle had begun when the caller found the epoch
    /// missing: if another waiter began one since, the caller uses that one.
    async fn begin_epoch(&self, key: &str, begun: &EpochsBegun, seen: u64) -> redis::RedisResult<()> {
        let _turn = begun.turn.lock().await;
        if begun.count() != seen && !self.on_a_new_master(begun) {
            return Ok(());
        }
        // Used once in a server's life, this connection may still hold a socket that broke
        // since (the very restart we are here for): one failure of that kind earns a retry.
        let mut epochs = self.epochs.clone();
        let mut next_epoch = redis::cmd("INCR");
        next_epoch.arg(format!("{key}:fence:epochs"));
        let epoch: u64 = match next_epoch.query_async(&mut epochs).await {
            Err(error) if error.is_connection_dropped() || error.is_io_error() => {
                next_epoch.query_async(&mut epochs).await
            }
            answered => answered,
        }?;
        let master = self.granting.moves();
        let stored: i64 = self
            .scripts
            .store_epoch
            .key(RedisLock::epoch_key(key))
            .arg(epoch)
            .invoke_async(&mut self.granting.clone())
            .await?;
        if stored == 1 {
            tracing::info!(
                key,
                epoch,
                "a new fencing epoch begins (a new lock Redis, or a new master)"
            );
        }
        *unpoisoned(&begun.on_master) = Some(master);
        begun.count.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn epochs_begun(&self, key: &str) -> Arc<EpochsBegun> {
        unpoisoned(&self.epochs_begun)
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// What a failed exchange with the lock Redis means for a waiter. A Redis that
    /// restarted answers LOADING while it replays its append-only file, and the server
    /// will answer soon; while the Sentinels move the master, the connection follows it
    /// (see `crate::store::redis_master`). In both cases the waiter waits, as for a held lock,
    /// until its timeout, rather than every waiter failing at once. Any other failure
    /// is the backend's.
    fn failed(&self, key: &str, error: redis::RedisError) -> LockError {
        let loading = error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading);
        let moving = self.granting.follows_sentinels() && may_mean_the_master_moved(&error);
        if loading || moving {
            tracing::debug!(key, %error, "the lock Redis will answer soon; the waiter tries again");
            return LockError::Busy { key: key.to_owned() };
        }
        LockError::backend(BACKEND, error)
    }

    /// Whether, behind Sentinels, this handle has not yet begun `key`'s epoch on the master of the moment
    /// (step 1). Its first master counts too: a handle that starts after a failover cannot tell whether
    /// that master is a promoted replica whose counter lags the old master's. That costs two round trips
    /// per key and master, not per grant.
    fn on_a_new_master(&self, begun: &EpochsBegun) -> bool {
        self.granting.follows_sentinels() && *unpoisoned(&begun.on_master) != Some(self.granting.moves())
    }

    /// Step 5: the acquire call failed on our side, but Redis may still have granted (or may still grant)
    /// it. When the call times out or its connection breaks, Redis may still run the `SET NX` later (after
    /// a freeze, say), leaving a key nobody will release until its lease ends. A grant answered after its
    /// acquire's deadline (step 4) is such a key too: its buyer has given up. So the lock keeps sending the
    /// owner-checked release with the same token until Redis answers again, as the Redlock spec asks for
    /// every node that may have granted.
    fn clean_up_failed_acquire(&self, key: &str, token: String) {
        clean_up(
            &self.connection,
            &self.scripts,
            key,
            token,
            self.options.ttl * CLEANUP_TTLS,
        );
    }

    /// Step 5: a grant answered after its acquire's deadline went to nobody who waits
    /// for it, so the key goes back, with a notice to the waiters.
    /// A late error has cleaned up after itself already.
    pub(super) fn give_back_late(&self, key: &str, token: &str, late: Result<Granted, LockError>) {
        if late.is_ok() {
            tracing::info!(key, "a grant was answered after its acquire's deadline: giving it back");
            self.clean_up_failed_acquire(key, token.to_owned());
        }
    }
}

/// Sends the owner-checked release of `token` until Redis answers, for at most
/// `for_at_most`: a request whose answer was lost may have given `token` the key
/// (steps 5 and 8).
pub(super) fn clean_up(
    connection: &MasterConnection,
    scripts: &Arc<Scripts>,
    key: &str,
    token: String,
    for_at_most: Duration,
) {
    let (mut connection, scripts) = (connection.clone(), scripts.clone());
    let key = key.to_owned();
    let give_up = Instant::now() + for_at_most;
    tokio::spawn(async move {
        while Instant::now() < give_up {
            let answer: redis::RedisResult<i64> = scripts
                .release
                .key(&key)
                .arg(&token)
                .arg(RELEASE_CHANNEL)
                .invoke_async(&mut connection)
                .await;
            match answer {
                Ok(1) => return tracing::info!(key, "removed a key whose grant was never answered"),
                Ok(_) => return,
                Err(_) => tokio::time::sleep(CLEANUP_RETRY).await,
            }
        }
    });
}

/// Step 7: `WAIT` until `wait.replicas` replicas have every write sent so far on `connection`, the grant or
/// renewal among them; an error when fewer did in time, or when the connection moved to another master
/// since the write (`moves_before`). A `WAIT` sent after the connection followed the Sentinels elsewhere
/// would count another server's replicas, so it then counts as none ([`ReplicaWait::acknowledged_since`]).
pub(super) async fn wait_for_replicas(
    connection: &mut MasterConnection,
    wait: Option<ReplicaWait>,
    moves_before: u64,
    what: &'static str,
) -> Result<(), LockError> {
    let Some(wait) = wait else { return Ok(()) };
    let acknowledged = wait
        .acknowledged_since(connection, moves_before)
        .await
        .map_err(|e| LockError::backend(BACKEND, e))?;
    if acknowledged < wait.replicas {
        return Err(LockError::backend(
            BACKEND,
            NotReplicated {
                what,
                acknowledged,
                wanted: wait.replicas,
                timeout: wait.timeout,
            },
        ));
    }
    Ok(())
}
