//! The flash sale itself: one unit of stock sold per request, guarded by a lock.
//!
//! Redis holds three keys (names below): `stock`, the units left; `lucky`, the buyers
//! who got one; and `sales`, a list with one JSON [`SaleRecord`] per unit sold.
//! When every sale was exclusive, `stock + lucky` equals the initial stock, `sales`
//! has exactly `lucky` entries, and no `stock_before` value appears twice.
//!
//! ## The decrement under a lock
//! 1. Acquire the lock (wait at most the acquire timeout).
//! 2. `GET stock`. If it is 0, the sale is over: sold out.
//! 3. Write `stock - 1`, `INCR lucky` and append the sale record.
//! 4. Release the lock, whatever happened in 2 and 3.
//!
//! Steps 2 and 3 are separate round trips on purpose: between them another buyer can
//! read the same `stock`. That gap is the race the lock must close, and the `none`
//! strategy shows what happens when nothing does. Step 3 is one `MULTI`/`EXEC`
//! transaction only so that a crash cannot leave half a sale behind; it does not
//! close the gap, because the read in step 2 is outside it.
//!
//! ## The atomic script
//! The `atomic` strategy runs steps 2 and 3 as one Lua script inside Redis, which
//! executes scripts one at a time. No lock, one round trip: the speed ceiling.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use redis::Script;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::lock::{DistributedLock, Guarding, LockError, LockGuard, STOCK_LOCK_KEY};

/// Units left.
pub const STOCK_KEY: &str = "stock";
/// Buyers who got a unit.
pub const LUCKY_KEY: &str = "lucky";
/// One JSON [`SaleRecord`] per unit sold, in the order they were written.
pub const SALES_KEY: &str = "sales";
/// The stock the sale was last reset to, so a checker knows what to compare against.
pub const INITIAL_STOCK_KEY: &str = "stock:initial";

/// Steps 2 and 3 in one script. KEYS = stock, lucky, sales; ARGV[1] = the sale record
/// as JSON, which the script completes with `stock_before`. Returns the stock it found,
/// or -1 when sold out.
const ATOMIC_SALE_SCRIPT: &str = r#"
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock <= 0 then return -1 end
redis.call('SET', KEYS[1], stock - 1)
redis.call('INCR', KEYS[2])
local record = cjson.decode(ARGV[1])
record['stock_before'] = stock
redis.call('RPUSH', KEYS[3], cjson.encode(record))
return stock
"#;

/// Who sold a unit, when, and under which lock grant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SaleRecord {
    /// The instance that sold it (`--instance`, by default `seckill-<port>`).
    pub instance: String,
    pub port: u16,
    pub strategy: String,
    /// The stock this sale read. Two records with the same value sold the same unit.
    #[serde(default)]
    pub stock_before: i64,
    /// The lock's fencing token, when the strategy gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Milliseconds the buyer waited for the lock.
    pub lock_wait_ms: f64,
    /// Unix time, in milliseconds, when the lock was granted and when the sale was written.
    pub locked_at_ms: u64,
    pub sold_at_ms: u64,
}

/// The answer to one buyer.
#[derive(Clone, Debug, Serialize)]
pub struct SaleOutcome {
    pub sold: bool,
    /// The stock after this request: what it wrote, or 0 when sold out.
    pub stock_after: i64,
    pub lock_wait_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

/// The sale's counters, as `GET /stock` shows them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StockSnapshot {
    pub stock: i64,
    pub lucky: i64,
    pub sales: i64,
    /// The stock of the last reset; `null` if the sale was never reset.
    pub initial: Option<i64>,
}

/// Who is selling: stamped on every sale record.
#[derive(Clone, Debug)]
pub struct Seller {
    pub instance: String,
    pub port: u16,
    pub strategy: &'static str,
}

/// The stock keys in Redis and the operations on them.
#[derive(Clone)]
pub struct StockStore {
    connection: ConnectionManager,
    atomic_sale: Script,
}

impl StockStore {
    pub fn new(connection: ConnectionManager) -> Self {
        StockStore { connection, atomic_sale: Script::new(ATOMIC_SALE_SCRIPT) }
    }

    /// Puts `stock` units on sale and forgets every earlier sale.
    pub async fn reset(&self, stock: i64) -> redis::RedisResult<()> {
        redis::pipe()
            .atomic()
            .set(STOCK_KEY, stock)
            .set(LUCKY_KEY, 0)
            .set(INITIAL_STOCK_KEY, stock)
            .del(SALES_KEY)
            .query_async::<()>(&mut self.connection.clone())
            .await
    }

    /// Seeds `stock` units unless a sale already exists, so a fresh server starts ready.
    pub async fn seed_if_missing(&self, stock: i64) -> redis::RedisResult<()> {
        let created: bool = redis::cmd("SET")
            .arg(STOCK_KEY)
            .arg(stock)
            .arg("NX")
            .query_async::<Option<String>>(&mut self.connection.clone())
            .await?
            .is_some();
        if created {
            self.reset(stock).await?;
        }
        Ok(())
    }

