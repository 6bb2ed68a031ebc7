//! A TCP proxy between a test's client and a server, that loses or holds answers on demand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The proxy's trap: a marker to wait for, and how long to hold the answers after it.
type Trap = Arc<std::sync::Mutex<Option<(Vec<u8>, Duration)>>>;

/// What the proxy does with the bytes it relays, on every connection, old or new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Both ways, as they come.
    Pass,
    /// Requests pass and run; answers wait until the flow is `Pass` again.
    HoldAnswers,
    /// Nothing passes either way, for good: the server seems gone, yet no connection closes.
    CutOff,
}

/// A TCP proxy in front of a server (Redis, etcd, ZooKeeper) that can lose answers.
///
/// - [`arm`](Self::arm): the first request that mentions a marker reaches the server and
///   runs, but the answers on that connection are held back for a while, longer than the
///   client's timeout. That is "the answer was lost after the command ran", on demand.
/// - [`hold_answers`](Self::hold_answers) and [`pass_answers`](Self::pass_answers): the
///   same for every connection until told, so a client that opens a new one is held too.
/// - [`cut_off`](Self::cut_off): from then on nothing passes, as if the server froze.
pub struct AnswerLosingProxy {
    pub port: u16,
    armed: Trap,
    flow: watch::Sender<Flow>,
    task: tokio::task::JoinHandle<()>,
}

impl AnswerLosingProxy {
    pub async fn start(server_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Trap = Arc::default();
        let (flow, flow_seen) = watch::channel(Flow::Pass);
        let shared = armed.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", server_port))
                    .await
                    .unwrap();
                tokio::spawn(Self::relay(client, server, shared.clone(), flow_seen.clone()));
            }
        });
        AnswerLosingProxy {
            port,
            armed,
            flow,
            task,
        }
    }

    /// The proxy as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy as an etcd endpoint.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy as a ZooKeeper connect string.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Loses the answers after the next request that contains `marker`.
    pub fn arm(&self, marker: &[u8], hold: Duration) {
        *self.armed.lock().unwrap() = Some((marker.to_vec(), hold));
    }

    /// From now on requests pass and run, but no answer reaches the client.
    pub fn hold_answers(&self) {
        self.flow.send_replace(Flow::HoldAnswers);
    }

    /// Delivers the answers held so far, in order, and lets the next ones pass.
    pub fn pass_answers(&self) {
        self.flow.send_if_modified(|flow| {
            let held = *flow == Flow::HoldAnswers;
            if held {
                *flow = Flow::Pass;
            }
            held
        });
    }

    /// From now on nothing passes either way, and what was held is dropped. The
    /// connections stay open: the client hears nothing, not a close.
    pub fn cut_off(&self) {
        self.flow.send_replace(Flow::CutOff);
    }

    async fn relay(
        client: tokio::net::TcpStream,
        server: tokio::net::TcpStream,
        armed: Trap,
        flow: watch::Receiver<Flow>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client_reader, mut client_writer) = client.into_split();
        let (mut server_reader, mut server_writer) = server.into_split();
        let hold_until: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
        let holding = hold_until.clone();
        let requests_flow = flow.clone();
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
                if *requests_flow.borrow() == Flow::CutOff {
                    continue; // lost on the way
                }
                if server_writer.write_all(chunk).await.is_err() {
                    break;
                }
            }
        };
        let mut answers_flow = flow;
        let downstream = async move {
            let mut buffer = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = server_reader.read(&mut buffer).await {
                let until = *hold_until.lock().unwrap();
                if let Some(until) = until {
                    tokio::time::sleep_until(until.into()).await;
                }
                let flow = match answers_flow.wait_for(|flow| *flow != Flow::HoldAnswers).await {
                    Ok(flow) => *flow,
                    Err(_) => break, // the proxy is gone
                };
                if flow == Flow::CutOff {
                    continue; // lost on the way
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
