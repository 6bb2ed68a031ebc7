//! The nemesis: network faults between one seckill instance and its lock backend.
//!
//! A pause (SIGSTOP) stops a whole process. A network fault is subtler: the instance
//! runs on, and only its talk with the lock backend goes wrong. `make chaos` puts one
//! nemesis in front of each instance's lock backend and strikes the one of instance 1.
//!
//! ## How it works
//! 1. **Links.** A link listens on a loopback port and carries every connection to one
//!    upstream server (a Redis, an etcd or ZooKeeper member, MariaDB). A backend of
//!    several members gets one link per member.
//! 2. **One fault at a time.** The fault in force lives in a `watch` channel; every
//!    connection of every link follows it the moment it changes.
//! 3. **Partition.** Nothing passes either way. Bytes read meanwhile are kept and arrive
//!    late, in order, at the heal, as TCP would retransmit them. A new connection is
//!    accepted and connected upstream only at the heal.
//! 4. **Delay.** Each chunk passes `ms` (plus up to `jitter_ms`) after it arrived, in
//!    order, one way or both.
//! 5. **Reset.** Every open connection is closed with an RST on both sides (`SO_LINGER`
//!    0), and each new one is reset as soon as it is accepted, until the heal.
//! 6. **Hold answers.** Requests pass and run; answers wait for the heal. A client times
//!    out on work the server did.
//! 7. **Blackhole.** Nothing passes and what is read is lost; no connection closes. The
//!    server seems frozen.
//! 8. **Answer trap.** One connection only: the first request that mentions a marker
//!    runs, and its connection's answers are held for a while after it. "The answer to
//!    this command was lost", aimed at one command.
//! 9. **Heal.** Bytes pass as they come again.
//!
//! A test puts one in front of one server with [`Proxy`].
//!
//! The binary `nemesis` serves the faults on a control port (see [`control`]).
//!
//! ## Limitations
//! - It cuts TCP streams, not packets: nothing is lost or reordered inside a
//!   connection, and the kernel's own timers (keepalive, retransmission) never fire.
//! - Bytes held by a partition or a delay are kept in memory, without a bound: fine for
//!   a lock's small requests, not for bulk traffic.
//! - Loopback only.

pub mod fault;
pub mod link;
pub mod control;
pub mod proxy;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use fault::{AnswerTrap, Delay, Direction, Fault};
pub use link::LinkSpec;
pub use proxy::Proxy;

/// One nemesis: its links, and the fault they all follow. Cheap to clone.
#[derive(Clone)]
pub struct Nemesis(Arc<Shared>);

struct Shared {
    faults: watch::Sender<Fault>,
    trap: fault::SetTrap,
    /// Connections carried now, on every link.
    open: Arc<AtomicUsize>,
    links: Mutex<Vec<(LinkSpec, JoinHandle<()>)>>,
}

/// What `GET /status` says.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    #[serde(flatten)]
    pub fault: Fault,
    /// `LISTEN -> UPSTREAM`, one a link.
    pub links: Vec<String>,
    pub open_connections: usize,
}

impl Nemesis {
    /// A nemesis without links, healed.
    pub fn new() -> Self {
        Nemesis(Arc::new(Shared {
            faults: watch::Sender::new(Fault::Healed),
            trap: Arc::default(),
            open: Arc::default(),
            links: Mutex::default(),
        }))
    }

    /// Starts carrying connections from `spec.listen` to `spec.upstream`. A listen port
    /// of 0 takes a free one; the answer is the address listened on.
    pub async fn link(&self, spec: LinkSpec) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(spec.listen).await?;
        let listen = listener.local_addr()?;
        let task = tokio::spawn(link::serve(
            listener,
            spec.upstream,
            self.0.faults.subscribe(),
            self.0.trap.clone(),
            self.0.open.clone(),
        ));
        let spec = LinkSpec { listen, ..spec };
        self.0.links.lock().unwrap().push((spec, task));
        Ok(listen)
    }

    /// Puts `fault` in force on every link at once.
    pub fn strike(&self, fault: Fault) {
        self.0.faults.send_replace(fault);
    }

    /// Sets `trap` for the next request, on any link, that mentions its marker.
    pub fn set_trap(&self, trap: AnswerTrap) {
        *self.0.trap.lock().unwrap() = Some(trap);
    }

    pub fn status(&self) -> Status {
        let links = self.0.links.lock().unwrap();
        Status {
            fault: *self.0.faults.borrow(),
            links: links
                .iter()
                .map(|(spec, _)| format!("{} -> {}", spec.listen, spec.upstream))
                .collect(),
            open_connections: self.0.open.load(Ordering::SeqCst),
        }
    }
}

impl Default for Nemesis {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Shared {
    /// Stops listening. Connections already carried end when their fault channel closes.
    fn drop(&mut self) {
        for (_, task) in self.links.get_mut().unwrap().drain(..) {
            task.abort();
        }
    }
}
