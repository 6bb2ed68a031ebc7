//! The sale read back from Redis after the attack, not from the service, which could be
//! wrong: the counts, the sale records, the grant log and the fence's refusals. Apart
//! from the [`super::checker`] that judges it, because reading has its own troubles: a
//! cluster's segments on several masters, and a master that fails over meanwhile.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use seckill::sale::grant_log::GrantRecord;
use seckill::sale::keys::Keys;
use seckill::sale::segments::Segments;
use seckill::sale::stock::SaleRecord;
use seckill::store::redis_master::{connect_checked, MasterConnection};

/// The sale as Redis holds it after the attack.
pub struct SaleState {
    pub stock: i64,
    pub lucky: i64,
    /// Grows with every reset.
    pub generation: i64,
    /// The name the last reset gave the sale: what every sold answer of it names.
    pub sale_name: String,
    /// Into how many segments the last reset split the stock.
    pub segments: Segments,
    pub records: Vec<SaleRecord>,
    pub unreadable_records: usize,
    /// Each segment's units left, when the stock is split (empty when it is not).
    pub segment_stocks: Vec<i64>,
    /// Every grant a sale held and released, from the grant log.
    pub grants: Vec<GrantRecord>,
    /// The reads and the writes the fence refused.
    pub fence_refusals: FenceRefusals,
}

/// What the fence refused during the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRefusals {
    pub reads: usize,
    pub writes: usize,
}

/// The stock's Redis: one server, or the master its Sentinels name, as the instances
/// read it (`--redis-url` takes the same forms as `seckill serve`'s).
pub async fn connect(redis_url: &str) -> anyhow::Result<MasterConnection> {
    let role = "stock Redis to check the result";
    Ok(connect_checked(redis_url, role, "--redis-url / SECKILL_REDIS_URL")
        .await?
        .1)
}

/// The sale's reset generation, read before the attack.
pub async fn generation(redis_url: &str, keys: &Keys) -> anyhow::Result<i64> {
    let generation: Option<i64> = redis::cmd("GET")
        .arg(keys.generation())
        .query_async(&mut connect(redis_url).await?)
        .await?;
    Ok(generation.unwrap_or(0))
}

/// How long the checker waits for the stock's Redis to answer: a crowd may end while
/// the stock's master fails over (`make chaos`'s stock failover rows).
const READ_PATIENCE: Duration = Duration::from_secs(30);

/// How long the grant log must stay the same length before the sale is read, and how
/// long it is waited for at most.
const GRANTS_STILL_FOR: Duration = Duration::from_millis(50);
const GRANTS_SETTLE_WITHIN: Duration = Duration::from_secs(1);

