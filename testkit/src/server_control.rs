//! Telling a server of ours what to do, for the tests' private servers and for the chaos
//! suite's cluster (the `cluster` binary) alike: how one is launched, signalled, found
//! running or paused, and asked a question that a paused server cannot hang.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The one launcher of the project's servers (`scripts/lib/exec-server.sh`): it says how
/// each kind is configured and run, and then execs it, so its pid is the server's.
pub fn launcher() -> PathBuf {
    super::test_redis::project_root().join("scripts/lib/exec-server.sh")
}

/// The launcher's command for a server of `kind` with its data in `dir`, then `args`.
pub fn launch_command(kind: &str, dir: &Path, args: &[&str]) -> Vec<String> {
    let mut command = vec![
        launcher().display().to_string(),
        kind.to_owned(),
        dir.display().to_string(),
    ];
    command.extend(args.iter().map(|arg| arg.to_string()));
    command
}

/// The signals the tests and the chaos suite send a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGSTOP: it keeps its sockets open and answers nothing (a GC pause, a stalled VM).
    Stop,
    /// SIGCONT: it answers again, including what was sent while it was stopped.
    Cont,
    /// SIGTERM: asked to stop.
    Term,
    /// SIGKILL: a crash.
    Kill,
}

impl Signal {
    fn flag(self) -> &'static str {
        match self {
            Signal::Stop => "-STOP",
            Signal::Cont => "-CONT",
            Signal::Term => "-TERM",
            Signal::Kill => "-KILL",
        }
    }
}

/// Sends `signal` to `pid`.
pub fn send(pid: u32, signal: Signal) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args([signal.flag(), &pid.to_string()])
        .status()
        .context("could not run kill")?;
    if !status.success() {
        bail!("kill {} {pid} failed: no such process, or not ours", signal.flag());
    }
    Ok(())
}

/// What a process is doing, as /proc says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessState {
    Running,
    /// Stopped by SIGSTOP.
    Paused,
    /// Gone, or dead and not reaped yet (a zombie is dead all the same).
    Gone,
}

/// The state of `pid`, from the third field of /proc/PID/stat.
pub fn process_state(pid: u32) -> ProcessState {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return ProcessState::Gone;
    };
    // The command's name, in parentheses, may hold spaces: the state follows the last `)`.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    match state {
        Some('Z' | 'X') | None => ProcessState::Gone,
        Some('T' | 't') => ProcessState::Paused,
        Some(_) => ProcessState::Running,
    }
}

/// Something accepts connections on `port` of loopback.
///
/// A connection it made to itself does not count. Our servers listen on free ports of the
/// kernel's ephemeral range; asked to connect to such a port where nothing listens yet, the
/// kernel may pick that very port as the connection's own, and TCP's simultaneous open
/// connects the socket to itself. That connection also holds the port, so the server that
/// was starting cannot bind it ("Address already in use"): a lab round once lost an
/// instance so. The connection is dropped at once.
pub fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1))
        .is_ok_and(|stream| !connected_to_itself(&stream))
}

/// Whether `stream` is a connection a socket made to itself (see [`listening`]).
pub fn connected_to_itself(stream: &TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(local), Ok(peer)) if local == peer)
}

/// Asks `check` every 100 ms until it says yes, or `within` has passed: whether it did.
pub fn poll(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long a question to a server may take: a paused one accepts and never answers.
pub const ASKING: Duration = Duration::from_secs(1);

/// Sends `command` to the Redis (or Sentinel) on `port`, and waits `ASKING` at most for
/// the connection and for the answer.
pub fn ask_redis<T: redis::FromRedisValue>(port: u16, command: &redis::Cmd) -> anyhow::Result<T> {
    ask_redis_within(port, command, ASKING)
}

/// The same, for a command that takes longer (a MIGRATE, a FLUSHALL): `within` for its answer.
pub fn ask_redis_within<T: redis::FromRedisValue>(
    port: u16,
    command: &redis::Cmd,
    within: Duration,
) -> anyhow::Result<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut connection = client
        .get_connection_with_timeout(ASKING)
        .with_context(|| format!("nothing answers on {port}"))?;
    connection.set_read_timeout(Some(within))?;
    connection.set_write_timeout(Some(ASKING))?;
    command
        .query(&mut connection)
        .with_context(|| format!("the server on {port} refused or did not answer"))
}

