//! The N masters, asked all at once: each request counts their votes ([`Tally`]) until a
//! majority decides it, and leaves the slow ones to finish in the background.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::task::JoinHandle;

use super::master::{Master, Vote};
use super::RedlockError;

/// Extend the key only if it still holds our value.
/// Its keys and arguments head the script: `src/lock/redlock/extend.lua`.
const EXTEND_SCRIPT: &str = include_str!("extend.lua");

/// Delete the key only if it still holds our value.
/// Its keys and arguments head the script: `src/lock/redlock/delete.lua`.
const DELETE_SCRIPT: &str = include_str!("delete.lua");

/// Step 6: give the key to the next value if it still holds ours.
/// Its keys and arguments head the script: `src/lock/redlock/hand_over.lua`.
const HAND_OVER_SCRIPT: &str = include_str!("hand_over.lua");

/// How the masters voted on one request to all of them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tally {
    pub(super) yes: usize,
    pub(super) no: usize,
    pub(super) silent: usize,
}

impl Tally {
    fn count(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Silent => self.silent += 1,
        }
    }
}

/// The N masters, and the commands sent to all of them at once.
///
/// A master that restarts empty (no persistence) forgets the keys it granted. If the holder had exactly a
/// majority, that master and the ones that were down can form a new majority for somebody else. The spec's
/// cure is a *delayed restart*: a restarted master stays out for at least one TTL, or persistence with
/// `fsync` on every write. `make services` runs the masters with `appendonly yes` and `appendfsync always`,
/// so a restart keeps its keys (and their expiry, which Redis stores as an absolute time). A master wiped
/// by hand is not covered.
pub(super) struct Masters {
    pub(super) masters: Vec<Master>,
    pub(super) node_timeout: Duration,
}

