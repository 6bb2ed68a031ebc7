//! Helpers shared by the integration tests (and by `loadtest/tests`).
//!
//! The tests write only to the project's own test Redis (`make services` starts it on
//! port 6390 with its data in `.run/redis-test`), and check that it is that one before
//! they write, so a user's own Redis is never touched. `SECKILL_TEST_REDIS_URL` points
//! them elsewhere on purpose. A missing server fails the test loudly; nothing is skipped.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::redis::RedisLockOptions;
use seckill::lock::{DistributedLock, Owner};

/// The project's test Redis, as `scripts/services.sh` starts it.
pub const PROJECT_TEST_REDIS: &str = "redis://127.0.0.1:6390";

/// The folder the project's test Redis keeps its data in: how we recognise it.
fn project_test_redis_dir() -> String {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = if manifest.join("scripts/services.sh").exists() { manifest } else { manifest.parent().unwrap() };
    root.join(".run/redis-test").display().to_string()
}

/// The Redis the tests use. `db` picks a logical database, so tests that use the
/// fixed stock keys do not collide.
pub fn redis_url(db: u8) -> String {
    let base = std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| PROJECT_TEST_REDIS.to_owned());
    format!("{}/{db}", base.trim_end_matches('/'))
}

/// Whether the Redis at `url` is the project's test Redis (by its data folder).
pub async fn is_project_test_redis(url: &str) -> Result<bool, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let (_, dir): (String, String) = redis::cmd("CONFIG").arg("GET").arg("dir").query_async(&mut connection).await?;
    Ok(dir == project_test_redis_dir())
}

/// A client that has answered a PING and is safe to write to, or a panic that says
/// how to get one.
pub async fn redis_client(db: u8) -> redis::Client {
    let url = redis_url(db);
    match tokio::time::timeout(Duration::from_secs(3), is_project_test_redis(&url)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) if std::env::var("SECKILL_TEST_REDIS_URL").is_ok() => {} // chosen on purpose
        Ok(Ok(false)) => panic!(
            "the Redis at {url} is not the project's test Redis (its data folder is not {}); \
             the tests write to it, so they refuse. Stop that server and run `make test`.",
            project_test_redis_dir()
        ),
        outcome => panic!(
            "these tests need the project's test Redis at {url}, which did not answer ({outcome:?}). \
             Run `make test` (it starts the servers) or `make services` first."
        ),
    }
    redis::Client::open(url.as_str()).expect("a Redis URL")
}

pub async fn connection(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    client.get_multiplexed_async_connection().await.expect("Redis answered a moment ago")
}

/// A key no other test (or earlier run) uses.
pub fn unique_key(label: &str) -> String {
    format!("test:{label}:{:016x}", rand::random::<u64>())
}

pub fn redis_options(ttl_ms: u64, renew: bool) -> RedisLockOptions {
    RedisLockOptions { ttl: Duration::from_millis(ttl_ms), renew }
}

pub fn owner() -> Owner {
    Owner::new("test")
}

