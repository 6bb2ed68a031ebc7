//! The orders check (`--orders true`, [`seckill::orders`]): once the stream has drained,
//! every unit sold has exactly one order in MySQL, and every order a unit sold.
//!
//! 1. **Drained**: the group has read every entry of the stream (`XINFO GROUPS`: its
//!    `lag`) and acknowledged every one it read (its `pending`). The checker waits for
//!    that for up to [`DRAIN_TIMEOUT`]. (A writer deletes what it acknowledged, but an
//!    empty stream is not the test: entries acknowledged by an older build stay.)
//! 2. **Written once**: the orders of this sale (by its name, `stock:sale`) are the sale
//!    records, one for one, by sale id.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use seckill::orders::ORDERS_GROUP;
use seckill::sale::keys::Keys;
use seckill::sale::segments::Segments;
use seckill::sale::stock::SaleRecord;
use seckill::store::redis_master::connect_checked;
use seckill::store::redis_master::{may_mean_the_master_moved, MasterConnection};

use super::crowd::Target;

/// How long the checker waits for the writers to write every order.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at the stream.
const POLL: Duration = Duration::from_millis(100);

/// The orders of one sale, once the stream drained (or the wait ran out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrdersState {
    /// Entries no writer had read, and entries read but not acknowledged, when the wait
    /// ended: both 0 once drained.
    pub unread: usize,
    pub pending: usize,
    /// How long the checker waited for the stream to drain, in milliseconds.
    pub waited_ms: u64,
    /// The sale ids of this sale's rows in `seckill_orders`.
    #[serde(skip)]
    pub written: BTreeSet<String>,
    /// How many rows that is.
    pub rows: usize,
}

/// With `--orders` (`target.orders`), the orders of the sale in `redis_url`, once drained.
pub async fn read_if_on(
    target: &Target,
    redis_url: &str,
    keys: &Keys,
    mysql_url: &str,
) -> anyhow::Result<Option<OrdersState>> {
    if !target.orders {
        return Ok(None);
    }
    Ok(Some(read_orders(redis_url, keys, mysql_url).await?))
}

/// Waits until the orders stream in `redis_url` drained, then reads this sale's orders from MySQL.
async fn read_orders(redis_url: &str, keys: &Keys, mysql_url: &str) -> anyhow::Result<OrdersState> {
    let (_, mut redis) = connect_checked(
        redis_url,
        "stock Redis to read the orders stream",
        "--redis-url / SECKILL_REDIS_URL",
    )
    .await?;
    let started = Instant::now();
    let (unread, pending, sale) = drain(&mut redis, keys, started + DRAIN_TIMEOUT).await?;
    let waited_ms = started.elapsed().as_millis() as u64;
    let mut mysql = connect_within(mysql_url, started + DRAIN_TIMEOUT).await?;
    let rows: Vec<(String,)> = sqlx::query_as("SELECT sale_id FROM seckill_orders WHERE sale = ?")
        .bind(sale.unwrap_or_default())
        .fetch_all(&mut mysql)
        .await
        .context("reading the orders from MySQL")?;
    mysql.close().await.ok();
    let written: BTreeSet<String> = rows.into_iter().map(|(sale_id,)| sale_id).collect();
    Ok(OrdersState {
        unread,
        pending,
        waited_ms,
        rows: written.len(),
        written,
    })
}

