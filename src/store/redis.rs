//! Connecting to Redis, with errors that say what to do.
//!
//! Every Redis call in the service goes through a [`ConnectionManager`]: one multiplexed
//! connection that reconnects by itself. Its timeouts are short on purpose: when Redis
//! is down a buyer should get a clear 503 quickly, not hang.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How long one command may take before it counts as failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long opening a TCP connection may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnect attempts before a command gives up (100 ms, 200 ms, then fail).
const RECONNECT_RETRIES: usize = 2;

/// Parses a Redis URL, naming the bad setting if it is not one.
pub fn client(url: &str) -> anyhow::Result<redis::Client> {
    redis::Client::open(url).map_err(|error| {
        anyhow::anyhow!(
            "`{url}` is not a Redis URL ({error}); set --redis-url / SECKILL_REDIS_URL to one like redis://127.0.0.1:6379"
        )
    })
}

/// A self-healing connection with the service's timeouts.
pub async fn connection_manager(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES);
    client.get_connection_manager_with_config(config).await
}

/// Connects and pings, or explains how to get a Redis running.
pub async fn connect_checked(url: &str) -> anyhow::Result<(redis::Client, ConnectionManager)> {
    let unreachable = |error: redis::RedisError| {
        anyhow::anyhow!(
            "cannot reach Redis at {url}: {error}.\n  Start one with `make services` (or `redis-server --port 6379`), \
             or point --redis-url / SECKILL_REDIS_URL at a running server."
        )
    };
    let client = client(url)?;
    let mut connection = connection_manager(&client).await.map_err(unreachable)?;
    let _: String = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .map_err(unreachable)?;
    Ok((client, connection))
}
