//! A redis-server of a test's own, for tests that stop, freeze or kill it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::failover_group::{DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS};
use super::private_server::{free_port, launch, temp_dir};
use super::server_control::{ask_redis, send, Signal};
use super::wall_clock::WallClock;

/// Waits until something accepts connections on `port`; panics after `within`,
/// naming `what` did not start.
pub fn wait_for_port(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while !super::server_control::listening(port) {
        assert!(
            Instant::now() < deadline,
            "{what} did not start on port {port} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private redis-server on a free port, for tests that stop, freeze or kill it.
pub struct PrivateRedis {
    child: Child,
    pub port: u16,
    /// `None` once [`PrivateRedis::crash`] handed it over.
    dir: Option<TempDir>,
}

impl PrivateRedis {
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// On `port`, empty (as after a restart without persistence).
    pub fn start_on(port: u16) -> Self {
        Self::spawn(port, temp_dir("private-redis"), false, &[])
    }

    /// A replica of the server on `master` (`--replicaof`), waited for until it is in sync.
    pub fn start_replica_of(master: u16) -> Self {
        Self::start_replica_on(free_port(), master)
    }

    /// The same on `port`: a master that died and comes back as the new master's replica.
    pub fn start_replica_on(port: u16, master: u16) -> Self {
        let master = master.to_string();
        let replica = Self::spawn_with(
            port,
            temp_dir("private-replica"),
            false,
            &[],
            &["--replicaof", "127.0.0.1", &master],
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica.info("replication").contains("master_link_status:up") {
            assert!(
                Instant::now() < deadline,
                "the replica did not sync with 127.0.0.1:{master} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        replica
    }

    /// A node of a Redis Cluster on `port` (its bus on `port + 10000`), not yet in any
    /// cluster: [`crate::private_cluster`] joins them.
    pub fn start_cluster_node(port: u16, node_timeout_ms: u64) -> Self {
        let timeout = node_timeout_ms.to_string();
        Self::spawn_with(
            port,
            temp_dir("private-cluster-node"),
            false,
            &[],
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
            ],
        )
    }

    /// A section of `INFO`, as text.
    pub fn info(&self, section: &str) -> String {
        let mut connection = self.client().get_connection().unwrap();
        redis::cmd("INFO").arg(section).query(&mut connection).unwrap()
    }

    /// Empty, its wall clock following `clock`: a test makes it jump with [`WallClock::jump_to`].
    pub fn start_with_clock(clock: &WallClock) -> Self {
        Self::spawn(free_port(), temp_dir("private-redis"), false, &clock.env())
    }

    /// With every write in its append-only file, fsynced before it answers, as
    /// `scripts/services.sh` runs the Redlock masters.
    pub fn start_persistent() -> Self {
        Self::spawn(free_port(), temp_dir("private-redis"), true, &[])
    }

    /// SIGKILL, keeping the data directory for [`PrivateRedis::restart_persistent`].
    pub fn crash(mut self) -> (u16, TempDir) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = self.dir.take().expect("crashed once");
        (self.port, dir)
    }

    /// Starts again on the port and data of a crashed persistent server.
    pub fn restart_persistent(port: u16, dir: TempDir) -> Self {
        Self::spawn(port, dir, true, &[])
    }

    fn spawn(port: u16, dir: TempDir, persistent: bool, env: &[(&str, String)]) -> Self {
        Self::spawn_with(port, dir, persistent, env, &[])
    }

    fn spawn_with(port: u16, dir: TempDir, persistent: bool, env: &[(&str, String)], extra: &[&str]) -> Self {
        let append_only: &[&str] = if persistent {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let port_text = port.to_string();
        // A replica's first sync starts at once, not after the default 5 s wait for more replicas.
        let sync_at_once: &[&str] = &["--repl-diskless-sync-delay", "0"];
        let options = [&[port_text.as_str(), "--save", ""], append_only, sync_at_once, extra].concat();
        let command = launch("redis", &dir, &options);
        let child = Command::new(&command[0])
            .args(&command[1..])
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::null())
            .spawn()
            .expect("the launcher runs; redis-server must be installed: `make test` installs it");
        wait_for_port(port, Duration::from_secs(10), "redis-server");
        PrivateRedis {
            child,
            port,
            dir: Some(dir),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id (the launcher's `exec` keeps it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// SIGSTOP: the process stays, its sockets stay open, nothing answers (a GC pause, a stalled VM).
    pub fn freeze(&self) {
        send(self.child.id(), Signal::Stop).expect("the private Redis takes SIGSTOP");
    }

    /// SIGCONT: it answers again, including what was sent while it was frozen.
    pub fn thaw(&self) {
        send(self.child.id(), Signal::Cont).expect("the private Redis takes SIGCONT");
    }
}

/// Kills a child that a test may have stopped (SIGSTOP): SIGCONT, SIGKILL, then reaps it.
pub fn kill_even_if_frozen(child: &mut Child) {
    let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        kill_even_if_frozen(&mut self.child);
    }
}

/// A Sentinel of a test's own, alone (quorum 1), watching the master on `master` under
/// `name`, with the timings of the chaos suite's failover group (their why is there:
/// [`crate::cluster::failover_group`]).
pub struct PrivateSentinel {
    child: Child,
    pub port: u16,
    name: String,
    _dir: TempDir,
}

impl PrivateSentinel {
    /// Started once the master's replicas are in sync; returns once it knows them.
    pub fn watch(name: &str, master: u16) -> Self {
        let (port, dir) = (free_port(), temp_dir("private-sentinel"));
        let (port_text, master_text) = (port.to_string(), master.to_string());
        let options = [
            port_text.as_str(),
            name,
            master_text.as_str(),
            "1",
            "down-after-milliseconds",
            &DOWN_AFTER_MS.to_string(),
            "failover-timeout",
            &FAILOVER_TIMEOUT_MS.to_string(),
        ];
        let command = launch("sentinel", &dir, &options);
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdout(Stdio::null())
            .spawn()
            .expect("the launcher runs a Sentinel: `make test` installs redis-server");
        wait_for_port(port, Duration::from_secs(10), "redis-sentinel");
        let sentinel = PrivateSentinel {
            child,
            port,
            name: name.to_owned(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while sentinel.replicas() == 0 {
            assert!(
                Instant::now() < deadline,
                "the Sentinel found no replica of {name} within 15 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        sentinel
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name of the master it watches.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The URL seckill reads: `redis-sentinel://127.0.0.1:PORT#name`.
    pub fn url(&self) -> String {
        format!("redis-sentinel://127.0.0.1:{}#{}", self.port, self.name)
    }

    fn query<T: redis::FromRedisValue>(&self, command: &mut redis::Cmd) -> T {
        ask_redis(self.port, command).expect("the private Sentinel answers")
    }

    /// How many replicas of its master this Sentinel knows.
    pub fn replicas(&self) -> usize {
        self.query::<Vec<redis::Value>>(redis::cmd("SENTINEL").arg("replicas").arg(&self.name))
            .len()
    }

    /// The port of the server this Sentinel names master now.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, u16) =
            self.query(redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.name));
        port
    }
}

impl Drop for PrivateSentinel {
    fn drop(&mut self) {
        kill_even_if_frozen(&mut self.child);
    }
}

/// Waits (10 s at most) until a replica of `master` acknowledges a write: a replica whose
/// link is up may still be loading its first copy, and acknowledge nothing for a while.
pub fn wait_until_a_replica_acknowledges(master: &PrivateRedis) {
    let mut connection = master.client().get_connection().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _: () = redis::cmd("SET")
            .arg("replica-check")
            .arg(1)
            .query(&mut connection)
            .unwrap();
        let acknowledged: u32 = redis::cmd("WAIT").arg(1).arg(500).query(&mut connection).unwrap();
        if acknowledged >= 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no replica of {} acknowledged a write within 10 s",
            master.port
        );
    }
}

/// A master, its replica in sync, and a Sentinel that knows both.
pub fn replicated_master(name: &str) -> (PrivateRedis, PrivateRedis, PrivateSentinel) {
    let master = PrivateRedis::start();
    let replica = PrivateRedis::start_replica_of(master.port);
    let sentinel = PrivateSentinel::watch(name, master.port);
    (master, replica, sentinel)
}

/// A master, two replicas in sync, and a Sentinel that knows all three, as a shop runs
/// them: after a failover, the promoted replica still has a replica of its own.
pub fn master_with_two_replicas(name: &str) -> (PrivateRedis, [PrivateRedis; 2], PrivateSentinel) {
    let master = PrivateRedis::start();
    let replicas = [
        PrivateRedis::start_replica_of(master.port),
        PrivateRedis::start_replica_of(master.port),
    ];
    let sentinel = PrivateSentinel::watch(name, master.port);
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinel.replicas() < replicas.len() {
        assert!(
            Instant::now() < deadline,
            "the Sentinel did not find both replicas of {name} within 15 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, replicas, sentinel)
}

/// Kills the master and waits until the Sentinel names the replica instead.
pub fn fail_over(master: PrivateRedis, replica: &PrivateRedis, sentinel: &PrivateSentinel) -> Duration {
    let killed = Instant::now();
    drop(master); // SIGKILL
    wait_for_promotion(replica, sentinel, killed);
    killed.elapsed()
}

/// Waits until the Sentinel names `replica` master, 20 s at most after the kill at `killed`.
pub fn wait_for_promotion(replica: &PrivateRedis, sentinel: &PrivateSentinel, killed: Instant) {
    while sentinel.master_port() != replica.port {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the Sentinel promoted nobody within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The replica stops hearing from its master, and the master forgets it: what the master
/// grants from now on reaches no replica (as when the link between them is cut). The
/// replica is frozen meanwhile, so it cannot reconnect before the master is killed.
pub fn cut_replica_off(master: &PrivateRedis, replica: &PrivateRedis) {
    cut_replicas_off(master, &[replica]);
}

/// [`cut_replica_off`] for every replica of `master` at once.
pub fn cut_replicas_off(master: &PrivateRedis, replicas: &[&PrivateRedis]) {
    for replica in replicas {
        replica.freeze();
    }
    let mut connection = master.client().get_connection().unwrap();
    let killed: usize = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut connection)
        .unwrap();
    assert_eq!(
        killed,
        replicas.len(),
        "the master had {} replica(s) connected",
        replicas.len()
    );
}