/// Polls the streams' backlog until it is empty or `deadline` passed; answers the last
/// backlog and the sale's name. A command that fails as when the master moves (the
/// stock's master failed over, or a connection was reset) is asked again until the
/// deadline: the connection follows the Sentinels to the new master, but the command it
/// failed on still fails. Any other error is an answer.
async fn drain(
    redis: &mut MasterConnection,
    keys: &Keys,
    deadline: Instant,
) -> anyhow::Result<(usize, usize, Option<String>)> {
    let mut said = false;
    loop {
        let answer = async {
            let (unread, pending) = backlog(redis, keys).await?;
            let sale: Option<String> = redis::cmd("GET").arg(keys.sale_name()).query_async(redis).await?;
            anyhow::Ok((unread, pending, sale))
        }
        .await;
        let may_pass = |error: &anyhow::Error| {
            let redis_error = error.downcast_ref::<redis::RedisError>();
            redis_error.is_some_and(may_mean_the_master_moved) && Instant::now() < deadline
        };
        match answer {
            Ok(drained @ (0, 0, _)) => return Ok(drained),
            Ok(backlog) if Instant::now() >= deadline => return Ok(backlog),
            Err(error) if !may_pass(&error) => {
                return Err(error.context("reading the orders stream's backlog from the stock's Redis"))
            }
            Err(error) if !std::mem::replace(&mut said, true) => {
                eprintln!("the stock's Redis did not say the orders' backlog ({error:#}); asking again");
            }
            _ => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A connection to MySQL at `mysql_url`, tried again until `deadline`: a database that
/// restarts while the sale ends (a fault of `make torture`) is waited for, within the
/// budget the orders have to drain, and said so once.
async fn connect_within(mysql_url: &str, deadline: Instant) -> anyhow::Result<sqlx::MySqlConnection> {
    let mut said = false;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(5), sqlx::MySqlConnection::connect(mysql_url))
            .await
            .context("timed out")
            .and_then(|connected| connected.context("cannot connect"));
        match attempt {
            Ok(connection) => return Ok(connection),
            Err(error) if Instant::now() < deadline => {
                if !std::mem::replace(&mut said, true) {
                    eprintln!("MySQL at {mysql_url} does not answer ({error:#}); waiting for it to check the orders");
                }
                tokio::time::sleep(POLL).await;
            }
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot reach MySQL at {mysql_url} to check the orders; fix --mysql-url"))
            }
        }
    }
}

/// The group's entries not yet read, and read but not acknowledged, in every orders
/// stream: one, or one per segment on a Redis Cluster.
async fn backlog(redis: &mut MasterConnection, keys: &Keys) -> anyhow::Result<(usize, usize)> {
    let count: Option<u32> = redis::cmd("GET").arg(keys.segment_count()).query_async(redis).await?;
    let segments = Segments::as_stored(count);
    let (mut unread, mut pending) = (0, 0);
    for group in keys.groups(segments) {
        let (stream_unread, stream_pending) = stream_backlog(redis, &keys.orders_of(group)).await?;
        unread += stream_unread;
        pending += stream_pending;
    }
    Ok((unread, pending))
}

