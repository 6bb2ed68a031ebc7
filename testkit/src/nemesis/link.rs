//! One link: a port on loopback whose connections are carried to one upstream server,
//! byte for byte, as the fault in force allows.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::fault::{ConnectionTrap, Fault, SetTrap, Way};

/// The most bytes read in one go.
const CHUNK: usize = 64 * 1024;
/// After a failed accept, the pause before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Accepts on `listener` for ever, and carries each connection to `upstream`.
/// `open` counts the connections carried now.
pub(super) async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: watch::Receiver<Fault>,
    trap: SetTrap,
    open: Arc<AtomicUsize>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors, say: try again in a moment rather than spin.
            tokio::time::sleep(ACCEPT_RETRY).await;
            continue;
        };
        let (faults, open) = (faults.clone(), open.clone());
        let trap = ConnectionTrap::new(trap.clone());
        tokio::spawn(async move {
            open.fetch_add(1, Ordering::SeqCst);
            carry_connection(client, upstream, faults, trap).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// One client's connection, from its accept to its end.
async fn carry_connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Fault>,
    trap: ConnectionTrap,
) {
    // A partition holds a new connection before its upstream half exists; a reset refuses it.
    loop {
        let fault = *faults.borrow_and_update();
        if fault == Fault::Reset {
            return abort(client);
        }
        if !fault.holds_new_connections() {
            break;
        }
        if faults.changed().await.is_err() {
            return;
        }
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return abort(client); // the server is down: the client learns it as it would without us
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));

    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let (requests, answers) = tokio::join!(
        carry(
            &mut from_client,
            &mut to_server,
            Way::ToServer,
            faults.clone(),
            trap.clone()
        ),
        carry(&mut from_server, &mut to_client, Way::ToClient, faults, trap),
    );
    if requests == Ending::Reset || answers == Ending::Reset {
        // Whole sockets again, so that closing them sends an RST on both sides.
        if let Ok(client) = from_client.reunite(to_client) {
            abort(client);
        }
        if let Ok(server) = from_server.reunite(to_server) {
            abort(server);
        }
    }
}

/// Closes with an RST: SO_LINGER 0 makes the close abortive, so the peer's next read
/// fails with "connection reset" instead of seeing a clean end of stream.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Why one way of a connection stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Its sender closed (or broke) and everything read was passed on.
    Closed,
    /// The nemesis reset the connection.
    Reset,
}

/// Bytes read and not yet passed on, with the instant they may be.
struct InTransit {
    bytes: Vec<u8>,
    due: Instant,
}

/// Carries one way of a connection. Reading never stops for a fault: bytes read under a
/// partition or a delay wait in `in_transit`, in order. So a delay adds to each chunk's
/// own arrival time instead of piling up, and a heal passes on at once what a partition held.
/// A blackhole drops them instead. `trap` looks at each request and holds the answers
/// of the connection whose request sprang it.
async fn carry(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    way: Way,
    mut faults: watch::Receiver<Fault>,
    trap: ConnectionTrap,
) -> Ending {
    let mut in_transit = VecDeque::<InTransit>::new();
    let mut buffer = vec![0u8; CHUNK];
    let mut reading = true;
    loop {
        let fault = *faults.borrow_and_update();
        if fault == Fault::Reset {
            return Ending::Reset;
        }
        if fault.loses() {
            in_transit.clear();
        }
        if !reading && in_transit.is_empty() {
            let _ = to.shutdown().await; // pass the end of stream on, as a FIN
            return Ending::Closed;
        }
        let next_due = in_transit.front().filter(|_| fault.passes(way)).map(|chunk| chunk.due);
        tokio::select! {
            read = from.read(&mut buffer), if reading => match read {
                Ok(0) | Err(_) => reading = false,
                // The fault now, not at the top of the loop: it may have changed while we read.
                Ok(n) => {
                    let fault = *faults.borrow();
                    if fault.loses() {
                        continue;
                    }
                    let bytes = buffer[..n].to_vec();
                    let mut due = fault.due(way, Instant::now());
                    match way {
                        Way::ToServer => trap.request(&bytes),
                        Way::ToClient => due = trap.answer_due(due),
                    }
                    in_transit.push_back(InTransit { bytes, due });
                }
            },
            () = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now).into()), if next_due.is_some() => {
                let chunk = in_transit.pop_front().expect("a chunk was due");
                if to.write_all(&chunk.bytes).await.is_err() {
                    return Ending::Closed;
                }
            }
            changed = faults.changed() => {
                if changed.is_err() {
                    return Ending::Closed; // the nemesis is gone
                }
            }
        }
    }
}

/// A link as the command line gives it: `LISTEN_PORT=UPSTREAM_HOST:PORT`, both on loopback
/// (the nemesis only ever stands between local processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
}

impl std::str::FromStr for LinkSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        use std::net::{Ipv4Addr, ToSocketAddrs};
        let usage = || format!("`{text}`: a link is LISTEN_PORT=UPSTREAM_HOST:PORT, e.g. 16480=127.0.0.1:6480");
        let (port, upstream) = text.split_once('=').ok_or_else(usage)?;
        let port: u16 = port.parse().map_err(|_| usage())?;
        let upstream = upstream
            .to_socket_addrs()
            .map_err(|_| usage())?
            .find(|address| address.ip().is_loopback())
            .ok_or_else(|| format!("`{text}`: the upstream must be on loopback (127.0.0.0/8)"))?;
        Ok(LinkSpec {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            upstream,
        })
    }
}
