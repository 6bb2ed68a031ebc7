//! Step 1: one master, and the one connection every command to it goes on. A command
//! that is late is left to finish, so the commands on one connection run in order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// One master: its address, and the one connection every command to it goes on. It is
/// opened when first needed and replaced only after it failed, never because an answer
/// was slow (see [`Master::ask`]).
pub(super) struct Master {
    client: redis::Client,
    pub(super) address: String,
    /// The connection, with its number: the number tells a failed connection from the
    /// one that replaced it.
    connection: tokio::sync::Mutex<Option<(u64, MultiplexedConnection)>>,
    /// How many connections were opened, to number them.
    opened: AtomicU64,
}

/// One master's answer to one command.
pub(super) enum Vote {
    Yes,
    No,
    /// No answer within the node timeout, or an error.
    Silent,
}

impl Master {
    pub(super) fn new(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let address = client.get_connection_info().addr().to_string();
        Ok(Master {
            client,
            address,
            connection: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
        })
    }

    /// Runs `command` within `timeout` (connecting first if needed); an integer 1 or
    /// `OK` is a yes.
    ///
    /// A command not answered in time still runs: the master may only be slow. So it is
    /// not dropped but left to finish in the background, and the connection is kept.
    /// A master runs one connection's commands in the order sent, so the clean-up delete
    /// that follows a silent set on the same connection runs after that set. On a new
    /// connection it could run first, and the late set would keep the key for a TTL.
    pub(super) async fn ask(&self, timeout: Duration, command: &redis::Cmd) -> Vote {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut answered = self.ask_once(deadline, command).await;
        // The master restarted since we last spoke: one new connection, same deadline.
        if matches!(&answered, Some(Err(error)) if error.is_unrecoverable_error()) {
            answered = self.ask_once(deadline, command).await;
        }
        match answered {
            Some(Ok(redis::Value::Okay)) | Some(Ok(redis::Value::Int(1))) => Vote::Yes,
            Some(Ok(_)) => Vote::No,
            Some(Err(_)) | None => Vote::Silent,
        }
    }

    /// One try of [`Master::ask`]: the answer, or `None` if none came by `deadline`.
    async fn ask_once(
        &self,
        deadline: tokio::time::Instant,
        command: &redis::Cmd,
    ) -> Option<redis::RedisResult<redis::Value>> {
        let (number, mut connection) = match tokio::time::timeout_at(deadline, self.connection()).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(error)) => return Some(Err(error)),
            Err(_) => return None,
        };
        let command = command.clone();
        let mut answer = Box::pin(async move { command.query_async::<redis::Value>(&mut connection).await });
        match tokio::time::timeout_at(deadline, &mut answer).await {
            // Broken: replaced at the next command. (An error answer from the master
            // leaves the connection as good as it was.)
            Ok(Err(error))
                if error.is_unrecoverable_error() || !matches!(error.kind(), redis::ErrorKind::Server(_)) =>
            {
                self.forget(number).await;
                Some(Err(error))
            }
            Ok(answered) => Some(answered),
            Err(_) => {
                // The connection skips a command whose caller is gone, so someone must
                // wait for the answer, or a clean-up delete might never be sent.
                tokio::spawn(answer);
                None
            }
        }
    }

    /// Whether it answers a `PING` within `timeout`.
    pub(super) async fn answers_ping(&self, timeout: Duration) -> bool {
        let ping = redis::cmd("PING");
        let pinged = tokio::time::timeout(timeout, async {
            let (_, mut connection) = self.connection().await?;
            ping.query_async::<String>(&mut connection).await
        })
        .await;
        matches!(pinged, Ok(Ok(_)))
    }

    /// The connection and its number, opened if there is none.
    async fn connection(&self) -> redis::RedisResult<(u64, MultiplexedConnection)> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        // No timeouts of the client's own: the node timeout is ours, and a request the
        // client timed out could be skipped unsent (see `ask_once`).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let number = self.opened.fetch_add(1, Ordering::SeqCst);
        *slot = Some((number, connection.clone()));
        Ok((number, connection))
    }

    /// Drops connection `number` after it failed, unless another replaced it already.
    async fn forget(&self, number: u64) {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|(current, _)| *current == number) {
            *slot = None;
        }
    }
}
