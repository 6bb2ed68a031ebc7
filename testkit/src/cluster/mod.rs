//! The servers of the chaos suite, replicated where the strategy is, as daemons on fixed
//! ports that outlive the command which started them: `scripts/cluster.sh` runs the
//! `cluster` binary (src/bin/cluster.rs), and this module is what it does.
//!
//! A test's private servers ([`crate::private_server`], [`crate::private_redis`]) belong
//! to one test and die with it. The cluster's members belong to no process: the chaos
//! suite kills and restarts them across many runs, and the bench reuses the stock cluster.
//! So a member is remembered by a pid file under `.run/cluster/pids/`, its output goes to
//! `.run/cluster/logs/NAME.log` and its data to `.run/cluster/NAME/`. Both kinds are
//! launched, signalled and asked the same way ([`crate::server_control`]).
//!
//! | file | what |
//! | --- | --- |
//! | [`members`] | who is in the cluster: names, kinds, ports |
//! | this file | start, await, stop, signal and restart a member |
//! | [`failover_group`] | the Redis that three Sentinels fail over |
//! | [`stock_cluster`] | the Redis Cluster of the stock: forming, healing, moving a segment |
//! | [`leaders`] | who leads etcd and ZooKeeper |
//! | [`report`] | `status` and `env` |

pub mod members;
pub mod failover_group;
pub mod leaders;
pub mod stock_cluster;
pub mod report;

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::server_control::{self, launch_command, listening, poll, process_state, ProcessState, Signal};
use members::{Kind, Member};

/// Prints one line of what the cluster did, as the scripts' `say` does.
pub fn say(line: impl std::fmt::Display) {
    println!("[cluster] {line}");
}

/// The cluster's folder (`.run/cluster/`), where each member keeps its pid, log and data.
pub struct Cluster {
    run: PathBuf,
}

impl Cluster {
    /// The cluster of the project in `root`.
    pub fn of_project() -> anyhow::Result<Self> {
        let run = crate::test_redis::project_root().join(".run/cluster");
        for folder in ["pids", "logs"] {
            std::fs::create_dir_all(run.join(folder)).with_context(|| format!("cannot create {}", run.display()))?;
        }
        Ok(Cluster { run })
    }

    pub fn run_folder(&self) -> &std::path::Path {
        &self.run
    }

    fn pid_file(&self, name: &str) -> PathBuf {
        self.run.join("pids").join(format!("{name}.pid"))
    }

    pub fn log_file(&self, name: &str) -> PathBuf {
        self.run.join("logs").join(format!("{name}.log"))
    }

    /// The member's data folder.
    fn data(&self, name: &str) -> PathBuf {
        self.run.join(name)
    }

