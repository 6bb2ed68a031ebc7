//! The shared servers `make services` starts (etcd, ZooKeeper, MariaDB, the Redlock
//! masters), and what tests do to them from outside.

use std::time::{Duration, Instant};

/// etcd as `make services` starts it, or `SECKILL_TEST_ETCD_ENDPOINTS`.
pub fn etcd_endpoints() -> Vec<String> {
    std::env::var("SECKILL_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

pub fn etcd_options(ttl_ms: u64) -> seckill::lock::etcd::EtcdLockOptions {
    etcd_options_via(etcd_endpoints(), ttl_ms)
}

/// Options for an etcd lock that talks to etcd through `endpoints` (a proxy's, say).
pub fn etcd_options_via(endpoints: Vec<String>, ttl_ms: u64) -> seckill::lock::etcd::EtcdLockOptions {
    seckill::lock::etcd::EtcdLockOptions {
        endpoints,
        ttl: Duration::from_millis(ttl_ms),
    }
}

/// The port of the first etcd endpoint, for a proxy in front of it.
pub fn etcd_port() -> u16 {
    port_of(&etcd_endpoints()[0])
}

/// Revokes an etcd lease from another client, as if it had expired.
pub async fn revoke_etcd_lease(lease: i64) {
    let mut client = etcd_client::Client::connect(etcd_endpoints(), None)
        .await
        .expect("etcd runs (`make services`)");
    client.lease_revoke(lease).await.expect("the lease exists");
}

/// etcd's current revision: every later write gets a larger one.
pub async fn etcd_revision() -> i64 {
    let mut client = etcd_client::Client::connect(etcd_endpoints(), None)
        .await
        .expect("etcd runs (`make services`)");
    let answer = client.get("seckill/revision-probe", None).await.expect("etcd answers");
    answer.header().expect("a header").revision()
}

/// ZooKeeper as `make services` starts it, or `SECKILL_TEST_ZK_CONNECT`.
pub fn zookeeper_connect() -> String {
    std::env::var("SECKILL_TEST_ZK_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".to_owned())
}

pub fn zookeeper_options(session_timeout_ms: u64) -> seckill::lock::zookeeper::ZooKeeperLockOptions {
    zookeeper_options_via(zookeeper_connect(), session_timeout_ms)
}

/// Options for a ZooKeeper lock that connects through `connect` (a proxy's, say).
pub fn zookeeper_options_via(
    connect: String,
    session_timeout_ms: u64,
) -> seckill::lock::zookeeper::ZooKeeperLockOptions {
    seckill::lock::zookeeper::ZooKeeperLockOptions {
        connect,
        session_timeout: Duration::from_millis(session_timeout_ms),
    }
}

/// The port of the first ZooKeeper server, for a proxy in front of it.
pub fn zookeeper_port() -> u16 {
    port_of(zookeeper_connect().split(',').next().unwrap_or_default())
}

/// The port at the end of `http://host:port` or `host:port`.
fn port_of(address: &str) -> u16 {
    address
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {address}"))
}

/// Expires a ZooKeeper session from outside, the way ZooKeeper's own tests do: join
/// it from a second client with its id and password, then close it from there. The
/// owner may win its session back before the close arrives, so this repeats until the
/// owner's client reports the session ended.
pub async fn expire_zookeeper_session(owner: &zookeeper_client::Client) {
    const JOIN_TIMEOUT: Duration = Duration::from_secs(3);
    let mut last_error = None;
    for _ in 0..20 {
        // The join itself can hang for seconds past its connection timeout: bound it, but
        // not too tightly (a loaded machine once saw 20 joins in a row take over 1 s).
        let joined = tokio::time::timeout(
            JOIN_TIMEOUT,
            zookeeper_client::Client::connector()
                .with_session(owner.session().clone())
                .with_connection_timeout(Duration::from_millis(500))
                .connect(&zookeeper_connect()),
        )
        .await;
        match joined {
            Ok(Ok(intruder)) => drop(intruder), // closing the session from here expires it for its owner
            Ok(Err(error)) => last_error = Some(error.to_string()),
            Err(_) => last_error = Some(format!("the join took longer than {JOIN_TIMEOUT:?}")),
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if owner.state().is_terminated() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("could not expire the ZooKeeper session (last join error: {last_error:?})");
}

/// MariaDB as `make services` starts it (database and user `seckill`), or `SECKILL_TEST_MYSQL_URL`.
pub fn mysql_url() -> String {
    std::env::var("SECKILL_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://seckill:seckill@127.0.0.1:3306/seckill".to_owned())
}

/// The five Redlock masters `make services` starts, or `SECKILL_TEST_REDLOCK_URLS`.
pub fn redlock_urls() -> Vec<String> {
    std::env::var("SECKILL_TEST_REDLOCK_URLS")
        .map(|urls| urls.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|_| (6381..=6385).map(|port| format!("redis://127.0.0.1:{port}")).collect())
}

/// A pool on the test database, migrated.
pub async fn mysql_pool() -> sqlx::MySqlPool {
    seckill::store::mysql::connect_checked(&mysql_url(), 5)
        .await
        .expect("MariaDB runs (`make services`)")
}

/// The port of the test database, for a proxy in front of it.
pub fn mysql_port() -> u16 {
    let url = mysql_url();
    let host_and_port = url.rsplit('@').next().and_then(|rest| rest.split('/').next());
    port_of(host_and_port.unwrap_or_default())
}

/// A pool on the test database through a proxy on loopback `port`, migrated.
pub async fn mysql_pool_through(port: u16) -> sqlx::MySqlPool {
    let url = mysql_url().replace(&format!(":{}/", mysql_port()), &format!(":{port}/"));
    seckill::store::mysql::connect_checked(&url, 5)
        .await
        .expect("MariaDB runs (`make services`), and the proxy relays to it")
}
