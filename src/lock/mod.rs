//! Locks: the one trait every strategy implements, then one file per strategy.
//!
//! A flash sale is a read-modify-write on a shared counter: read `stock`, check it is
//! positive, write `stock - 1`. Two buyers who read the same value both sell the same
//! unit. A *lock* makes the three steps happen one buyer at a time, across every
//! instance of the service. Each strategy file here is one way to build such a lock;
//! `--lock X` runs the file (or folder) named X:
//!
//! | `--lock` | file | how it works | holds across two instances? |
//! | --- | --- | --- | --- |
//! | `none` | [`none`] | no lock at all | no: the baseline that oversells |
//! | `local` | [`local`] | an in-process mutex | no: each process has its own mutex |
//! | `redis` | [`redis`] | `SET key token NX PX ttl`, owner-checked release, renewal | yes |
//! | `redlock` | [`redlock`] | `SET NX PX` on a majority of independent Redis masters, with validity | yes, with no fencing token |
//! | `etcd` | [`etcd`] | keys under a kept-alive lease, granted in revision order | yes |
//! | `zookeeper` | [`zookeeper`] | ephemeral sequential nodes, each waiter watching its predecessor | yes |
//! | `mysql` | [`mysql`] | a table row per held lock, unique by name, with owner, hold count and expiry | yes |
//! | `mysql-version` | [`mysql_version`] | optimistic: a compare-and-set on a version column | yes |
//! | `redis-degrade` | [`redis_degrade`] | `redis`, switching to `mysql-version` while Redis is down, and back | yes |
//!
//! `atomic`, the tenth strategy, takes no lock: one Redis script does the whole sale
//! (see [`crate::sale::stock`]).
//!
//! ## Reading order
//! 1. The contract, one concept a file: [`distributed_lock`] (the trait),
//!    [`polling`] (the loop behind its default `acquire`), [`guard`] (what a grant
//!    hands out), [`lease`] (is it still ours?), [`token`] (fencing tokens), [`owner`]
//!    (who asks), [`error`] (what can go wrong), [`critical_path`] (the round trips
//!    from one grant to the next), and [`description`] (what a strategy is: name,
//!    backend, tokens, critical path), which each strategy declares beside its code.
//! 2. [`parts`]: the building blocks the strategies share (lease renewal,
//!    reentrancy, the semaphore in front of MySQL, the shutdown switch).
//! 3. The strategies, simplest first: [`none`], [`local`], [`redis`], [`redlock`],
//!    [`etcd`], [`zookeeper`], [`mysql`], [`mysql_version`], [`redis_degrade`].
//!
//! Each strategy file holds all that is its own: the lock, its `DESCRIPTION`, its flags
//! (a clap `Args` struct the config flattens in) and its `build`, which reads them.
//!
//! ## A new strategy, step by step
//! On a server the project already runs, a strategy touches these places, and
//! `tests/it/project/strategies.rs` fails, naming the place, until each is done:
//! 1. its file (or folder) here: the lock, `DESCRIPTION`, and `build` (plus its `Args`);
//! 2. `pub mod` and a row of the table above, in this file;
//! 3. a variant of [`crate::strategy::Strategy`] and its arm in `description`;
//! 4. an arm in [`crate::wiring::build`] (and a flattened field in [`crate::config`] if it has flags);
//! 5. a `conformance_suite!` block in `tests/it/lock/conformance.rs`;
//! 6. a row in the README's table and the Chinese README's, and a section in
//!    `docs/reference/strategies.md`.
//!
//! Nothing else: the demo, the bench and the chaos suite ask the binary for the list
//! (`seckill strategies --json`), lockbench builds it from [`crate::strategy::Strategy`],
//! and the faults of any lock strike every strategy whose `DESCRIPTION` names a server.
//!
//! A new *server* adds a [`Backend`] (its name, its flag, its round trips), a way to start
//! it (`scripts/services.sh`, `scripts/cluster.sh`, testkit's servers, docker-compose.yml),
//! its place in front of a nemesis (`scripts/lib/nemesis.sh`'s `lock_address`), and its
//! bound (`loadtest/src/bench/bound.rs`).
//!
//! The contract names no strategy. What one strategy counts of its own comes through
//! [`DistributedLock::own_stats`]; [`LockStats`], in [`stats`], is how the
//! load test reads `/healthz`'s counters back.
//!
//! ## The contract a backend must meet
//! 1. [`DistributedLock::try_acquire`] makes one attempt: a [`LockGuard`] if the key was
//!    free, [`LockError::Busy`] if someone else holds it, never a wait.
//! 2. [`DistributedLock::acquire`] waits up to a timeout, then answers
//!    [`LockError::Timeout`]. The default polls `try_acquire` with a jittered backoff,
//!    cut short by [`DistributedLock::wait_for_release`]; a queue-based backend
//!    overrides `acquire` and waits for its predecessor instead.
//! 3. The guard carries what the backend needs to give the key back
//!    ([`LockGuard::release`], explicit and async, never hidden in `Drop`), the
//!    fencing token of this grant if the backend has one, and a [`Lease`] that turns
//!    *lost* when the backend can no longer promise exclusion (or when its deadline,
//!    such as Redlock's validity, passes without a renewal). The critical section checks it before it writes.
//! 4. A guard dropped without `release` never holds the key forever: a lease backend
//!    stops renewing and the key expires with its lease (like a crashed holder); a
//!    session backend, whose session outlives one grant, deletes the key in the background.
//! 5. An acquire that failed on the client side (a timeout, a broken connection) must
//!    not leave a key behind that nobody will release: clean up with the same token.
//! 6. [`DistributedLock::shutdown`] gives back everything this handle holds (revokes
//!    its lease, closes its session) and refuses later acquires with
//!    [`LockError::ShutDown`].
//! 7. Reentrancy (an owner taking a key it holds) is kept for every backend in one
//!    place, [`parts::reentrant::Reentrant`], unless the backend keeps it itself and says so
//!    with [`DistributedLock::keeps_reentrancy`].
//! 8. [`LockGuard::hand_over`] gives the key to a new owner of this process in the
//!    request that releases it, where the backend can, as a new grant with a newer
//!    token ([`HandOver::Granted`]). A queue lock, whose next grant is its oldest
//!    entry, puts the new owner at the back of its queue in that request instead
//!    ([`HandOver::Queued`]): a place that is granted in its turn, and leaves the queue
//!    if it is dropped first. A backend that can do neither releases
//!    ([`HandOver::Released`]), which is the default. The local queue
//!    ([`crate::sale::local_queue`]) uses it to pass the lock to its next buyer.
//!
//! ## The conformance suite
//! `tests/it/lock/conformance.rs` runs the same tests against every strategy; a new
//! strategy joins with one `conformance_suite!` block there (its traits and how to make
//! its contenders). It checks: concurrent read-modify-writes
//! lose no update; `try_acquire` fails fast on a held key; `acquire` times out;
//! a waiter gets a released key quickly; a hand-over gives the key to the next owner
//! with a newer token, or frees it; different keys do not block each other;
//! an owner re-enters a key it holds and frees it only at the last release; fencing
//! tokens grow strictly with every grant (backends with tokens); a lost lease is seen
//! by the holder and its write is refused (backends with leases); a holder that
//! vanishes without release frees the key within its lease; shutdown frees what was
//! held and refuses new acquires. Queue-based backends also pass `tests/it/lock/queue.rs`
//! (one release wakes one waiter, grants in request order).

pub mod critical_path;
pub mod stats;
pub mod description;
pub mod polling;
pub mod distributed_lock;
pub mod error;
pub mod guard;
pub mod lease;
pub mod owner;
pub mod token;

pub mod parts;

pub mod none;
pub mod local;
pub mod redis;
pub mod redlock;
pub mod etcd;
pub mod zookeeper;
pub mod mysql;
pub mod mysql_version;
pub mod redis_degrade;

pub use critical_path::{Access, Backend, Step};
pub use description::Description;
pub use distributed_lock::DistributedLock;
pub use error::LockError;
pub(crate) use guard::GuardInfo;
pub use guard::{AwaitGrant, HandOver, LockGuard, NothingToRelease, QueuedPlace, Release};
pub use lease::{Lease, LeaseState};
pub use owner::Owner;
pub use stats::{LockCounters, LockStats, OwnStats, PermitStats};
pub use token::FencingToken;
