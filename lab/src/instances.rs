//! The two instances of the service, each a `seckill serve` process of the lab's own on a
//! free loopback port, and each reaching its servers through nemeses of its own: one for
//! its link to the lock's servers, one for its link to the stock. So a fault can stop one
//! instance (SIGSTOP), kill it, cut it off from its lock or from its stock, or move its
//! wall clock, while the other sells on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use testkit::nemesis::{LinkSpec, Nemesis};
use testkit::WallClock;

use crate::servers::Servers;
use crate::setup::{Needs, Setup};

/// The flags that tell an instance where its lock lives: `lock`, the addresses of its
/// lock link, in the order of [`Servers::lock_addresses`].
fn lock_flags(needs: Needs, servers: &Servers, lock: &[SocketAddr]) -> Vec<String> {
    let flag = |name: &str, value: String| vec![name.to_owned(), value];
    match needs {
        Needs::StockOnly => Vec::new(),
        Needs::LockRedis => flag("--lock-redis-url", redis_url(lock[0])),
        Needs::LockSentinel => match &servers.lock_failover {
            Some(failover) => flag("--lock-redis-url", failover.url_via(lock[0])),
            None => Vec::new(),
        },
        Needs::RedlockMasters => {
            let urls: Vec<String> = lock.iter().map(|member| redis_url(*member)).collect();
            flag("--redlock-urls", urls.join(","))
        }
        Needs::Etcd => flag("--etcd-endpoints", format!("http://{}", lock[0])),
        Needs::ZooKeeper => flag("--zk-connect", lock[0].to_string()),
        Needs::MariaDb => flag("--mysql-url", mysql_url(lock[0])),
        Needs::LockRedisAndMariaDb => [
            flag("--lock-redis-url", redis_url(lock[0])),
            flag("--mysql-url", mysql_url(lock[1])),
        ]
        .concat(),
    }
}

fn mysql_url(address: SocketAddr) -> String {
    format!("mysql://seckill:seckill@{address}/seckill")
}

/// How long an instance may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// One instance and the links it reaches its servers through.
pub struct Instance {
    /// `seckill-PORT`: the name its locks and its sales carry.
    pub name: String,
    pub port: u16,
    binary: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<tokio::process::Child>,
    pub paused: bool,
    pub lock_link: Nemesis,
    pub stock_link: Nemesis,
    /// The wall clock it follows (libfaketime), when the machine has libfaketime.
    clock: Option<WallClock>,
    pub clock_offset_s: i64,
}

