//! A Redis as a shop runs it: a master, its replica, and a Sentinel that promotes the
//! replica when the master dies. The lock's (lesson 5) or the stock's (lesson 14): the
//! instances find the master through the Sentinel (`redis-sentinel://...#name`).
//!
//! Redis copies a write to its replica after it answered it. So the lab cuts the copy
//! first: the replica is frozen and the master drops its link to it. What the master
//! grants from then on, the replica never hears of; the master is killed, the replica
//! promoted, and the lock it holds is the lock as it was before the cut.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use loadtest::history::Fault;
use seckill::sale::keys::Keys;
use seckill::sale::segments::Segments;
use testkit::{PrivateRedis, PrivateSentinel};

use crate::faults::HOLDER_WITHIN_MS;
use crate::lab::{Act, Lab};
use crate::servers::Servers;

/// The master, its replica and their Sentinel. Either server is missing for a while
/// during a failover: the master once killed, the replica once promoted (until the old
/// master comes back as the new one's replica).
pub struct Failover {
    master: Option<PrivateRedis>,
    replica: Option<PrivateRedis>,
    pub sentinel: PrivateSentinel,
    /// The name the Sentinel knows the master by.
    name: &'static str,
}

impl Failover {
    /// A master and its replica in sync, and a Sentinel that knows both under `name`. Blocking.
    pub fn start(name: &'static str) -> Self {
        let (master, replica, sentinel) = testkit::replicated_master(name);
        Failover {
            master: Some(master),
            replica: Some(replica),
            sentinel,
            name,
        }
    }

    /// The URL an instance reads, reaching the Sentinel at `address` (its nemesis).
    pub fn url_via(&self, address: std::net::SocketAddr) -> String {
        format!("redis-sentinel://{address}#{}", self.name)
    }

    pub fn pids(&self) -> Vec<u32> {
        let servers = self.master.iter().chain(&self.replica).map(PrivateRedis::pid);
        servers.chain([self.sentinel.pid()]).collect()
    }

    /// The replica stops hearing from the master: frozen, and dropped by the master.
    pub fn cut_replication(&mut self) -> anyhow::Result<()> {
        let (Some(master), Some(replica)) = (&self.master, &self.replica) else {
            anyhow::bail!("a failover is under way: wait until the old master is back as a replica");
        };
        replica.freeze();
        let mut connection = master.client().get_connection()?;
        let _: usize = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut connection)?;
        Ok(())
    }

    /// Wakes the replica: it syncs with its master again, or finds it dead.
    pub fn heal_replication(&mut self) {
        if let Some(replica) = &self.replica {
            replica.thaw();
        }
    }

    /// Takes the master out, for the caller to kill by dropping it, with its port. The
    /// replica is woken only once the master is dead ([`Failover::heal_replication`]):
    /// awake before, it would reconnect and copy the grants it must never hear of.
    pub fn take_master(&mut self) -> Option<(u16, PrivateRedis)> {
        self.master.take().map(|master| (master.port, master))
    }

    /// Whether the Sentinel names the replica master now.
    pub fn replica_promoted(&mut self) -> bool {
        let Some(replica) = &self.replica else { return false };
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinel.port));
        let answer: redis::RedisResult<(String, u16)> = client.and_then(|client| {
            let mut connection = client.get_connection_with_timeout(Duration::from_millis(500))?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(self.sentinel.master_name())
                .query(&mut connection)
        });
        answer.is_ok_and(|(_, port)| port == replica.port)
    }

    /// How long the lease of the instance `name` still runs, if one of the lock `keys`
    /// holds its token (its tokens start with its name and a colon).
    pub fn lease_left_of(&self, name: &str, keys: &[String]) -> anyhow::Result<Option<Duration>> {
        let Some(master) = &self.master else {
            bail!("the master is gone: a failover is under way");
        };
        let mut connection = master.client().get_connection_with_timeout(Duration::from_secs(1))?;
        connection.set_read_timeout(Some(Duration::from_secs(1)))?;
        let its_own = format!("{name}:");
        for key in keys {
            let (token, left_ms): (Option<String>, i64) = redis::pipe().get(key).pttl(key).query(&mut connection)?;
            if token.is_some_and(|token| token.starts_with(&its_own)) {
                return Ok(Some(Duration::from_millis(left_ms.max(0) as u64)));
            }
        }
        Ok(None)
    }

    /// The promoted replica is the master now; returns its port.
    pub fn promote(&mut self) -> u16 {
        self.master = self.replica.take();
        self.master.as_ref().map_or(0, |master| master.port)
    }

    pub fn put_replica(&mut self, replica: PrivateRedis) {
        self.replica = Some(replica);
    }
}

/// How long after the replication cut the lock's failover picks its holder. The replica
/// still has the grant of the holder at the cut (its release never reached it) until
/// that lease runs out; a holder picked this late keeps a lease that outlives that one
/// by as much, and in that time the promoted replica grants the lock again.
const GRANT_AFTER_CUT: Duration = Duration::from_secs(3);

