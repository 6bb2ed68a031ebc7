//! A Redis as a shop runs it: a master, its replica, and a Sentinel that promotes the
//! replica when the master dies. The lock's (lesson 5) or the stock's (lesson 14): the
//! instances find the master through the Sentinel (`redis-sentinel://...#name`).
//!
//! Redis copies a write to its replica after it answered it. So the lab cuts the copy
//! first: the replica is frozen and the master drops its link to it. What the master
//! grants from then on, the replica never hears of; the master is killed, the replica
//! promoted, and the lock it holds is the lock as it was before the cut.

use std::time::{Duration, Instant};

use anyhow::bail;
use loadtest::history::Fault;
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

    /// Whether the master holds a lock key for the instance `name`: a key `lock:stock` (or
    /// a segment's) whose token starts with the name, as its tokens do.
    pub fn holds_the_lock(&self, name: &str) -> anyhow::Result<bool> {
        let Some(master) = &self.master else {
            bail!("the master is gone: a failover is under way");
        };
        let mut connection = master.client().get_connection_with_timeout(Duration::from_secs(1))?;
        let holds: bool = redis::Script::new(HOLDS_THE_LOCK)
            .arg(format!("{name}:"))
            .invoke(&mut connection)?;
        Ok(holds)
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

/// Whether any lock key (`lock:stock`, `lock:stock:<segment>`) holds a token that
/// starts with `ARGV[1]`. Its fence counters are strings too, of digits.
const HOLDS_THE_LOCK: &str = r#"
for _, key in ipairs(redis.call('KEYS', '*lock:stock*')) do
    if redis.call('TYPE', key).ok == 'string' then
        local token = redis.call('GET', key)
        if string.sub(token, 1, #ARGV[1]) == ARGV[1] then return 1 end
    end
end
return 0
"#;

/// How long after the replication cut the lock's failover picks its holder. The replica
/// still has the grant of the holder at the cut (its release never reached it) until
/// that lease runs out; a holder picked this late keeps a lease that outlives that one
/// by as much, and in that time the promoted replica grants the lock again.
const GRANT_AFTER_CUT: Duration = Duration::from_secs(3);

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
    /// holder and when it was paused. A holder seen in `/metrics` may have written and
    /// released by the time it is stopped (a loaded machine answers late), and a holder
    /// stopped after its sale shows nothing: so once it is stopped, the master is asked
    /// whether it still holds the lock. If not, it is woken and the next holder tried.
    async fn pause_a_holder_granted_after_the_cut(&self, generation: u64) -> anyhow::Result<(usize, Instant)> {
        tokio::time::sleep(GRANT_AFTER_CUT).await;
        let deadline = Instant::now() + Duration::from_millis(HOLDER_WITHIN_MS);
        loop {
            let holder = self.wait_for_holder(generation).await?;
            tokio::time::sleep(holder.linger / 2).await;
            self.act(generation, holder.index, Act::Pause).await?;
            let paused = Instant::now();
            let name = holder.name.clone();
            if self
                .on_failover(generation, Which::Lock, move |failover| failover.holds_the_lock(&name))
                .await??
            {
                return Ok((holder.index, paused));
            }
            self.act(generation, holder.index, Act::Resume).await?;
            self.say(format!(
                "{} had sold before it was paused: woken, the next holder tried",
                holder.name
            ));
            if Instant::now() > deadline {
                bail!("no holder was caught holding the lock within {HOLDER_WITHIN_MS} ms of tries");
            }
        }
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
    fn the_master_names_the_instance_whose_token_a_lock_key_holds_among_its_other_keys() {
        let failover = Failover::start("lab-holder");
        let master = failover.master.as_ref().unwrap();
        let mut redis = master.client().get_connection().unwrap();
        assert!(!failover.holds_the_lock("seckill-4101").unwrap(), "no key, no holder");
        redis::pipe()
            .set("lock:stock:fence", 7)
            .zadd("lock:stock:queue", "seckill-4101:00ff", 1)
            .set("lock:stock:2", "seckill-4101:00ff:abcd")
            .query::<()>(&mut redis)
            .unwrap();
        assert!(failover.holds_the_lock("seckill-4101").unwrap());
        assert!(
            !failover.holds_the_lock("seckill-410").unwrap(),
            "a name that begins another's is not it"
        );
        assert!(!failover.holds_the_lock("seckill-4102").unwrap());
    }
}
