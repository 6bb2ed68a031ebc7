//! The `mysql` lock's fencing token is the row's AUTO_INCREMENT id, and a later grant
//! has a larger id only when MariaDB hands the ids out in the order the inserts finish:
//! `innodb_autoinc_lock_mode = 0` (src/lock/mysql/mod.rs, step 5).
//!
//! The race behind that rule needs a thread that stops just after its insert took an id,
//! as one does when the machine takes its core away. Here gdb stops it on purpose: it
//! attaches to a MariaDB of the test's own, in non-stop mode (only the stopped thread
//! waits, the server goes on), and breaks where `handler::update_auto_increment`
//! returns. Buyer X's insert is stopped there while buyer Y tries the same lock.
//! - MariaDB's default mode, 1: Y is granted, sells and releases, then X is granted
//!   with the smaller id. The stock's fence would refuse X. This is the bug.
//! - Mode 0, what `make services` and docker-compose.yml run: Y waits until X's insert
//!   has finished, so the grants keep their order. The service refuses mode 1.
//!
//! x86-64 Linux only: the breakpoint reads the return address where that machine keeps
//! it, on top of the stack. gdb needs the right to trace MariaDB (root, as `make test`
//! runs here, or `kernel.yama.ptrace_scope` 0).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::{DistributedLock, LockError, LockGuard};
use seckill::strategy::Strategy;
use testkit::private_server::PrivateServer;

/// MariaDB's default, under which the ids come out of order.
const DEFAULT_MODE: &str = "--innodb-autoinc-lock-mode=1";
/// The lock both buyers want.
const NAME: &str = "stock";
/// How long Y gets to be granted while X is stopped: plenty for one insert.
const WHILE_X_IS_STOPPED: Duration = Duration::from_secs(2);

/// gdb, attached to one server in non-stop mode and driven through its stdin.
struct Debugger {
    gdb: Child,
    commands: ChildStdin,
    output: Receiver<String>,
    /// Everything gdb printed so far, for the waits and for a failure's message.
    seen: String,
}

impl Debugger {
    fn attach(pid: u32) -> Self {
        let mut gdb = Command::new("gdb")
            .args(["-q", "-nx"])
            .args([
                "-iex",
                "set non-stop on",
                "-iex",
                "set pagination off",
                "-iex",
                "set confirm off",
            ])
            .args(["-iex", "set language c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gdb runs (scripts/services.sh installs it)");
        let commands = gdb.stdin.take().unwrap();
        let (send, output) = mpsc::channel();
        forward(gdb.stdout.take().unwrap(), send.clone());
        forward(gdb.stderr.take().unwrap(), send);
        let mut debugger = Debugger {
            gdb,
            commands,
            output,
            seen: String::new(),
        };
        // In the background (`&`): every thread goes on running, none is stopped.
        debugger.send(&format!("attach {pid} &"));
        debugger.send(r"echo ATTACHED\n");
        debugger.wait_for("ATTACHED");
        debugger
    }

    fn send(&mut self, command: &str) {
        writeln!(self.commands, "{command}").expect("gdb reads its commands");
    }

    /// Waits until gdb has printed `text` since the last wait.
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(printed) => self.seen.push_str(&printed),
                Err(_) => panic!(
                    "gdb did not print {text:?} within 30 s (if it may not attach, run as root or \
                     set kernel.yama.ptrace_scope to 0); it printed:\n{}",
                    self.seen
                ),
            }
        }
        let after = self.seen.find(text).unwrap() + text.len();
        self.seen.drain(..after);
    }

    /// The next thread to take an AUTO_INCREMENT id stops right after it has one. At
    /// the function's first instruction the return address is at the top of the stack:
    /// a breakpoint there, for that thread only, stops it as the id is handed back.
    fn stop_the_next_insert_after_its_id(&mut self) {
        self.send("break *_ZN7handler21update_auto_incrementEv");
        self.wait_for("Breakpoint 1 at");
        for line in [
            "commands 1",
            "silent",
            "disable 1",
            r#"eval "tbreak *%lu thread %d", *(unsigned long *)$sp, $_thread"#,
            "continue",
            "end",
            r"echo COMMANDS-SET\n",
        ] {
            self.send(line);
        }
        self.wait_for("COMMANDS-SET");
    }

    fn wait_until_an_insert_is_stopped(&mut self) {
        self.wait_for("hit Temporary breakpoint");
    }

    fn let_it_go_and_detach(mut self) {
        self.send("continue -a &");
        self.send("detach");
        self.send("quit");
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.gdb.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.gdb.kill(); // still there after 10 s: the server dies with the test anyway
        let _ = self.gdb.wait();
    }
}