/// The sale as Redis holds it now, under `keys`: on a Redis Cluster, each segment's
/// counts and records from the master that holds it, added up
/// ([`seckill::sale::keys`]). Read again, for up to [`READ_PATIENCE`], while Redis fails.
pub async fn read_sale(redis_url: &str, keys: &Keys) -> anyhow::Result<SaleState> {
    let started = Instant::now();
    wait_for_the_last_grants(redis_url, keys).await;
    loop {
        match read_sale_once(redis_url, keys).await {
            Err(error) if started.elapsed() < READ_PATIENCE => {
                eprintln!("the stock's Redis did not give the sale back ({error:#}); asking again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) if keys.is_on_cluster() => {
                return Err(error.context(format!(
                    "the stock's Redis Cluster at {redis_url} did not give the sale back for {READ_PATIENCE:?}: check \
                     that every node says cluster_state:ok (`redis-cli -p PORT cluster info`; `scripts/cluster.sh \
                     heal-stock-cluster` forms the cluster of `make cluster` again when a slot was left half moved)"
                )))
            }
            answer => return answer,
        }
    }
}

/// A seller tells its buyer before it releases the lock and logs the grant
/// ([`seckill::sale::grant_log`]), so the last holders' grants may still be on their way
/// when the last answer arrives. Waits until the log's length holds for
/// [`GRANTS_STILL_FOR`], within [`GRANTS_SETTLE_WITHIN`]; a Redis that fails is left to
/// the read, which asks again and says why.
async fn wait_for_the_last_grants(redis_url: &str, keys: &Keys) {
    let Ok(mut redis) = connect(redis_url).await else {
        return;
    };
    let deadline = Instant::now() + GRANTS_SETTLE_WITHIN;
    let mut before: Option<i64> = None;
    while Instant::now() < deadline {
        let Ok(now) = redis::cmd("LLEN")
            .arg(keys.grants())
            .query_async::<i64>(&mut redis)
            .await
        else {
            return;
        };
        if before == Some(now) {
            return;
        }
        before = Some(now);
        tokio::time::sleep(GRANTS_STILL_FOR).await;
    }
}

async fn read_sale_once(redis_url: &str, keys: &Keys) -> anyhow::Result<SaleState> {
    let mut redis = connect(redis_url).await?;
    type Sale = (Option<i64>, Vec<String>, Option<u32>, Option<String>);
    let (generation, raw_grants, count, sale_name): Sale = redis::pipe()
        .get(keys.generation())
        .lrange(keys.grants(), 0, -1)
        .get(keys.segment_count())
        .get(keys.sale_name())
        .query_async(&mut redis)
        .await
        .context("reading the sale back from Redis")?;
    let segments = Segments::as_stored(count);
    type Raw = (Option<i64>, Option<i64>, Vec<String>, BTreeMap<String, usize>);
    let (mut stock, mut lucky, mut raw, mut refusals) = (0, 0, Vec::new(), BTreeMap::new());
    // One round trip per place the counts are: one on one Redis, one per segment on a cluster.
    for group in keys.groups(segments) {
        let (units, buyers, records, refused): Raw = redis::pipe()
            .get(keys.total_stock_of(group))
            .get(keys.lucky_of(group))
            .lrange(keys.sales_of(group), 0, -1)
            .hgetall(keys.fence_refusals_of(group))
            .query_async(&mut redis)
            .await
            .context("reading the sale back from Redis")?;
        stock += units.unwrap_or(0);
        lucky += buyers.unwrap_or(0);
        raw.extend(records);
        for (step, count) in refused {
            *refusals.entry(step).or_default() += count;
        }
    }
    let segment_stocks = read_segment_stocks(&mut redis, keys, segments).await?;
    let (records, unreadable_records) = parse_records(&raw);
    let grants = raw_grants
        .iter()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let refused = |step: &str| refusals.get(step).copied().unwrap_or(0);
    Ok(SaleState {
        stock,
        lucky,
        generation: generation.unwrap_or(0),
        sale_name: sale_name.unwrap_or_default(),
        segments,
        records,
        unreadable_records,
        segment_stocks,
        grants,
        fence_refusals: FenceRefusals {
            reads: refused("read"),
            writes: refused("write"),
        },
    })
}

/// The sale records that parse, and how many did not: a record no one can read still
/// counts against `lucky`.
fn parse_records(raw: &[String]) -> (Vec<SaleRecord>, usize) {
    let mut records = Vec::with_capacity(raw.len());
    let mut unreadable_records = 0;
    for line in raw {
        match serde_json::from_str::<SaleRecord>(line) {
            Ok(record) => records.push(record),
            Err(_) => unreadable_records += 1,
        }
    }
    (records, unreadable_records)
}

/// Each segment's units left, when the last reset split the stock (none otherwise). One
/// `GET` each: on a cluster, the segments live on different masters.
async fn read_segment_stocks(
    redis: &mut MasterConnection,
    keys: &Keys,
    segments: Segments,
) -> anyhow::Result<Vec<i64>> {
    if segments == Segments::ONE {
        return Ok(Vec::new());
    }
    let mut stocks = Vec::new();
    for segment in segments.all() {
        let units: Option<i64> = redis::cmd("GET").arg(keys.stock_of(segment)).query_async(redis).await?;
        stocks.push(units.unwrap_or(0));
    }
    Ok(stocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's flake (a window of 786 units sold with 785 grants logged): a grant
    /// logged a moment after the last answer is read with the sale.
    #[tokio::test]
    async fn a_grant_logged_just_after_the_last_answer_is_read_with_the_sale() {
        let server = testkit::PrivateRedis::start();
        let keys = Keys::default();
        let mut seller = server.client().get_multiplexed_async_connection().await.unwrap();
        let grant = r#"{"instance":"i","granted_at_us":1,"released_at_us":2}"#;
        let (grants, late) = (keys.grants(), grant.to_owned());
        let releasing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            redis::cmd("RPUSH")
                .arg(grants)
                .arg(late)
                .query_async::<()>(&mut seller)
                .await
        });
        let sale = read_sale(&server.url(), &keys).await.unwrap();
        releasing.await.unwrap().unwrap();
        assert_eq!(sale.grants.len(), 1, "{:?}", sale.grants);
    }
}