/// A paused holder shows a double sale only if it was stopped after its read of the stock
/// (which follows its grant at once: granted at least this long before)...
const READ_WITHIN: Duration = Duration::from_millis(5);
/// ...and before its write (granted less than its linger, less this, before).
const WRITE_MARGIN: Duration = Duration::from_millis(5);

/// What tells whether a paused holder was caught between its read and its write: the
/// setup's lock keys, its lease and its linger.
#[derive(Clone)]
struct Aim {
    keys: Vec<String>,
    ttl: Duration,
    linger: Duration,
}

impl Aim {
    /// Whether a holder whose grant had `left` of its lease, asked `since` after its
    /// pause, was paused between its read and its write: its grant's age then (the lease
    /// less what is left) within its linger. A linger too short to aim within asks only
    /// that it hold the lock.
    fn mid_sale(&self, left: Duration, since: Duration) -> bool {
        if self.linger < READ_WITHIN + WRITE_MARGIN * 2 {
            return true;
        }
        let age_at_pause = self.ttl.saturating_sub(left).saturating_sub(since);
        (READ_WITHIN..=self.linger - WRITE_MARGIN).contains(&age_at_pause)
    }
}

/// Which Redis fails over.
#[derive(Clone, Copy, Debug)]
pub enum Which {
    /// The lock's (lesson 5): its next holder is paused across the failover.
    Lock,
    /// The stock's (lesson 14): its master sells alone for a while first.
    Stock,
}

impl Which {
    /// The server as the history names it.
    pub(crate) fn target(self) -> &'static str {
        match self {
            Which::Lock => "lock-redis",
            Which::Stock => "stock-redis",
        }
    }

    fn of(self, servers: &mut Servers) -> Option<&mut Failover> {
        match self {
            Which::Lock => servers.lock_failover.as_mut(),
            Which::Stock => servers.stock_failover.as_mut(),
        }
    }
}

