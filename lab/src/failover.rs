//! The lock's Redis as a shop runs it: a master, its replica, and a Sentinel that
//! promotes the replica when the master dies (lesson 5). The instances find the master
//! through the Sentinel (`--lock-redis-url redis-sentinel://...`).
//!
//! Redis copies a write to its replica after it answered it. So the lab cuts the copy
//! first: the replica is frozen and the master drops its link to it. What the master
//! grants from then on, the replica never hears of; the master is killed, the replica
//! promoted, and the lock it holds is the lock as it was before the cut.

use std::time::Duration;

use testkit::{PrivateRedis, PrivateSentinel};

/// The name the Sentinel knows the master by.
pub const MASTER_NAME: &str = "lab-lock";

/// The master, its replica and their Sentinel. Either server is missing for a while
/// during a failover: the master once killed, the replica once promoted (until the old
/// master comes back as the new one's replica).
pub struct Failover {
    master: Option<PrivateRedis>,
    replica: Option<PrivateRedis>,
    pub sentinel: PrivateSentinel,
}

impl Failover {
    /// A master and its replica in sync, and a Sentinel that knows both. Blocking.
    pub fn start() -> Self {
        let (master, replica, sentinel) = testkit::replicated_master(MASTER_NAME);
        Failover {
            master: Some(master),
            replica: Some(replica),
            sentinel,
        }
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

    /// The promoted replica is the master now; returns its port.
    pub fn promote(&mut self) -> u16 {
        self.master = self.replica.take();
        self.master.as_ref().map_or(0, |master| master.port)
    }

    /// The old master, started again on `port` as the replica of the master on
    /// `master_port`. Blocking.
    pub fn rejoin(port: u16, master_port: u16) -> PrivateRedis {
        PrivateRedis::start_replica_on(port, master_port)
    }

    pub fn put_replica(&mut self, replica: PrivateRedis) {
        self.replica = Some(replica);
    }
}