impl Masters {
    pub(super) fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The masters at `urls`, at least 3, each asked with `node_timeout` (step 1).
    pub(super) fn open(urls: &[String], node_timeout: Duration) -> Result<Masters, RedlockError> {
        if urls.len() < 3 {
            return Err(RedlockError::TooFewMasters(urls.len()));
        }
        let masters = urls
            .iter()
            .map(|url| {
                Master::new(url).map_err(|source| RedlockError::BadUrl {
                    url: url.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Masters { masters, node_timeout })
    }

    /// Checks that a majority answers a `PING`, each within `timeout`; warns if some do not.
    pub(super) async fn check_a_majority_answers(&self, timeout: Duration) -> Result<(), RedlockError> {
        let answers = join_all(self.masters.iter().map(|master| master.answers_ping(timeout))).await;
        let reachable = answers.iter().filter(|answered| **answered).count();
        if reachable < self.quorum() {
            let answering: Vec<&str> = self
                .masters
                .iter()
                .zip(&answers)
                .filter(|(_, answered)| **answered)
                .map(|(master, _)| master.address.as_str())
                .collect();
            return Err(RedlockError::NoMajority {
                reachable,
                total: self.masters.len(),
                quorum: self.quorum(),
                answering: if answering.is_empty() {
                    "none".to_owned()
                } else {
                    answering.join(", ")
                },
            });
        }
        if reachable < self.masters.len() {
            tracing::warn!(
                reachable,
                total = self.masters.len(),
                "some Redlock masters do not answer; a majority does"
            );
        }
        Ok(())
    }

    /// Sends `command` to every master at once, each after that master's command in
    /// `after`, and counts every answer.
    async fn ask_all(self: &Arc<Self>, command: &redis::Cmd, after: Unanswered) -> Tally {
        let (tally, _) = self.ask_each_until(command, after, |_| false).await;
        tally
    }

    /// Sends `command` to every master at once, each after that master's earlier command
    /// in `after` (one still on its way), and counts the answers until `decided` says the
    /// tally is enough, or every master answered. The commands not answered by then go on
    /// in the background: they are returned, so a later command can follow them.
    async fn ask_each_until(
        self: &Arc<Self>,
        command: &redis::Cmd,
        after: Unanswered,
        decided: impl Fn(&Tally) -> bool,
    ) -> (Tally, Unanswered) {
        let (send_vote, mut votes) = tokio::sync::mpsc::unbounded_channel();
        let mut asked: Vec<Option<JoinHandle<()>>> = after
            .0
            .into_iter()
            .enumerate()
            .map(|(index, earlier)| {
                let (masters, command, send_vote) = (self.clone(), command.clone(), send_vote.clone());
                Some(tokio::spawn(async move {
                    if let Some(earlier) = earlier {
                        let _ = earlier.await;
                    }
                    let vote = masters.masters[index].ask(masters.node_timeout, &command).await;
                    let _ = send_vote.send((index, vote));
                }))
            })
            .collect();
        drop(send_vote);
        let mut tally = Tally::default();
        while let Some((index, vote)) = votes.recv().await {
            asked[index] = None;
            tally.count(vote);
            if decided(&tally) {
                break;
            }
        }
        (tally, Unanswered(asked))
    }

    /// Step 2: `SET NX` on every master at once, answered as soon as a majority has said
    /// yes: the grant need not wait for the slowest masters' disks. A refusal waits for
    /// every master. The sets still on their way when a majority granted are returned:
    /// the release sends each master its delete after that master's set, so a late set
    /// cannot land after the delete and keep the value there until its lease ends.
    pub(super) async fn set_everywhere(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) -> (Tally, Unanswered) {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(value).arg("NX").arg("PX").arg(ttl.as_millis() as u64);
        let quorum = self.quorum();
        self.ask_each_until(&set, self.nothing_on_its_way(), |tally| tally.yes >= quorum)
            .await
    }

    /// Step 5's renewal.
    pub(super) async fn extend_everywhere(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) -> Tally {
        let mut extend = eval(EXTEND_SCRIPT, key);
        extend.arg(value).arg(ttl.as_millis() as u64);
        self.ask_all(&extend, self.nothing_on_its_way()).await
    }

    /// Step 4, and the shutdown: the owner-checked delete, on every master, each after that master's
    /// command in `after`, waiting for every answer. The deletes are sent from tasks of their own: a caller
    /// that gives up meanwhile leaves no value behind. After a failed acquire, masters that did not answer
    /// yes get one too: a yes may have been lost on the way back. Each goes on the set's connection once
    /// the set has answered or timed out, so even a set still unread there (the master was paused) runs
    /// first.
    pub(super) async fn delete_everywhere(self: &Arc<Self>, key: &str, value: &str, after: Unanswered) -> Tally {
        self.ask_all(&delete_if_ours(key, value), after).await
    }

    /// Step 5's release: the owner-checked delete on every master (after the grant's
    /// sets still on their way), answered as soon as a majority has deleted the value,
    /// or has said it was gone. From then on no majority holds it, so a newcomer can be
    /// granted, and the release notice need not wait for the slowest master's disk. The
    /// deletes still on their way go on in the background, so no master keeps the value
    /// until its lease ends.
    pub(super) async fn release_everywhere(self: &Arc<Self>, key: &str, value: &str, sets: Unanswered) -> Tally {
        let (tally, _deletes_on_their_way) = self
            .ask_each_until(&delete_if_ours(key, value), sets, self.majority_either_way())
            .await;
        tally
    }

    /// Step 6: our value replaced by `next` on every master (each after that master's
    /// command in `after`), answered as soon as a majority said yes, or too many said no
    /// for a majority to be possible.
    pub(super) async fn hand_over_everywhere(
        self: &Arc<Self>,
        key: &str,
        (value, next): (&str, &str),
        ttl: Duration,
        after: Unanswered,
    ) -> (Tally, Unanswered) {
        let mut hand_over = eval(HAND_OVER_SCRIPT, key);
        hand_over.arg(value).arg(next).arg(ttl.as_millis() as u64);
        self.ask_each_until(&hand_over, after, self.majority_either_way()).await
    }

    /// Enough answers to stop waiting for an owner-checked command: a majority said
    /// yes, or so many said no that a majority never can.
    fn majority_either_way(&self) -> impl Fn(&Tally) -> bool {
        let (quorum, total) = (self.quorum(), self.masters.len());
        move |tally: &Tally| tally.yes >= quorum || tally.no > total - quorum
    }

    /// No command on its way to any master.
    pub(super) fn nothing_on_its_way(&self) -> Unanswered {
        Unanswered(self.masters.iter().map(|_| None).collect())
    }
}

/// The commands of one request to every master that had not answered when it was
/// decided: one slot per master, `None` for a master that answered.
pub(super) struct Unanswered(Vec<Option<JoinHandle<()>>>);

/// The owner-checked delete of `key`, for one master.
fn delete_if_ours(key: &str, value: &str) -> redis::Cmd {
    let mut delete = eval(DELETE_SCRIPT, key);
    delete.arg(value);
    delete
}

/// `EVAL <script> 1 <key>`, arguments to follow: one plain command that every master
/// runs as it is (the scripts are a few lines, so sending them each time costs little).
fn eval(script: &str, key: &str) -> redis::Cmd {
    let mut command = redis::cmd("EVAL");
    command.arg(script).arg(1).arg(key);
    command
}