impl Lab {
    /// A failover as `make demo-failover` and `make chaos` play it: the replication cut;
    /// then for the lock, its next holder paused, for the stock, `ms` of sales the replica
    /// never hears of; the master killed, the replica promoted; the paused holder woken
    /// `ms` after its pause; the old master back as the new one's replica.
    pub(crate) async fn fail_over(&self, generation: u64, which: Which, ms: u64) -> anyhow::Result<()> {
        if let Which::Stock = which {
            // Cut before the crowd's reset reached the replica, the promoted replica
            // would hold the sale before it: the load test would see it reset mid-run.
            self.wait_for_a_sale(generation).await?;
        }
        self.on_failover(generation, which, Failover::cut_replication).await??;
        self.record_if_current(generation, Fault::Partition, which.target(), "its replication")
            .await?;
        let paused = match which {
            Which::Lock => match self.pause_a_holder_granted_after_the_cut(generation).await {
                Ok(paused) => Some(paused),
                Err(error) => {
                    self.on_failover(generation, which, Failover::heal_replication).await?;
                    self.record_if_current(generation, Fault::Heal, which.target(), "its replication")
                        .await?;
                    return Err(error);
                }
            },
            Which::Stock => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                None
            }
        };
        let (old_port, new_port) = self.kill_the_master_until_promoted(generation, which).await?;
        if let Some((holder, since)) = paused {
            tokio::time::sleep(Duration::from_millis(ms).saturating_sub(since.elapsed())).await;
            self.act(generation, holder, Act::Resume).await?;
        }
        let replica = tokio::task::spawn_blocking(move || PrivateRedis::start_replica_on(old_port, new_port))
            .await
            .map_err(|failed| anyhow::anyhow!(crate::servers::panic_text(failed)))?;
        self.on_failover(generation, which, |failover| failover.put_replica(replica))
            .await?;
        let healed = "its replication, the old master a replica";
        self.record_if_current(generation, Fault::Heal, which.target(), healed)
            .await
    }

    /// Kills the master, wakes the replica, and waits until the Sentinel promotes it;
    /// returns the old master's port and the new one's.
    async fn kill_the_master_until_promoted(&self, generation: u64, which: Which) -> anyhow::Result<(u16, u16)> {
        let Some((old_port, master)) = self.on_failover(generation, which, Failover::take_master).await? else {
            bail!("the {} has no master to kill", which.target());
        };
        tokio::task::spawn_blocking(move || drop(master)).await?; // SIGKILL
        self.record_if_current(generation, Fault::Kill, which.target(), "its master")
            .await?;
        self.on_failover(generation, which, Failover::heal_replication).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.on_failover(generation, which, Failover::replica_promoted).await? {
            if Instant::now() > deadline {
                bail!("the Sentinel promoted no replica within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let new_port = self.on_failover(generation, which, Failover::promote).await?;
        let promoted = "the Sentinel promoted its replica";
        self.record_if_current(generation, Fault::Failover, which.target(), promoted)
            .await?;
        Ok((old_port, new_port))
    }

    /// Waits [`GRANT_AFTER_CUT`], then pauses the next holder in its linger; returns the
    /// holder and when it was paused. A holder seen in `/metrics` may have written, or
    /// released and been granted again, by the time it is stopped (a loaded machine
    /// answers late), and a holder stopped outside its read and its write sells nothing
    /// twice. So once it is stopped, the master is asked for its grant ([`Aim::mid_sale`]);
    /// if it was not caught mid-sale, it is woken and the next holder tried.
    async fn pause_a_holder_granted_after_the_cut(&self, generation: u64) -> anyhow::Result<(usize, Instant)> {
        tokio::time::sleep(GRANT_AFTER_CUT).await;
        let aim = self.aim(generation).await?;
        let deadline = Instant::now() + Duration::from_millis(HOLDER_WITHIN_MS);
        loop {
            let holder = self.wait_for_holder(generation).await?;
            tokio::time::sleep(holder.linger / 2).await;
            self.act(generation, holder.index, Act::Pause).await?;
            let paused = Instant::now();
            let (name, keys) = (holder.name.clone(), aim.keys.clone());
            let left = self
                .on_failover(generation, Which::Lock, move |failover| {
                    failover.lease_left_of(&name, &keys)
                })
                .await
                .and_then(|left| left);
            if let Ok(Some(left)) = left {
                if aim.mid_sale(left, paused.elapsed()) {
                    return Ok((holder.index, paused));
                }
            }
            // Outside its sale, or the master could not say: woken either way.
            self.act(generation, holder.index, Act::Resume).await?;
            left.context("asking the lock's master for the paused instance's grant")?;
            self.say(format!(
                "{} was paused outside its sale: woken, the next holder tried",
                holder.name
            ));
            if Instant::now() > deadline {
                bail!("no holder was caught mid-sale within {HOLDER_WITHIN_MS} ms of tries");
            }
        }
    }

    /// The lock keys (one per stock segment), the lease and the linger of the setup `generation`.
    async fn aim(&self, generation: u64) -> anyhow::Result<Aim> {
        let inner = self.inner.lock().await;
        let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
            bail!("the setup changed");
        };
        let segments = Segments::new(stage.setup.segments).map_err(anyhow::Error::msg)?;
        Ok(Aim {
            keys: segments.all().map(|segment| Keys::default().lock_of(segment)).collect(),
            ttl: Duration::from_millis(stage.setup.ttl_ms),
            linger: Duration::from_millis(stage.setup.linger_ms),
        })
    }

    /// `step` done to the failover group `which` of the setup `generation`.
    async fn on_failover<T>(
        &self,
        generation: u64,
        which: Which,
        step: impl FnOnce(&mut Failover) -> T,
    ) -> anyhow::Result<T> {
        let mut inner = self.inner.lock().await;
        let stage = inner.stage.as_mut().filter(|stage| stage.generation == generation);
        match stage.and_then(|stage| which.of(&mut stage.servers)) {
            Some(failover) => Ok(step(failover)),
            None => bail!("the setup changed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_tells_the_lease_left_of_the_instance_whose_token_a_lock_key_holds() {
        let failover = Failover::start("lab-holder");
        let segments = Segments::new(4).unwrap().all();
        let keys: Vec<String> = segments.map(|segment| Keys::default().lock_of(segment)).collect();
        assert_eq!(
            failover.lease_left_of("seckill-4101", &keys).unwrap(),
            None,
            "no key, no holder"
        );
        let mut redis = failover.master.as_ref().unwrap().client().get_connection().unwrap();
        redis::pipe()
            .set("lock:stock", "seckill-4102:00ff:abcd")
            .pset_ex(&keys[2], "seckill-4101:00ff:abcd", 6000)
            .query::<()>(&mut redis)
            .unwrap();
        let left = failover.lease_left_of("seckill-4101", &keys).unwrap().unwrap();
        assert!(
            (Duration::from_millis(5000)..=Duration::from_millis(6000)).contains(&left),
            "{left:?}"
        );
        assert_eq!(
            failover.lease_left_of("seckill-410", &keys).unwrap(),
            None,
            "a name that begins another's"
        );
        assert_eq!(
            failover.lease_left_of("seckill-4102", &keys).unwrap(),
            None,
            "the key of a stock in one piece is not one of four segments' keys"
        );
    }

    #[test]
    fn a_holder_is_caught_mid_sale_when_its_grant_is_older_than_its_read_and_younger_than_its_write() {
        let aim = |linger_ms| Aim {
            keys: Vec::new(),
            ttl: Duration::from_millis(6000),
            linger: Duration::from_millis(linger_ms),
        };
        let ms = Duration::from_millis;
        assert!(
            aim(50).mid_sale(ms(5970), ms(2)),
            "granted 28 ms before its pause: lingering"
        );
        assert!(
            !aim(50).mid_sale(ms(5999), ms(0)),
            "granted 1 ms before: it reads after waking"
        );
        assert!(
            !aim(50).mid_sale(ms(5940), ms(0)),
            "granted 60 ms before: it had written"
        );
        assert!(
            aim(50).mid_sale(ms(5940), ms(30)),
            "granted 30 ms before its pause, asked 30 ms after"
        );
        assert!(
            aim(0).mid_sale(ms(10), ms(0)),
            "no linger to aim within: holding is enough"
        );
    }
}