/// Sends what `stream` prints to `output`, as it comes.
fn forward(mut stream: impl Read + Send + 'static, output: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read) = stream.read(&mut buffer) {
            if read == 0
                || output
                    .send(String::from_utf8_lossy(&buffer[..read]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
}

fn options() -> MySqlLockOptions {
    MySqlLockOptions {
        ttl: Duration::from_secs(30),
        renew: false,
        permits: None,
    }
}

/// What each buyer's single attempt came to, and the grants in the order they were made.
struct Race {
    x: Result<u64, LockError>,
    y: Result<u64, LockError>,
    y_answered_while_x_was_stopped: bool,
    grants_in_order: Vec<(&'static str, u64)>,
    /// X's grant, still held, to release.
    x_guard: Option<LockGuard>,
    /// Y's lock handle, for a grant after X's.
    lock_y: MySqlLock,
}

/// One attempt of `who` on `lock`: the grant is written down the moment it is made. Y
/// releases at once (a sale that sold); X keeps its grant.
async fn take(
    who: &'static str,
    lock: MySqlLock,
    grants: Arc<Mutex<Vec<(&'static str, u64)>>>,
) -> (Result<u64, LockError>, Option<LockGuard>, MySqlLock) {
    let guard = match lock.try_acquire(NAME, &testkit::owner()).await {
        Ok(guard) => guard,
        Err(refused) => return (Err(refused), None, lock),
    };
    let token = guard.fencing_token().expect("the lock table fences").order().1;
    grants.lock().unwrap().push((who, token));
    if who == "X" {
        return (Ok(token), Some(guard), lock);
    }
    guard.release().await.expect("Y releases its own grant");
    (Ok(token), None, lock)
}

/// X's insert stops just after its id; meanwhile Y tries the lock. Then X goes on.
async fn race(server: &PrivateServer) -> Race {
    let pool = seckill::store::mysql::connect_checked(&server.mysql_url(), 8)
        .await
        .unwrap();
    let (lock_x, lock_y) = (MySqlLock::new(pool.clone(), options()), MySqlLock::new(pool, options()));
    let grants = Arc::new(Mutex::new(Vec::new()));

    let mut debugger = tokio::task::block_in_place(|| Debugger::attach(server.pid()));
    debugger.stop_the_next_insert_after_its_id();
    let x = tokio::spawn(take("X", lock_x, grants.clone()));
    tokio::task::block_in_place(|| debugger.wait_until_an_insert_is_stopped());
    let mut y = tokio::spawn(take("Y", lock_y, grants.clone()));
    let y_while_x_was_stopped = tokio::time::timeout(WHILE_X_IS_STOPPED, &mut y).await.ok();
    let y_answered_while_x_was_stopped = y_while_x_was_stopped.is_some();
    tokio::task::block_in_place(|| debugger.let_it_go_and_detach());

    let (x, x_guard, _) = x.await.unwrap();
    let (y, _, lock_y) = match y_while_x_was_stopped {
        Some(answered) => answered.unwrap(),
        None => y.await.unwrap(),
    };
    let grants_in_order = grants.lock().unwrap().clone();
    Race {
        x,
        y,
        y_answered_while_x_was_stopped,
        grants_in_order,
        x_guard,
        lock_y,
    }
}

fn tokens_grow(grants: &[(&str, u64)]) -> bool {
    grants.windows(2).all(|pair| pair[0].1 < pair[1].1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_mariadbs_default_mode_a_stalled_insert_is_granted_after_a_later_one_with_a_smaller_token() {
    let server = PrivateServer::mariadb_with(&[DEFAULT_MODE]);
    let race = race(&server).await;
    assert!(
        race.y_answered_while_x_was_stopped,
        "Y was not answered while X's insert was stopped after taking its id"
    );
    let (x, y) = (race.x.expect("X is granted"), race.y.expect("Y is granted first"));
    assert_eq!(
        race.grants_in_order,
        vec![("Y", y), ("X", x)],
        "Y's grant came first, then X's"
    );
    assert!(
        !tokens_grow(&race.grants_in_order),
        "X took its id first, so the later grant has the smaller token: {:?}",
        race.grants_in_order
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_autoinc_lock_mode_0_a_later_grant_always_has_the_larger_token() {
    let server = PrivateServer::mariadb();
    let race = race(&server).await;
    assert!(
        !race.y_answered_while_x_was_stopped,
        "Y was answered ({:?}) while X's insert held its id unfinished",
        race.y
    );
    let x = race.x.expect("X, whose insert came first, is granted");
    assert!(
        matches!(race.y, Err(LockError::Busy { .. })),
        "Y finds the row X inserted: {:?}",
        race.y
    );
    assert_eq!(race.grants_in_order, vec![("X", x)]);
    // The next grant, after X's release, outranks X's.
    race.x_guard.unwrap().release().await.unwrap();
    let next = race.lock_y.try_acquire(NAME, &testkit::owner()).await.unwrap();
    let next = next.fencing_token().unwrap().order().1;
    assert!(next > x, "the grant after X's has token {next}, X had {x}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_refuses_the_mysql_lock_on_a_server_in_the_default_mode() {
    let server = PrivateServer::mariadb_with(&[DEFAULT_MODE]);
    let url = server.mysql_url();
    let error = testkit::start_refused(Strategy::Mysql, &testkit::TestSale::new(), |config| {
        config.mysql_url = url
    })
    .await;
    for needed in [
        "innodb_autoinc_lock_mode = 0",
        "and it is 1",
        "--innodb-autoinc-lock-mode=0",
        "--lock mysql-version",
    ] {
        assert!(error.contains(needed), "the refusal says {needed:?}: {error}");
    }
    // The version lock does not use AUTO_INCREMENT: it starts on the same server.
    let version = testkit::instance_with(Strategy::MysqlVersion, &testkit::TestSale::new(), |config| {
        config.mysql_url = server.mysql_url()
    })
    .await;
    drop(version);
}