/// Runs `tasks_per_lock` tasks per lock; each adds 1 to a Redis counter `iterations`
/// times by a deliberately non-atomic read, pause, write, holding its lock around it.
/// Returns the final counter: `locks.len() * tasks_per_lock * iterations` if and only
/// if no two read-modify-writes overlapped.
pub async fn racing_increments(
    client: &redis::Client,
    locks: Vec<Arc<dyn DistributedLock>>,
    tasks_per_lock: usize,
    iterations: usize,
) -> i64 {
    let counter = unique_key("counter");
    let lock_key = unique_key("lock");
    let mut tasks = Vec::new();
    for lock in locks {
        for _ in 0..tasks_per_lock {
            let (lock, counter, lock_key) = (lock.clone(), counter.clone(), lock_key.clone());
            let mut connection = connection(client).await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..iterations {
                    let guard =
                        lock.acquire(&lock_key, &owner(), Duration::from_secs(20)).await.expect("lock within 20 s");
                    let value: i64 = redis::cmd("GET")
                        .arg(&counter)
                        .query_async::<Option<i64>>(&mut connection)
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    // Give another task every chance to read the same value.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    redis::cmd("SET").arg(&counter).arg(value + 1).query_async::<()>(&mut connection).await.unwrap();
                    guard.release().await.expect("release by the holder");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("increment task panicked");
    }
    let mut connection = connection(client).await;
    let total: i64 = redis::cmd("GET").arg(&counter).query_async(&mut connection).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&counter).query_async(&mut connection).await.unwrap();
    total
}

/// The service's defaults, selling from test Redis database `db`.
pub fn config(strategy: seckill::strategy::Strategy, db: u8) -> seckill::config::Config {
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    config.redis_url = redis_url(db);
    config
}

/// An instance on a free port, selling from test Redis database `db`.
pub async fn instance(
    strategy: seckill::strategy::Strategy,
    db: u8,
    acquire_timeout_ms: u64,
) -> seckill::server::Instance {
    instance_with(strategy, db, |config| config.acquire_timeout_ms = acquire_timeout_ms).await
}

/// The same, with the settings `adjust` changes.
pub async fn instance_with(
    strategy: seckill::strategy::Strategy,
    db: u8,
    adjust: impl FnOnce(&mut seckill::config::Config),
) -> seckill::server::Instance {
    redis_client(db).await; // fail loudly if the test Redis is missing or not ours
    let mut config = config(strategy, db);
    adjust(&mut config);
    seckill::server::Instance::start(config).await.expect("instance starts")
}

/// `POST /stock/reset` to `stock` on a running instance, which must answer 200.
pub async fn reset_stock(base_url: &str, stock: i64) {
    let answer = reqwest::Client::new()
        .post(format!("{base_url}/stock/reset"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"stock": {stock}}}"#))
        .send()
        .await
        .expect("the instance answers");
    assert_eq!(answer.status().as_u16(), 200, "reset to {stock}: {}", answer.text().await.unwrap_or_default());
}

/// Waits until something accepts connections on `port`; panics after `within`,
/// naming `what` did not start.
pub fn wait_for_port(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on port {port} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private redis-server on a free port, for tests that stop, freeze or kill it.
pub struct PrivateRedis {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl PrivateRedis {
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// On `port`, empty (as after a restart without persistence).
    pub fn start_on(port: u16) -> Self {
        Self::spawn(port, TempDir::new("private-redis"), false)
    }

    /// With every write in its append-only file, fsynced before it answers, as
    /// `scripts/services.sh` runs the Redlock masters.
    pub fn start_persistent() -> Self {
        Self::spawn(free_port(), TempDir::new("private-redis"), true)
    }

    /// SIGKILL, keeping the data directory for [`PrivateRedis::restart_persistent`].
    pub fn crash(mut self) -> (u16, TempDir) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self._dir, TempDir(std::path::PathBuf::new()));
        (self.port, dir)
    }

    /// Starts again on the port and data of a crashed persistent server.
    pub fn restart_persistent(port: u16, dir: TempDir) -> Self {
        Self::spawn(port, dir, true)
    }

    fn spawn(port: u16, dir: TempDir, persistent: bool) -> Self {
        let append_only: &[&str] =
            if persistent { &["--appendonly", "yes", "--appendfsync", "always"] } else { &["--appendonly", "no"] };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(append_only)
            .args(["--dir", &dir.0.display().to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for this test: `make test` installs it");
        wait_for_port(port, Duration::from_secs(10), "redis-server");
        PrivateRedis { child, port, _dir: dir }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// SIGSTOP: the process stays, its sockets stay open, nothing answers (a GC pause, a stalled VM).
    pub fn freeze(&self) {
        signal(self.child.id(), "-STOP");
    }

    /// SIGCONT: it answers again, including what was sent while it was frozen.
    pub fn thaw(&self) {
        signal(self.child.id(), "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A folder removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        let path = std::env::temp_dir().join(format!("seckill-{label}-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The proxy's trap: a marker to wait for, and how long to hold the answers after it.
type Trap = Arc<std::sync::Mutex<Option<(Vec<u8>, Duration)>>>;

/// A TCP proxy in front of a Redis that can lose answers: once armed, the first
/// request that mentions `marker` reaches Redis and runs, but the answers on that
/// connection are held back for `hold`, longer than the client's response timeout.
/// That is "the answer was lost after the command ran", on demand.
pub struct AnswerLosingProxy {
    pub port: u16,
    armed: Trap,
    task: tokio::task::JoinHandle<()>,
}

impl AnswerLosingProxy {
    pub async fn start(redis_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Trap = Arc::default();
        let shared = armed.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await.unwrap();
                tokio::spawn(Self::relay(client, server, shared.clone()));
            }
        });
        AnswerLosingProxy { port, armed, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Loses the answers after the next request that contains `marker`.
    pub fn arm(&self, marker: &[u8], hold: Duration) {
        *self.armed.lock().unwrap() = Some((marker.to_vec(), hold));
    }

    async fn relay(client: tokio::net::TcpStream, server: tokio::net::TcpStream, armed: Trap) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client_reader, mut client_writer) = client.into_split();
        let (mut server_reader, mut server_writer) = server.into_split();
        let hold_until: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
        let holding = hold_until.clone();
        let upstream = async move {
            let mut buffer = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = client_reader.read(&mut buffer).await {
                let chunk = &buffer[..n];
                {
                    let mut armed = armed.lock().unwrap();
                    if let Some((marker, hold)) = armed.as_ref() {
                        if chunk.windows(marker.len()).any(|window| window == marker.as_slice()) {
                            *holding.lock().unwrap() = Some(Instant::now() + *hold);
                            *armed = None;
                        }
                    }
                }
                if server_writer.write_all(chunk).await.is_err() {
                    break;
                }
            }
        };
        let downstream = async move {
            let mut buffer = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = server_reader.read(&mut buffer).await {
                let until = *hold_until.lock().unwrap();
                if let Some(until) = until {
                    tokio::time::sleep_until(until.into()).await;
                }
                if client_writer.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
        };
        tokio::join!(upstream, downstream);
    }
}

impl Drop for AnswerLosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// etcd as `make services` starts it, or `SECKILL_TEST_ETCD_ENDPOINTS`.
pub fn etcd_endpoints() -> Vec<String> {
    std::env::var("SECKILL_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

pub fn etcd_options(ttl_ms: u64) -> seckill::lock::etcd::EtcdLockOptions {
    seckill::lock::etcd::EtcdLockOptions { endpoints: etcd_endpoints(), ttl: Duration::from_millis(ttl_ms) }
}

/// Revokes an etcd lease from another client, as if it had expired.
pub async fn revoke_etcd_lease(lease: i64) {
    let mut client = etcd_client::Client::connect(etcd_endpoints(), None).await.expect("etcd runs (`make services`)");
    client.lease_revoke(lease).await.expect("the lease exists");
}

/// etcd's current revision: every later write gets a larger one.
pub async fn etcd_revision() -> i64 {
    let mut client = etcd_client::Client::connect(etcd_endpoints(), None).await.expect("etcd runs (`make services`)");
    let answer = client.get("seckill/revision-probe", None).await.expect("etcd answers");
    answer.header().expect("a header").revision()
}

/// ZooKeeper as `make services` starts it, or `SECKILL_TEST_ZK_CONNECT`.
pub fn zookeeper_connect() -> String {
    std::env::var("SECKILL_TEST_ZK_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".to_owned())
}

pub fn zookeeper_options(session_timeout_ms: u64) -> seckill::lock::zookeeper::ZooKeeperLockOptions {
    seckill::lock::zookeeper::ZooKeeperLockOptions {
        connect: zookeeper_connect(),
        session_timeout: Duration::from_millis(session_timeout_ms),
    }
}

/// Expires a ZooKeeper session from outside, the way ZooKeeper's own tests do: join
/// it from a second client with its id and password, then close it from there. The
/// owner may win its session back before the close arrives, so this repeats until the
/// owner's client reports the session ended.
pub async fn expire_zookeeper_session(owner: &zookeeper_client::Client) {
    let mut last_error = None;
    for _ in 0..20 {
        // The join itself can hang for seconds past its connection timeout: bound it.
        let joined = tokio::time::timeout(
            Duration::from_secs(1),
            zookeeper_client::Client::connector()
                .with_session(owner.session().clone())
                .with_connection_timeout(Duration::from_millis(500))
                .connect(&zookeeper_connect()),
        )
        .await;
        match joined {
            Ok(Ok(intruder)) => drop(intruder), // closing the session from here expires it for its owner
            Ok(Err(error)) => last_error = Some(error.to_string()),
            Err(_) => last_error = Some("the join took longer than 1 s".to_owned()),
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if owner.state().is_terminated() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("could not expire the ZooKeeper session (last join error: {last_error:?})");
}

/// A server of the project's own on free loopback ports, for tests that stop and
/// restart it (etcd or ZooKeeper); its data folder survives a restart.
pub struct PrivateServer {
    command: Vec<String>,
    child: Option<Child>,
    pub port: u16,
    _dir: TempDir,
}

/// A free port on loopback (the OS picks it; nothing else is bound to it right now).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PrivateServer {
    /// A single-member etcd.
    pub fn etcd() -> Self {
        let (port, peer) = (free_port(), free_port());
        Self::etcd_member("private", port, peer, &format!("private=http://127.0.0.1:{peer}"))
    }

    /// An etcd cluster of `members` members; each answers on its own `port`.
    pub fn etcd_cluster(members: usize) -> Vec<Self> {
        let ports: Vec<(u16, u16)> = (0..members).map(|_| (free_port(), free_port())).collect();
        let cluster: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, peer))| format!("member-{i}=http://127.0.0.1:{peer}")).collect();
        let cluster = cluster.join(",");
        // Each opens its client port at once, and serves once a majority is up.
        let member =
            |(i, (port, peer)): (usize, &(u16, u16))| Self::etcd_member(&format!("member-{i}"), *port, *peer, &cluster);
        ports.iter().enumerate().map(member).collect()
    }

    fn etcd_member(name: &str, port: u16, peer: u16, initial_cluster: &str) -> Self {
        let dir = TempDir::new("private-etcd");
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let command = [
            "etcd",
            "--name",
            name,
            "--data-dir",
            &dir.0.join("data").display().to_string(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            initial_cluster,
        ]
        .map(str::to_owned)
        .to_vec();
        Self::start(command, port, dir)
    }

    /// A standalone ZooKeeper (admin server off), as `scripts/services.sh` runs it.
    pub fn zookeeper() -> Self {
        let dir = TempDir::new("private-zookeeper");
        let port = free_port();
        let config = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok\n",
            dir.0.join("data").display()
        );
        std::fs::write(dir.0.join("zoo.cfg"), config).unwrap();
        let command = [
            "java",
            "-cp",
            &format!("{}:/usr/share/java/zookeeper.jar", dir.0.display()),
            "-Dzookeeper.root.logger=WARN,CONSOLE",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &dir.0.join("zoo.cfg").display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        Self::start(command, port, dir)
    }

    /// A MariaDB of its own (a fresh data directory), with the `seckill` database and
    /// account as `scripts/services.sh` creates them. `url` connects to it.
    pub fn mariadb() -> Self {
        let dir = TempDir::new("private-mariadb");
        let port = free_port();
        let (data, socket) = (dir.0.join("data"), dir.0.join("mysqld.sock"));
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
        let user = format!("--user={}", user.trim());
        let installed = Command::new("mysql_install_db")
            .args(["--no-defaults", &user, &format!("--datadir={}", data.display())])
            .arg("--auth-root-authentication-method=socket")
            .output()
            .unwrap_or_else(|error| {
                panic!("mysql_install_db must be installed (`make services` installs it): {error}")
            });
        assert!(installed.status.success(), "mysql_install_db: {}", String::from_utf8_lossy(&installed.stderr));
        let command = [
            "mariadbd",
            "--no-defaults",
            &user,
            &format!("--datadir={}", data.display()),
            &format!("--socket={}", socket.display()),
            &format!("--pid-file={}", dir.0.join("mariadb.pid").display()),
            &format!("--port={port}"),
            "--bind-address=127.0.0.1",
            "--skip-log-bin",
        ]
        .map(str::to_owned)
        .to_vec();
        let server = Self::start(command, port, dir);
        let mut client = Command::new("mysql")
            .args(["--no-defaults", &format!("--socket={}", socket.display()), "-uroot"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        client
            .stdin
            .take()
            .unwrap()
            .write_all(
                b"CREATE DATABASE seckill; CREATE USER 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill'; \
                  GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'127.0.0.1';",
            )
            .unwrap();
        assert!(client.wait().unwrap().success(), "could not create the seckill account in the private MariaDB");
        server
    }

    /// The URL of a [`PrivateServer::mariadb`].
    pub fn mysql_url(&self) -> String {
        format!("mysql://seckill:seckill@127.0.0.1:{}/seckill", self.port)
    }

    fn start(command: Vec<String>, port: u16, dir: TempDir) -> Self {
        let mut server = PrivateServer { command, child: None, port, _dir: dir };
        server.restart();
        server
    }

    /// Starts it (again), and waits until its port answers.
    pub fn restart(&mut self) {
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("{} must be installed (`make services` installs it): {error}", self.command[0])
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            assert!(Instant::now() < deadline, "{} did not start on port {}", self.command[0], self.port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The port is open, and a ZooKeeper says `imok` to `ruok` (it opens its port
    /// before it serves).
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        if self.command[0] != "java" {
            return true;
        }
        let mut answer = String::new();
        stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        stream.write_all(b"ruok").is_ok() && stream.read_to_string(&mut answer).is_ok() && answer == "imok"
    }

    /// Kills it (SIGKILL), as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// MariaDB as `make services` starts it (database and user `seckill`), or `SECKILL_TEST_MYSQL_URL`.
pub fn mysql_url() -> String {
    std::env::var("SECKILL_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://seckill:seckill@127.0.0.1:3306/seckill".to_owned())
}

/// The five Redlock masters `make services` starts, or `SECKILL_TEST_REDLOCK_URLS`.
pub fn redlock_urls() -> Vec<String> {
    std::env::var("SECKILL_TEST_REDLOCK_URLS")
        .map(|urls| urls.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|_| (6381..=6385).map(|port| format!("redis://127.0.0.1:{port}")).collect())
}

/// A pool on the test database, migrated.
pub async fn mysql_pool() -> sqlx::MySqlPool {
    seckill::mysql_store::connect_checked(&mysql_url(), 5).await.expect("MariaDB runs (`make services`)")
}