    /// The pid this cluster started `name` with, if it did and the pid file is still there.
    fn pid_of(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.pid_file(name)).ok()?.trim().parse().ok()
    }

    /// What `name` is doing: gone when it never started here, was stopped or died.
    pub fn state(&self, name: &str) -> ProcessState {
        self.pid_of(name).map_or(ProcessState::Gone, process_state)
    }

    pub fn running(&self, name: &str) -> bool {
        self.state(name) != ProcessState::Gone
    }

    /// Runs `command` detached (its own session: a Ctrl-C in the terminal does not reach
    /// it), its output appended to the member's log, and remembers its pid.
    fn start_daemon(&self, name: &str, command: &[String]) -> anyhow::Result<()> {
        let log = OpenOptions::new().create(true).append(true).open(self.log_file(name))?;
        let child = Command::new("setsid")
            .args(command)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("could not run {}", command[0]))?;
        std::fs::write(self.pid_file(name), format!("{}\n", child.id()))?;
        Ok(())
    }

    /// Waits `within` for `check`, or fails naming the member's log.
    pub fn wait_for(&self, name: &str, within: Duration, check: impl FnMut() -> bool) -> anyhow::Result<()> {
        if !poll(within, check) {
            bail!(
                "{name} did not come up within {}s; its log is in {}",
                within.as_secs(),
                self.log_file(name).display()
            );
        }
        Ok(())
    }

    /// Starts one member, waiting only until a lone Redis answers: a member of a cluster
    /// waits for its peers ([`Cluster::await_serving`]).
    pub fn launch(&self, member: &Member) -> anyhow::Result<()> {
        let (name, port) = (member.name.as_str(), member.port);
        if self.running(name) {
            say(format!("{name}: already running on {port}"));
            return Ok(());
        }
        if listening(port) {
            bail!("port {port} ({name}) is taken by a server this script did not start; the chaos suite kills its members, so stop that one first");
        }
        let data = self.data(name);
        let port_text = port.to_string();
        let redis_options: Vec<String> = match member.kind {
            Kind::Redis {
                fsync_every_write: true,
            } => owned(&["--save", "", "--appendonly", "yes", "--appendfsync", "always"]),
            Kind::Redis {
                fsync_every_write: false,
            } => owned(&["--save", "", "--appendonly", "no"]),
            Kind::FailoverRedis => failover_group::redis_options(port)?,
            Kind::StockClusterNode => stock_cluster::node_options(),
            Kind::Sentinel => {
                let options = failover_group::sentinel_options(port);
                let options: Vec<&str> = options.iter().map(String::as_str).collect();
                return self.start_daemon(name, &launch_command("sentinel", &data, &options));
            }
            Kind::Etcd { number } => {
                let peer = members::ETCD_PEER_PORTS[number - 1].to_string();
                let cluster = members::etcd_initial_cluster();
                let command = launch_command("etcd", &data, &[name, &port_text, &peer, &cluster]);
                return self.start_daemon(name, &command);
            }
            Kind::ZooKeeper { number } => {
                let myid = number.to_string();
                let servers = members::zookeeper_servers();
                let mut args = vec![port_text.as_str(), myid.as_str()];
                args.extend(servers.iter().map(String::as_str));
                return self.start_daemon(name, &launch_command("zookeeper", &data, &args));
            }
            Kind::MariaDb => return self.start_mariadb(name, port),
        };
        let mut args = vec![port_text.as_str()];
        args.extend(redis_options.iter().map(String::as_str));
        self.start_daemon(name, &launch_command("redis", &data, &args))?;
        let ping = redis::cmd("PING");
        self.wait_for(name, Duration::from_secs(20), || {
            server_control::ask_redis::<String>(port, &ping).is_ok()
        })
    }

    /// A MariaDB with the database `seckill` and the account the MySQL strategies use.
    fn start_mariadb(&self, name: &str, port: u16) -> anyhow::Result<()> {
        let data = self.data(name);
        self.start_daemon(name, &launch_command("mariadb", &data, &[&port.to_string()]))?;
        let socket = format!("--socket={}", data.join("mysqld.sock").display());
        self.wait_for(name, Duration::from_secs(60), || {
            Command::new("mysqladmin")
                .args(["--no-defaults", &socket, "-uroot", "ping"])
                .output()
                .is_ok_and(|output| output.status.success())
        })?;
        let account = Command::new(server_control::launcher())
            .arg("mariadb-account")
            .arg(&data)
            .output()?;
        if !account.status.success() {
            bail!(
                "could not create the seckill account in {name}: {}",
                String::from_utf8_lossy(&account.stderr)
            );
        }
        Ok(())
    }

    /// Waits until a member serves: etcd and ZooKeeper only once they are in a quorum,
    /// the failover group once a failover would find a replica to promote.
    pub fn await_serving(&self, member: &Member) -> anyhow::Result<()> {
        let (name, port) = (member.name.as_str(), member.port);
        match member.kind {
            Kind::FailoverRedis | Kind::Sentinel => {
                self.wait_for(name, Duration::from_secs(30), || failover_group::ready(self))
            }
            Kind::StockClusterNode => {
                stock_cluster::form(self)?;
                self.wait_for(name, Duration::from_secs(30), || server_control::cluster_node_ok(port))
            }
            Kind::Etcd { .. } => self.wait_for(name, Duration::from_secs(60), || leaders::etcd_serves(port)),
            Kind::ZooKeeper { .. } => self.wait_for(name, Duration::from_secs(90), || {
                matches!(
                    server_control::zookeeper_mode(port).as_deref(),
                    Some("leader" | "follower")
                )
            }),
            Kind::Redis { .. } | Kind::MariaDb => self.wait_for(name, Duration::from_secs(60), || listening(port)),
        }
    }

    /// Starts every member (or those `named`) that is not running, in the members' order,
    /// then waits until each serves.
    pub fn start(&self, named: &[String]) -> anyhow::Result<()> {
        // Refuse a bad name before any work.
        for name in named {
            members::named(name)?;
        }
        let chosen: Vec<Member> = members::members()
            .into_iter()
            .filter(|member| named.is_empty() || named.contains(&member.name))
            .collect();
        let services = crate::test_redis::project_root().join("scripts/services.sh");
        let installed = Command::new(&services).arg("install").status()?;
        if !installed.success() {
            bail!(
                "`{} install` failed: the servers could not be installed",
                services.display()
            );
        }
        for member in &chosen {
            self.launch(member)?;
        }
        for member in &chosen {
            self.await_serving(member)?;
        }
        Ok(())
    }

    /// Stops what this cluster started (every member with a pid file, or those `named`):
    /// SIGCONT first, since a paused server cannot act on SIGTERM, then SIGTERM, then
    /// SIGKILL after 10 s. Servers it did not start have no pid file and keep running.
    pub fn stop(&self, named: &[String]) -> anyhow::Result<()> {
        let names: Vec<String> = match named.is_empty() {
            false => named.to_vec(),
            true => members::members().into_iter().map(|member| member.name).collect(),
        };
        for name in names {
            let Some(pid) = self.pid_of(&name) else { continue };
            if process_state(pid) != ProcessState::Gone {
                let _ = server_control::send(pid, Signal::Cont);
                let _ = server_control::send(pid, Signal::Term);
                if !poll(Duration::from_secs(10), || process_state(pid) == ProcessState::Gone) {
                    let _ = server_control::send(pid, Signal::Kill);
                }
                // Its other threads may still hold its port (see `kill`): a start that
                // follows must find it free.
                let port = members::named(&name)?.port;
                poll(Duration::from_secs(5), || !listening(port));
                say(format!("{name}: stopped"));
            }
            std::fs::remove_file(self.pid_file(&name))?;
        }
        Ok(())
    }

    /// Sends `signal` to a member this cluster started.
    pub fn signal(&self, name: &str, signal: Signal) -> anyhow::Result<()> {
        members::named(name)?;
        let pid = self
            .pid_of(name)
            .filter(|&pid| process_state(pid) != ProcessState::Gone);
        let Some(pid) = pid else {
            bail!("{name} is not running (or was not started by this script)");
        };
        server_control::send(pid, signal)
    }

    /// Kills a member (SIGKILL, a crash), and returns once it is gone and its port free. A
    /// process of many threads shows as a zombie while its other threads still exit and
    /// hold its sockets: a MariaDB restarted then found its port taken.
    pub fn kill(&self, name: &str) -> anyhow::Result<()> {
        let port = members::named(name)?.port;
        self.signal(name, Signal::Kill)?;
        poll(Duration::from_secs(5), || !self.running(name) && !listening(port));
        say(format!("{name}: killed"));
        Ok(())
    }

    /// Starts a killed member again, with its data, or without when `empty`.
    pub fn restart(&self, name: &str, empty: bool) -> anyhow::Result<()> {
        let member = members::named(name)?;
        if self.running(name) {
            bail!("{name} is still running; kill it first");
        }
        if empty {
            let data = self.data(name);
            if data.exists() {
                std::fs::remove_dir_all(&data).with_context(|| format!("cannot remove {}", data.display()))?;
            }
            say(format!("{name}: data removed"));
        }
        self.launch(&member)?;
        self.await_serving(&member)?;
        say(format!("{name}: started again on {}", member.port));
        Ok(())
    }
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}
