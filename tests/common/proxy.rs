//! A TCP proxy that can lose answers on demand.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The proxy's trap: a marker to wait for, and how long to hold the answers after it.
type Trap = Arc<std::sync::Mutex<Option<(Vec<u8>, Duration)>>>;

/// A TCP proxy in front of a Redis that can lose answers: once armed, the first
/// request that mentions `marker` reaches Redis and runs, but the answers on that
/// connection are held back for `hold`, longer than the client's response timeout.
/// That is "the answer was lost after the command ran", on demand.
pub struct AnswerLosingProxy {
    pub port: u16,
    armed: Trap,
    task: tokio::task::JoinHandle<()>,
}

impl AnswerLosingProxy {
    pub async fn start(redis_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Trap = Arc::default();
        let shared = armed.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await.unwrap();
                tokio::spawn(Self::relay(client, server, shared.clone()));
            }
        });
        AnswerLosingProxy { port, armed, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Loses the answers after the next request that contains `marker`.
    pub fn arm(&self, marker: &[u8], hold: Duration) {
        *self.armed.lock().unwrap() = Some((marker.to_vec(), hold));
    }

    async fn relay(client: tokio::net::TcpStream, server: tokio::net::TcpStream, armed: Trap) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client_reader, mut client_writer) = client.into_split();
        let (mut server_reader, mut server_writer) = server.into_split();
        let hold_until: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
        let holding = hold_until.clone();
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
                if server_writer.write_all(chunk).await.is_err() {
                    break;
                }
            }
        };
        let downstream = async move {
            let mut buffer = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = server_reader.read(&mut buffer).await {
                let until = *hold_until.lock().unwrap();
                if let Some(until) = until {
                    tokio::time::sleep_until(until.into()).await;
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
