//! etcd, ZooKeeper or MariaDB of a test's own, on free loopback ports, for tests that
//! stop and restart them.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::server_control::{etcd_status, launch_command, launcher, listening, send, zookeeper_mode, Signal};

/// A folder of a test's own, removed when dropped.
pub fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("seckill-{label}-"))
        .tempdir()
        .expect("a temporary folder")
}

/// The launcher's command for a server of `kind` in `dir`, followed by `args`: the one
/// launcher (`scripts/lib/exec-server.sh`) that `make services` and `make cluster` start
/// theirs through too, so a test's server runs with the same settings.
pub(super) fn launch(kind: &str, dir: &TempDir, args: &[&str]) -> Vec<String> {
    launch_command(kind, dir.path(), args)
}

/// A server of the project's own on free loopback ports, for tests that stop and
/// restart it (etcd, ZooKeeper or MariaDB); its data folder survives a restart.
pub struct PrivateServer {
    /// `etcd`, `zookeeper` or `mariadb`, as the launcher names it.
    kind: &'static str,
    command: Vec<String>,
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
}

/// A free port on loopback (the OS picks it; nothing else is bound to it right now).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `count` free ports on loopback, all different. Each is held until all are picked:
/// two calls of [`free_port`] in a row may be given the same port, since the first was
/// released before the second was asked (an etcd cluster once got one peer port twice).
pub fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

impl PrivateServer {
    /// A single-member etcd.
    pub fn etcd() -> Self {
        let ports = free_ports(2);
        let (port, peer) = (ports[0], ports[1]);
        Self::etcd_member("private", port, peer, &format!("private=http://127.0.0.1:{peer}"))
    }

    /// An etcd cluster of `members` members; each answers on its own `port`.
    pub fn etcd_cluster(members: usize) -> Vec<Self> {
        let all = free_ports(2 * members);
        let ports: Vec<(u16, u16)> = all.chunks(2).map(|pair| (pair[0], pair[1])).collect();
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("member-{i}=http://127.0.0.1:{peer}"))
            .collect();
        let cluster = cluster.join(",");
        // Each opens its client port at once, and serves once a majority is up.
        let member =
            |(i, (port, peer)): (usize, &(u16, u16))| Self::etcd_member(&format!("member-{i}"), *port, *peer, &cluster);
        ports.iter().enumerate().map(member).collect()
    }

    fn etcd_member(name: &str, port: u16, peer: u16, initial_cluster: &str) -> Self {
        let dir = temp_dir("private-etcd");
        let command = launch(
            "etcd",
            &dir,
            &[name, &port.to_string(), &peer.to_string(), initial_cluster],
        );
        Self::start("etcd", command, port, dir)
    }

    /// A standalone ZooKeeper (admin server off), as `scripts/services.sh` runs it.
    pub fn zookeeper() -> Self {
        let dir = temp_dir("private-zookeeper");
        let port = free_port();
        let command = launch("zookeeper", &dir, &[&port.to_string()]);
        Self::start("zookeeper", command, port, dir)
    }

    /// A MariaDB of its own (a fresh data directory), with the `seckill` database and
    /// account as `scripts/services.sh` creates them. `url` connects to it.
    pub fn mariadb() -> Self {
        Self::mariadb_with(&[])
    }

    /// The same, with `options` for mariadbd after the launcher's own (so they win).
    pub fn mariadb_with(options: &[&str]) -> Self {
        let dir = temp_dir("private-mariadb");
        let port = free_port();
        let port_arg = port.to_string();
        let args: Vec<&str> = std::iter::once(port_arg.as_str())
            .chain(options.iter().copied())
            .collect();
        let command = launch("mariadb", &dir, &args);
        let server = Self::start("mariadb", command, port, dir);
        let account = Command::new(launcher())
            .args(["mariadb-account", &server.dir.path().display().to_string()])
            .output()
            .expect("the launcher runs");
        assert!(
            account.status.success(),
            "could not create the seckill account in the private MariaDB: {}",
            String::from_utf8_lossy(&account.stderr)
        );
        server
    }

    /// The URL of a [`PrivateServer::mariadb`].
    pub fn mysql_url(&self) -> String {
        format!("mysql://seckill:seckill@127.0.0.1:{}/seckill", self.port)
    }

    fn start(kind: &'static str, command: Vec<String>, port: u16, dir: TempDir) -> Self {
        let mut server = PrivateServer {
            kind,
            command,
            child: None,
            port,
            dir,
        };
        server.restart();
        server
    }

    /// Starts it (again), and waits until its port answers. The server's output goes
    /// to `server.log` in its folder, whose last lines a failure to start shows.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("the server's log file");
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdout(Stdio::from(log.try_clone().expect("the log file again")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run {} ({error}); `make services` installs the servers",
                    self.command[0]
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            self.fail_if_exited("before it answered");
            assert!(
                Instant::now() < deadline,
                "{} did not start on port {} in 60 s; {}",
                self.kind,
                self.port,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The port may answer for another server that took it first: ours then exits.
        std::thread::sleep(Duration::from_millis(100));
        let port = self.port;
        self.fail_if_exited(&format!("while port {port} answered: another process holds that port"));
    }

    /// Panics with the server's last output if it has exited already.
    fn fail_if_exited(&mut self, when: &str) {
        if let Ok(Some(status)) = self.child.as_mut().expect("just started").try_wait() {
            panic!("{} exited ({status}) {when}; {}", self.kind, self.log_tail());
        }
    }

    fn log_path(&self) -> std::path::PathBuf {
        self.dir.path().join("server.log")
    }

    /// The last lines of the server's output, for a failure's message.
    fn log_tail(&self) -> String {
        const LINES: usize = 50;
        let log = String::from_utf8_lossy(&std::fs::read(self.log_path()).unwrap_or_default()).into_owned();
        if log.trim().is_empty() {
            return format!(
                "it printed nothing (or {} could not be read)",
                self.log_path().display()
            );
        }
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
        format!("its last {LINES} lines of output:\n{tail}")
    }

    /// The port is open; a ZooKeeper must also say its mode to `srvr`. It opens its port,
    /// and says `imok` to `ruok`, before it serves: a session asked for meanwhile is
    /// closed at once ("connection to server has lost"), which a `seckill serve` starting
    /// then takes for a ZooKeeper that is down.
    fn answers(&self) -> bool {
        match self.kind {
            "zookeeper" => zookeeper_mode(self.port).is_some(),
            _ => listening(self.port),
        }
    }

    /// Stops it (SIGSTOP): it keeps its connections open and answers nothing, as a
    /// server stalled by the network or the machine would. [`PrivateServer::thaw`] lets it go on.
    pub fn freeze(&self) {
        send(self.pid(), Signal::Stop).expect("the private server takes SIGSTOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        send(self.pid(), Signal::Cont).expect("the private server takes SIGCONT");
    }

    /// The server's process id (the launcher execs the server).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
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

/// The member of `members` that leads, once one does (a cluster just started elects
/// one within a few seconds).
pub async fn etcd_leader(members: &[PrivateServer]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        for (index, member) in members.iter().enumerate() {
            if etcd_status(member.port).await.is_some_and(|(me, leader)| me == leader) {
                return index;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no etcd member says it leads after 15 s");
}