    pub async fn snapshot(&self) -> redis::RedisResult<StockSnapshot> {
        let (stock, lucky, sales, initial): (Option<i64>, Option<i64>, i64, Option<i64>) = redis::pipe()
            .get(STOCK_KEY)
            .get(LUCKY_KEY)
            .llen(SALES_KEY)
            .get(INITIAL_STOCK_KEY)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(StockSnapshot { stock: stock.unwrap_or(0), lucky: lucky.unwrap_or(0), sales, initial })
    }

    /// Every sale record, oldest first.
    pub async fn sales(&self) -> redis::RedisResult<Vec<String>> {
        redis::cmd("LRANGE").arg(SALES_KEY).arg(0).arg(-1).query_async(&mut self.connection.clone()).await
    }

    pub async fn ping(&self) -> redis::RedisResult<()> {
        redis::cmd("PING").query_async::<String>(&mut self.connection.clone()).await.map(drop)
    }

    /// Sells one unit if any is left, the way `guarding` says.
    pub async fn sell_one(
        &self,
        guarding: &Guarding,
        seller: &Seller,
        acquire_timeout: Duration,
    ) -> Result<SaleOutcome, AppError> {
        match guarding {
            Guarding::Lock(lock) => self.sell_under_lock(lock.as_ref(), seller, acquire_timeout).await,
            Guarding::AtomicScript => self.sell_atomically(seller).await,
        }
    }

    async fn sell_under_lock(
        &self,
        lock: &dyn DistributedLock,
        seller: &Seller,
        acquire_timeout: Duration,
    ) -> Result<SaleOutcome, AppError> {
        // 1. Acquire.
        let waiting_since = Instant::now();
        let guard = lock.acquire(STOCK_LOCK_KEY, acquire_timeout).await?;
        let lock_wait_ms = waiting_since.elapsed().as_secs_f64() * 1000.0;

        // 2 and 3. Read, check, write.
        let outcome = self.decrement(&guard, seller, lock_wait_ms).await;

        // 4. Release, even if the decrement failed: the next buyer should not wait out a TTL.
        match lock.release(guard).await {
            Ok(()) => {}
            // The sale (if any) is written and counted; what is wrong is that someone else
            // may have held the lock at the same time. Say so loudly, but do not unsell.
            Err(LockError::Lost { key }) => {
                tracing::warn!(key, "lock expired before release: another buyer may have overlapped this sale")
            }
            Err(error) => tracing::warn!(%error, "release failed; the lease will expire on its own"),
        }
        outcome
    }

    async fn decrement(&self, guard: &LockGuard, seller: &Seller, lock_wait_ms: f64) -> Result<SaleOutcome, AppError> {
        let mut connection = self.connection.clone();
        let locked_at_ms = unix_ms(); // the lock was granted just before this call

        // 2. Read and check.
        let stock: i64 =
            redis::cmd("GET").arg(STOCK_KEY).query_async::<Option<i64>>(&mut connection).await?.unwrap_or(0);
        if stock <= 0 {
            return Ok(SaleOutcome { sold: false, stock_after: 0, lock_wait_ms, fencing_token: guard.fencing_token });
        }
        // A lease that ran out while we read means someone else may be selling now.
        if !guard.is_held() {
            return Err(AppError::LockLost);
        }

        // 3. Write: the new stock, one more lucky buyer, and the record of it.
        let record = SaleRecord {
            instance: seller.instance.clone(),
            port: seller.port,
            strategy: seller.strategy.to_owned(),
            stock_before: stock,
            fencing_token: guard.fencing_token,
            lock_wait_ms,
            locked_at_ms,
            sold_at_ms: unix_ms(),
        };
        redis::pipe()
            .atomic()
            .set(STOCK_KEY, stock - 1)
            .incr(LUCKY_KEY, 1)
            .rpush(SALES_KEY, serde_json::to_string(&record).map_err(AppError::internal)?)
            .query_async::<()>(&mut connection)
            .await?;
        Ok(SaleOutcome { sold: true, stock_after: stock - 1, lock_wait_ms, fencing_token: guard.fencing_token })
    }

    async fn sell_atomically(&self, seller: &Seller) -> Result<SaleOutcome, AppError> {
        let now = unix_ms();
        let record = SaleRecord {
            instance: seller.instance.clone(),
            port: seller.port,
            strategy: seller.strategy.to_owned(),
            stock_before: 0, // filled in by the script
            fencing_token: None,
            lock_wait_ms: 0.0,
            locked_at_ms: now,
            sold_at_ms: now,
        };
        let stock_before: i64 = self
            .atomic_sale
            .key(STOCK_KEY)
            .key(LUCKY_KEY)
            .key(SALES_KEY)
            .arg(serde_json::to_string(&record).map_err(AppError::internal)?)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(SaleOutcome {
            sold: stock_before > 0,
            stock_after: (stock_before - 1).max(0),
            lock_wait_ms: 0.0,
            fencing_token: None,
        })
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