impl Instance {
    /// Starts `binary serve` for `setup`, reaching `servers` through new nemeses; its
    /// output goes to `logs/NAME.log`.
    pub async fn start(
        binary: &Path,
        setup: &Setup,
        needs: Needs,
        servers: &Servers,
        logs: &Path,
    ) -> anyhow::Result<Self> {
        let (stock_link, lock_link) = (Nemesis::new(), Nemesis::new());
        let stock = through(&stock_link, servers.stock_address()).await?;
        let mut lock = Vec::new();
        for member in servers.lock_addresses() {
            lock.push(through(&lock_link, member).await?);
        }
        // Picked once the nemeses listen, so that none of them is given it.
        let port = testkit::free_port();
        let name = format!("seckill-{port}");
        let mut args: Vec<String> = vec!["serve".into(), "--port".into(), port.to_string()];
        // Loopback, whatever SECKILL_BIND the shell that started the lab says.
        args.extend(["--bind".to_owned(), "127.0.0.1".to_owned()]);
        args.extend(["--redis-url".to_owned(), servers.stock_url_via(stock)]);
        args.extend(lock_flags(needs, servers, &lock));
        args.extend(setup.serve_flags());
        // The orders go to the lock's MariaDB, through the lock link, when the lock has
        // one (the service has one --mysql-url); else to their own, directly.
        if let Some(orders) = servers.orders_db.as_ref().filter(|_| setup.orders) {
            args.extend(["--mysql-url".to_owned(), orders.mysql_url()]);
        }
        let clock = Path::new(testkit::wall_clock::LIBFAKETIME)
            .exists()
            .then(WallClock::for_seckill);
        let mut instance = Instance {
            log: logs.join(format!("{name}.log")),
            name,
            port,
            binary: binary.to_owned(),
            args,
            child: None,
            paused: false,
            lock_link,
            stock_link,
            clock,
            clock_offset_s: 0,
        };
        instance.launch().await?;
        Ok(instance)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|child| child.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn can_jump_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// Starts the process (again, after a kill), and waits until it listens.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot write {}", self.log.display()))?;
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(&self.args)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            // If the lab dies without its clean-up, the instance dies with it at least
            // when the lab's runtime drops it.
            .kill_on_drop(true);
        forget_exported_settings(&mut command, &["SECKILL_"]);
        if let Some(clock) = &self.clock {
            command.envs(clock.env());
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot run {}", self.binary.display()))?;
        self.child = Some(child);
        self.paused = false;
        self.wait_until_listening().await
    }

    async fn wait_until_listening(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let child = self.child.as_mut().expect("launched");
            let stopped = child.try_wait()?;
            if stopped.is_none() && self.answers_as_itself().await {
                return Ok(());
            }
            if let Some(status) = stopped {
                self.child = None;
                bail!(
                    "{} stopped at start ({status}); the end of its log, {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&self.log, 15)
                );
            }
            if started.elapsed() > READY_WITHIN {
                bail!(
                    "{} did not answer GET /healthz on port {} within {READY_WITHIN:?}; its log: {}",
                    self.name,
                    self.port,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether this instance answers `GET /healthz` under its own name. Not just anything
    /// on its port: the port was free when picked, but another listener of the lab (a
    /// nemesis binding port 0) may be given it before the instance binds it, and then the
    /// instance stops ("Address already in use") while its port still answers. A round
    /// once sent its crowd to such an instance, and nothing was sold.
    async fn answers_as_itself(&self) -> bool {
        let asked = async {
            let health: seckill::api::Health = reqwest::get(format!("{}/healthz", self.url())).await?.json().await?;
            anyhow::Ok(health.instance == self.name)
        };
        matches!(tokio::time::timeout(Duration::from_secs(1), asked).await, Ok(Ok(true)))
    }

    /// SIGSTOP: the process stops where it is, its leases running out.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        self.signal(libc::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT: it carries on from where it stopped, unaware of the time gone.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        self.signal(libc::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// SIGKILL, as a crash: no release, no goodbye. Resumed first if paused, so that it dies now.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                // SAFETY: kill(2) on the pid of a child this lab started and has not reaped.
                unsafe { libc::kill(pid as i32, libc::SIGCONT) };
            }
            let _ = child.kill().await;
        }
        self.paused = false;
    }

    /// Moves its wall clock `seconds` from the true time (0 sets it right).
    pub fn jump_clock(&mut self, seconds: i64) -> anyhow::Result<()> {
        let Some(clock) = &self.clock else {
            bail!(
                "a clock jump needs libfaketime ({}): `sudo apt-get install faketime`",
                testkit::wall_clock::LIBFAKETIME
            )
        };
        clock.jump_to(seconds * 1000);
        self.clock_offset_s = seconds;
        Ok(())
    }

    fn signal(&self, signal: i32) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else {
            bail!("{} is not running: start it again first", self.name)
        };
        // SAFETY: kill(2) on the pid of a child this lab started and has not reaped.
        if unsafe { libc::kill(pid as i32, signal) } != 0 {
            bail!(
                "cannot signal {} (pid {pid}): {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }
}

/// Leaves out of `command`'s environment every variable whose name starts with one of
/// `prefixes`: the programs the lab runs read their settings from SECKILL_* and
/// LOADTEST_* too, and the lab's settings are its flags alone, not what the teacher's
/// shell exported for another run (an admin token, a bind address, a crowd's size).
pub fn forget_exported_settings(command: &mut tokio::process::Command, prefixes: &[&str]) {
    for (name, _) in std::env::vars_os() {
        if prefixes.iter().any(|prefix| name.to_string_lossy().starts_with(prefix)) {
            command.env_remove(name);
        }
    }
}

/// A new link of `nemesis` to `upstream`, on a free loopback port.
async fn through(nemesis: &Nemesis, upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    nemesis
        .link(LinkSpec { listen, upstream })
        .await
        .with_context(|| format!("cannot open a nemesis link to {upstream}"))
}

fn redis_url(address: SocketAddr) -> String {
    format!("redis://{address}")
}

/// The last `lines` lines of the file at `path`.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
