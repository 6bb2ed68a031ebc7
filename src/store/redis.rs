//! One connection to one Redis server, with the service's timeouts.
//!
//! Every Redis call in the service goes through a [`ConnectionManager`]: one multiplexed
//! connection that reconnects by itself. Its timeouts are short on purpose: when Redis
//! is down a buyer should get a clear 503 quickly, not hang. Which server that is, when
//! Sentinels move the master, is [`super::redis_master`]'s business.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// How long one command may take before it counts as failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long opening a TCP connection may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnect attempts before a command gives up (100 ms, 200 ms, then fail).
const RECONNECT_RETRIES: usize = 2;

/// A self-healing connection with the service's timeouts.
pub async fn connection_manager(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES);
    client.get_connection_manager_with_config(config).await
}
