//! What the servers answered per sale: each backend's own request counters, read before
//! and after the sustained windows, divided by the units sold meanwhile.
//!
//! A lock's critical path counts the round trips one grant must wait for; this counts
//! everything the servers did, waiters and renewals included, which is what a busy
//! server (etcd using a whole core, say) is busy with. Each server says it its own way:
//! - Redis (the stock's, the lock's, the Redlock masters): `INFO commandstats`, calls per
//!   command; a cluster's masters added up. A Lua script is one `evalsha`, and each
//!   command it calls counts as a call too: Redis keeps no count of what clients sent
//!   apart from what scripts ran.
//! - etcd: its `/metrics`, gRPC messages received per method (a unary call is one; a
//!   watch or keep-alive stream counts each message sent on it).
//! - MySQL: `SHOW GLOBAL STATUS`, statements by kind (`Com_select`, `Com_insert`, ...),
//!   and the pings a connection pool sends to test its connections (`Com_admin_commands`).
//! - ZooKeeper: the four-letter word `mntr`, packets received (it counts no kinds).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use seckill::config::Config;
use seckill::lock::critical_path::Backend;
use seckill::store::redis_cluster::ClusterAddress;
use seckill::strategy::Strategy;

/// One kind of request on one server, per unit sold.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestRate {
    pub server: String,
    pub request: String,
    pub per_sale: f64,
}

/// Counters by (server, request), as read at one moment.
pub type Counters = BTreeMap<(String, String), f64>;

/// The servers the strategy's sale talks to: the stock Redis, and its lock's backend.
fn servers_of(strategy: Strategy) -> Vec<Backend> {
    let mut servers = vec![Backend::StockRedis];
    if let Some(backend) = strategy.lock_backend() {
        servers.push(backend);
    }
    servers
}

/// Reads every counter of the strategy's servers; a server that cannot be read is
/// left out (its rows are missing, not wrong).
pub async fn read(strategy: Strategy, config: &Config) -> Counters {
    let mut counters = Counters::new();
    for backend in servers_of(strategy) {
        let read = match backend {
            Backend::StockRedis => redis_commands(std::slice::from_ref(&config.redis_url)).await,
            Backend::LockRedis if config.lock_redis_url() == config.redis_url => continue, // one server, counted once
            Backend::LockRedis => redis_commands(&[config.lock_redis_url().to_owned()]).await,
            Backend::RedlockMasters => redis_commands(&config.redlock.redlock_urls).await,
            Backend::Etcd => etcd_messages(&config.etcd.etcd_endpoints).await,
            Backend::Mysql => mysql_statements(&config.mysql_url).await,
            Backend::Zookeeper => zookeeper_packets(&config.zookeeper.zk_connect).await,
        };
        match read {
            Ok(read) => {
                for (request, count) in read {
                    *counters.entry((backend.name().to_owned(), request)).or_default() += count;
                }
            }
            Err(error) => eprintln!(
                "bench: cannot read the request counters of the {}: {error:#}",
                backend.name()
            ),
        }
    }
    counters
}

/// The requests made between two readings, per unit sold, busiest first; those below
/// one per hundred sales are left out.
pub fn per_sale(before: &Counters, after: &Counters, units_sold: usize) -> Vec<RequestRate> {
    let sold = units_sold.max(1) as f64;
    let mut rates: Vec<RequestRate> = after
        .iter()
        .map(|((server, request), count)| RequestRate {
            server: server.clone(),
            request: request.clone(),
            per_sale: (count - before.get(&(server.clone(), request.clone())).copied().unwrap_or(0.0)) / sold,
        })
        .filter(|rate| rate.per_sale >= 0.01)
        .collect();
    rates.sort_by(|a, b| b.per_sale.total_cmp(&a.per_sale));
    rates
}

