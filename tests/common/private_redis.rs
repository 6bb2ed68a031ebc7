//! A redis-server of a test's own, for tests that stop, freeze or kill it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::private_server::{free_port, launch, temp_dir};
use super::wall_clock::WallClock;

/// Waits until something accepts connections on `port`; panics after `within`,
/// naming `what` did not start.
pub fn wait_for_port(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
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
        let append_only: &[&str] = if persistent {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let port_text = port.to_string();
        let options = [&[port_text.as_str(), "--save", ""], append_only].concat();
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

/// Kills a child that a test may have stopped (SIGSTOP): SIGCONT, SIGKILL, then reaps it.
pub fn kill_even_if_frozen(child: &mut Child) {
    let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` (`-STOP`, `-CONT`, ...) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        kill_even_if_frozen(&mut self.child);
    }
}