/// One stream's backlog. Before any writer created the group, every entry counts as unread.
async fn stream_backlog(redis: &mut MasterConnection, stream: &str) -> anyhow::Result<(usize, usize)> {
    let entries: usize = redis::cmd("XLEN").arg(stream).query_async(redis).await?;
    if entries == 0 {
        return Ok((0, 0));
    }
    let groups: Vec<HashMap<String, redis::Value>> =
        redis::cmd("XINFO").arg("GROUPS").arg(stream).query_async(redis).await?;
    let name_is = |group: &HashMap<String, redis::Value>| matches!(group.get("name"), Some(redis::Value::BulkString(name)) if name == ORDERS_GROUP.as_bytes());
    let Some(group) = groups.iter().find(|group| name_is(group)) else {
        return Ok((entries, 0));
    };
    let count = |field: &str| match group.get(field) {
        Some(redis::Value::Int(n)) => usize::try_from(*n).ok(),
        _ => None,
    };
    let unread = match count("lag") {
        Some(lag) => lag,
        // Redis cannot always tell the lag (entries deleted past the group's last read):
        // count the entries after that read instead.
        None => {
            let last_read = match group.get("last-delivered-id") {
                Some(redis::Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
                _ => "0-0".to_owned(),
            };
            let after: Vec<redis::Value> = redis::cmd("XRANGE")
                .arg(stream)
                .arg(format!("({last_read}"))
                .arg("+")
                .query_async(redis)
                .await?;
            after.len()
        }
    };
    Ok((unread, count("pending").unwrap_or(0)))
}

/// What is wrong with the orders: `(oversold, lost)` findings.
pub fn judge_orders(orders: &OrdersState, records: &[SaleRecord]) -> (Vec<String>, Vec<String>) {
    let (mut oversold, mut lost) = (Vec::new(), Vec::new());
    if orders.unread + orders.pending > 0 {
        lost.push(format!(
            "the orders did not drain in {} s: {} entries unread and {} pending in the stream",
            DRAIN_TIMEOUT.as_secs(),
            orders.unread,
            orders.pending
        ));
    }
    let sold: BTreeSet<&str> = records.iter().map(|record| record.sale_id.as_str()).collect();
    let missing = sold
        .iter()
        .filter(|sale_id| !orders.written.contains(**sale_id))
        .count();
    let unsold = orders
        .written
        .iter()
        .filter(|sale_id| !sold.contains(sale_id.as_str()))
        .count();
    if missing > 0 {
        lost.push(format!("{missing} units sold have no order in MySQL"));
    }
    if unsold > 0 {
        oversold.push(format!("{unsold} orders in MySQL are for no unit sold"));
    }
    (oversold, lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sale_id: &str) -> SaleRecord {
        serde_json::from_value(serde_json::json!({
            "sale_id": sale_id, "instance": "i", "port": 1, "strategy": "redis",
            "lock_wait_ms": 0.0, "locked_at_ms": 0, "sold_at_ms": 0,
        }))
        .unwrap()
    }

    fn state(written: &[&str], pending: usize) -> OrdersState {
        OrdersState {
            unread: 0,
            pending,
            waited_ms: 0,
            written: written.iter().map(|id| id.to_string()).collect(),
            rows: written.len(),
        }
    }

    #[test]
    fn the_orders_of_a_sale_are_its_sale_records_one_for_one_once_drained() {
        let records = [record("a"), record("b")];
        assert_eq!(judge_orders(&state(&["a", "b"], 0), &records), (vec![], vec![]));
        let (_, lost) = judge_orders(&state(&["a"], 0), &records);
        assert_eq!(lost, ["1 units sold have no order in MySQL"]);
        let (oversold, _) = judge_orders(&state(&["a", "b", "c"], 0), &records);
        assert_eq!(oversold, ["1 orders in MySQL are for no unit sold"]);
        let (_, lost) = judge_orders(&state(&["a", "b"], 1), &records);
        assert!(lost[0].contains("did not drain"), "{lost:?}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_mysql_that_restarts_while_the_orders_are_checked_is_waited_for_until_the_deadline() {
        let mut mariadb = testkit::PrivateServer::mariadb();
        let url = mariadb.mysql_url();
        mariadb.stop();
        // Down for good: the deadline ends the wait, with the flag to fix.
        let error = connect_within(&url, Instant::now() + Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(format!("{error:#}").contains("fix --mysql-url"), "{error:#}");
        // Back after a while, as after a restart: the check waits for it.
        let restarted = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            mariadb.restart();
            mariadb
        });
        let connected = connect_within(&url, Instant::now() + Duration::from_secs(30)).await;
        let _mariadb = restarted.join().unwrap();
        assert!(connected.is_ok(), "{:#}", connected.err().unwrap());
    }

    /// The stock's Redis cut mid-drain (its connections reset, new ones refused for half a
    /// second): the backlog is asked again until the writer acknowledged the last entry.
    #[tokio::test]
    async fn a_drain_asks_again_across_a_reset_until_the_stream_is_drained() {
        use seckill::store::redis_master::MasterAddress;
        use testkit::nemesis::Fault;

        let server = testkit::PrivateRedis::start();
        let proxy = testkit::nemesis::Proxy::start(server.port).await;
        let (keys, stream) = (Keys::default(), Keys::default().orders());
        let mut writer = server.client().get_multiplexed_async_connection().await.unwrap();
        let entry: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("sale_id")
            .arg("a")
            .query_async(&mut writer)
            .await
            .unwrap();
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&stream)
            .arg(ORDERS_GROUP)
            .arg("0")
            .query_async(&mut writer)
            .await
            .unwrap();
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(ORDERS_GROUP)
            .arg("writer")
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(&mut writer)
            .await
            .unwrap();
        let address = MasterAddress::parse(&proxy.url()).unwrap();
        let mut checker = MasterConnection::connect(&address).await.unwrap();
        assert_eq!(
            backlog(&mut checker, &keys).await.unwrap(),
            (0, 1),
            "read, not acknowledged"
        );

        proxy.strike(Fault::Reset);
        let acknowledged = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            proxy.strike(Fault::Healed);
            let acknowledged: u32 = redis::cmd("XACK")
                .arg(&stream)
                .arg(ORDERS_GROUP)
                .arg(&entry)
                .query_async(&mut writer)
                .await
                .unwrap();
            (acknowledged, proxy)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let (unread, pending, _) = drain(&mut checker, &keys, deadline).await.unwrap();
        assert_eq!((unread, pending), (0, 0));
        assert_eq!(acknowledged.await.unwrap().0, 1);
    }
}
