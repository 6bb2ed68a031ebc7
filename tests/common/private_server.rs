//! etcd, ZooKeeper or MariaDB of a test's own, on free loopback ports, for tests that
//! stop and restart them.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A folder of a test's own, removed when dropped.
pub fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("seckill-{label}-")).tempdir().expect("a temporary folder")
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
        let dir = temp_dir("private-etcd");
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let command = [
            "etcd",
            "--name",
            name,
            "--data-dir",
            &dir.path().join("data").display().to_string(),
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
        let dir = temp_dir("private-zookeeper");
        let port = free_port();
        let config = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok\n",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("zoo.cfg"), config).unwrap();
        let command = [
            "java",
            "-cp",
            &format!("{}:/usr/share/java/zookeeper.jar", dir.path().display()),
            "-Dzookeeper.root.logger=WARN,CONSOLE",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &dir.path().join("zoo.cfg").display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        Self::start(command, port, dir)
    }

    /// A MariaDB of its own (a fresh data directory), with the `seckill` database and
    /// account as `scripts/services.sh` creates them. `url` connects to it.
    pub fn mariadb() -> Self {
        let dir = temp_dir("private-mariadb");
        let port = free_port();
        let (data, socket) = (dir.path().join("data"), dir.path().join("mysqld.sock"));
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
            &format!("--pid-file={}", dir.path().join("mariadb.pid").display()),
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