/// `field` of an INFO-style answer (`role:master` lines): `info_field(&info, "role")`.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(field)?.strip_prefix(':'))
        .map(str::to_owned)
}

/// `field` of `INFO section` (or `CLUSTER INFO` when `section` is `cluster-info`) of the
/// Redis on `port`, if it answers.
pub fn redis_field(port: u16, section: &str, field: &str) -> Option<String> {
    let command = match section {
        "cluster-info" => redis::cmd("CLUSTER").arg("INFO").clone(),
        section => redis::cmd("INFO").arg(section).clone(),
    };
    info_field(&ask_redis::<String>(port, &command).ok()?, field)
}

/// The node of a Redis Cluster on `port` says `cluster_state:ok`: it serves every slot.
pub fn cluster_node_ok(port: u16) -> bool {
    redis_field(port, "cluster-info", "cluster_state").as_deref() == Some("ok")
}

/// One of ZooKeeper's four-letter words (`ruok`, `srvr`) to the server on `port`, and its
/// answer, if it gives one within `ASKING`.
pub fn zookeeper_word(port: u16, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), ASKING).ok()?;
    stream.set_read_timeout(Some(ASKING)).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// A ZooKeeper's mode (`leader`, `follower`, `standalone`), once it serves: it opens its
/// port before it is in a quorum, and then says no mode.
pub fn zookeeper_mode(port: u16) -> Option<String> {
    info_field(&zookeeper_word(port, "srvr")?, "Mode").map(|mode| mode.trim().to_owned())
}

/// The etcd member on `port`: its own id and the id of the leader it knows (0: none),
/// if it answers within `ASKING`.
pub async fn etcd_status(port: u16) -> Option<(u64, u64)> {
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut client = tokio::time::timeout(ASKING, etcd_client::Client::connect([endpoint], None))
        .await
        .ok()?
        .ok()?;
    let status = tokio::time::timeout(ASKING, client.status()).await.ok()?.ok()?;
    Some((status.header()?.member_id(), status.leader()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_to_itself_is_not_a_server_listening() {
        // The kernel's simultaneous open, made on purpose: a socket bound to a port where
        // nothing listens, connecting to that same port.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let own = socket.local_addr().unwrap();
        let stream = socket.connect(own).await.unwrap().into_std().unwrap();
        // What `listening` drops. (Its own connect cannot be made to connect to itself on
        // purpose: the kernel picks that port.)
        assert!(connected_to_itself(&stream));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(listening(listener.local_addr().unwrap().port()));
    }

    #[test]
    fn a_field_is_read_from_its_own_line_only() {
        let info = "# Replication\r\nrole:slave\r\nmaster_port:6486\r\nmaster_link_status:up\r\n";
        assert_eq!(info_field(info, "role").as_deref(), Some("slave"));
        assert_eq!(info_field(info, "master_port").as_deref(), Some("6486"));
        assert_eq!(
            info_field(info, "master").as_deref(),
            None,
            "a prefix of a field is not the field"
        );
        assert_eq!(info_field("Mode: leader\n", "Mode").as_deref(), Some(" leader"));
    }

    #[test]
    fn this_process_runs_and_a_pid_nobody_has_is_gone() {
        assert_eq!(process_state(std::process::id()), ProcessState::Running);
        assert_eq!(process_state(u32::MAX), ProcessState::Gone);
    }

    #[test]
    fn a_stopped_process_is_paused_and_a_killed_one_gone_before_it_is_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        send(pid, Signal::Stop).unwrap();
        assert!(poll(Duration::from_secs(5), || process_state(pid) == ProcessState::Paused));
        send(pid, Signal::Cont).unwrap();
        assert!(poll(Duration::from_secs(5), || process_state(pid) == ProcessState::Running));
        send(pid, Signal::Kill).unwrap();
        // Not reaped yet: a zombie, which counts as gone.
        assert!(poll(Duration::from_secs(5), || process_state(pid) == ProcessState::Gone));
        child.wait().unwrap();
        assert!(
            send(pid, Signal::Cont).is_err(),
            "a signal to a process that is gone fails"
        );
    }
}