/// `INFO commandstats` of every server, calls per command, added up; for a cluster, of
/// every master serving slots.
async fn redis_commands(urls: &[String]) -> anyhow::Result<Vec<(String, f64)>> {
    let mut servers = Vec::new();
    for url in urls {
        match ClusterAddress::parse(url) {
            None => servers.push(url.clone()),
            Some(cluster) => {
                let cluster = cluster.map_err(anyhow::Error::msg)?;
                servers.extend(
                    cluster
                        .masters()
                        .await?
                        .iter()
                        .map(|master| format!("redis://{master}")),
                );
            }
        }
    }
    let mut calls = Vec::new();
    for url in &servers {
        let client = redis::Client::open(url.as_str())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection)
            .await?;
        for line in info.lines() {
            // cmdstat_evalsha:calls=402061,usec=3776718,...
            let Some((command, stats)) = line.strip_prefix("cmdstat_").and_then(|line| line.split_once(':')) else {
                continue;
            };
            let count = stats
                .split(',')
                .find_map(|stat| stat.strip_prefix("calls="))
                .and_then(|count| count.parse::<f64>().ok());
            if let Some(count) = count {
                calls.push((command.to_owned(), count));
            }
        }
    }
    Ok(calls)
}

/// etcd's gRPC messages received, per method, from its `/metrics`.
async fn etcd_messages(endpoints: &[String]) -> anyhow::Result<Vec<(String, f64)>> {
    let mut messages = Vec::new();
    for endpoint in endpoints {
        let base = if endpoint.starts_with("http") {
            endpoint.clone()
        } else {
            format!("http://{endpoint}")
        };
        let page = reqwest::get(format!("{}/metrics", base.trim_end_matches('/')))
            .await?
            .text()
            .await?;
        for line in page
            .lines()
            .filter(|line| line.starts_with("grpc_server_msg_received_total{"))
        {
            let method = line
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next());
            let count = line.rsplit(' ').next().and_then(|count| count.parse::<f64>().ok());
            if let (Some(method), Some(count)) = (method, count) {
                messages.push((method.to_owned(), count));
            }
        }
    }
    Ok(messages)
}

/// MySQL's statements by kind, and its pings, server-wide.
async fn mysql_statements(url: &str) -> anyhow::Result<Vec<(String, f64)>> {
    use sqlx::Connection;
    let mut connection = sqlx::MySqlConnection::connect(url).await?;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('Com_select', 'Com_insert', 'Com_update', 'Com_delete', 'Com_insert_select', 'Com_admin_commands')",
    )
    .fetch_all(&mut connection)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, value)| Some((mysql_request_name(&name), value.parse().ok()?)))
        .collect())
}

/// `Com_insert` is an INSERT. `Com_admin_commands` counts the protocol's own commands,
/// of which a pool sends one kind: the ping that tests a connection.
fn mysql_request_name(counter: &str) -> String {
    match counter {
        "Com_admin_commands" => "PING".to_owned(),
        statement => statement.trim_start_matches("Com_").to_uppercase(),
    }
}

/// ZooKeeper's packets received (`mntr`), on the first server of the connect string.
async fn zookeeper_packets(connect: &str) -> anyhow::Result<Vec<(String, f64)>> {
    let address = connect.split(',').next().unwrap_or(connect);
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream.write_all(b"mntr").await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let packets = answer
        .lines()
        .find_map(|line| line.strip_prefix("zk_packets_received"))
        .and_then(|count| count.trim().parse::<f64>().ok())
        .ok_or_else(|| {
            anyhow::anyhow!("ZooKeeper did not answer `mntr` (is it in 4lw.commands.whitelist?): {answer}")
        })?;
    Ok(vec![("packets".to_owned(), packets)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_per_sale_are_the_difference_over_the_units_sold_busiest_first() {
        let counters = |pairs: &[(&str, f64)]| -> Counters {
            pairs
                .iter()
                .map(|(request, count)| (("etcd".to_owned(), request.to_string()), *count))
                .collect()
        };
        let before = counters(&[("Txn", 100.0), ("Range", 50.0), ("Put", 7.0)]);
        let after = counters(&[("Txn", 300.0), ("Range", 450.0), ("Put", 7.0), ("Watch", 100.0)]);
        let rates = per_sale(&before, &after, 200);
        let shown: Vec<(&str, f64)> = rates
            .iter()
            .map(|rate| (rate.request.as_str(), rate.per_sale))
            .collect();
        assert_eq!(
            shown,
            [("Range", 2.0), ("Txn", 1.0), ("Watch", 0.5)],
            "Put did not move"
        );
    }

    #[test]
    fn mysql_counters_are_named_by_the_request_they_count() {
        assert_eq!(mysql_request_name("Com_insert"), "INSERT");
        assert_eq!(mysql_request_name("Com_insert_select"), "INSERT_SELECT");
        assert_eq!(mysql_request_name("Com_admin_commands"), "PING");
    }
}
