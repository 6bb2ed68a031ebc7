//! The stock in Redis, and the operations a sale makes on it.
//!
//! Redis holds the sale in a few keys (names below): `stock`, the units left; `lucky`,
//! the buyers who got one; and `sales`, a list with one JSON [`SaleRecord`] per unit sold.
//! When every sale was exclusive, `stock + lucky` equals the initial stock, `sales`
//! has exactly `lucky` entries, and no `stock_before` value appears twice. With
//! `--one-per-buyer` the set `stock:buyers` holds every buyer who got a unit
//! ([`crate::sale::buyers`]).
//!
//! ## Fencing a read-modify-write
//! A fencing token protects a single write: the storage remembers the highest token it
//! has seen and refuses an older one. A sale is a read, a check and a write, so a token
//! checked only at the write still lets two overlapping holders sell the same unit: an
//! older holder writes first, then a newer one that read the same stock writes too.
//! So the stock Redis checks the token at both ends:
//! 1. **Fenced read** ([`READ_SCRIPT`]): raise the lock key's high-water mark to the
//!    holder's token and return the stock, or refuse if a newer token was already seen.
//! 2. **Fenced write** ([`WRITE_SCRIPT`]): commit `stock - 1`, `lucky + 1` and the sale
//!    record only while the high-water mark is still the holder's token. A newer holder
//!    that read in between has raised it, and the older holder's write is refused.
//!
//! Either refusal means the holder's lock was lost: the buyer gets 503 `lock_lost`
//! and nothing is sold. The fence counts its refusals (`stock:fence:refusals`, `read`
//! and `write`), so a run can show the fence's work beside the overlaps it caught. Without a token (the `none` and `local` baselines, or
//! `--fencing off`) the same scripts skip the check, and the race stays open.
//!
//! ## A write belongs to the sale it read from
//! A reset (`POST /stock/reset`) begins a new sale under a new name ([`Keys::sale_name`]).
//! A seller between its read and its write at that moment read the old sale's stock.
//! The fence does not stop it when it has no token (`redlock`, the baselines, `--fencing
//! off`), so the read returns the sale's name with the stock, and the write commits
//! only while that name is still the current one. Otherwise it writes nothing and
//! answers `reset`: an old read never becomes the new sale's stock, records or orders.
//!
//! ## A sale whose answer was lost
//! If the write's answer never arrives (a timeout, a broken connection), the seller
//! cannot know whether Redis ran it. Every write carries a sale id, and Redis keeps
//! one outcome per id in `stock:outcomes`: the write records `sold` only if no outcome
//! is there yet, and [`StockStore::settle`] records `aborted` only if none is there yet.
//! Whichever reaches Redis first decides, so the seller can ask and then tell the
//! buyer the truth. A reset deletes the outcomes, so a settle that finds the sale
//! renamed cannot know whether the write ran before the reset: it says so
//! ([`Settled::Unknown`]) and records nothing. The atomic script reads nothing before it
//! sells: it carries the name the last atomic answer gave, and every answer gives it.
//!
//! ## The atomic script
//! The `atomic` strategy runs the read, the check and the write as one Lua script
//! ([`ATOMIC_SALE_SCRIPT`]) inside Redis, which executes scripts one at a time. No lock,
//! one round trip: the speed ceiling.

mod answers;
mod record;
mod reset;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Script;

pub use self::answers::{AtomicOutcome, SaleName, Settled, StockError, StockRead, WriteOutcome};
pub use self::record::{SaleRecord, Seller};
pub use self::reset::RawSnapshot;
use crate::lock::FencingToken;
use crate::sale::buyers::BuyerId;
use crate::sale::keys::Keys;
use crate::sale::segments::{Segment, Segments};
use crate::store::redis_master::{MasterConnection, ReplicaWait};

/// Fenced read: raise the segment's high-water mark to the holder's token, or refuse.
/// Its keys and arguments head the script: `src/sale/stock/read.lua`.
pub const READ_SCRIPT: &str = include_str!("read.lua");

/// Fenced write: commit the sale only while the mark is still this read's.
/// Its keys and arguments head the script: `src/sale/stock/write.lua`.
pub const WRITE_SCRIPT: &str = include_str!("write.lua");

/// Settle a sale whose write went unanswered.
/// Its keys and arguments head the script: `src/sale/stock/settle.lua`.
pub const SETTLE_SCRIPT: &str = include_str!("settle.lua");

/// The whole sale in one script, with no lock.
/// Its keys and arguments head the script: `src/sale/stock/atomic_sale.lua`.
pub const ATOMIC_SALE_SCRIPT: &str = include_str!("atomic_sale.lua");

/// The stock keys in Redis and the operations on them.
#[derive(Clone)]
pub struct StockStore {
    connection: MasterConnection,
    read: Script,
    write: Script,
    settle: Script,
    atomic_sale: Script,
    /// How many segments a reset splits the stock into.
    segments: Segments,
    /// Whether the sale holds every buyer to one unit (`--one-per-buyer`, [`crate::sale::buyers`]).
    one_per_buyer: bool,
    /// Whether each sale appends an order to the orders stream (`--orders`, [`crate::orders`]).
    orders: bool,
    /// The sale's name as the last answer of the atomic script gave it, for the settle
    /// of a sale whose answer is lost (see [`StockStore::sale_seen_by_atomic`]).
    atomic_sale_seen: Arc<StdMutex<SaleName>>,
    /// Keys that other parts of the service keep per sale (the dashboard's refusals,
    /// the grant log):
    /// a reset deletes them in the same transaction.
    keys: Keys,
    /// With `--stock-wait-replicas`: the connection the sales are written on, and the
    /// `WAIT` each write takes there before it counts (see [`StockStore::with_replica_wait`]).
    replicated_writes: Option<(MasterConnection, ReplicaWait)>,
}

impl StockStore {
    pub fn new(connection: MasterConnection) -> Self {
        StockStore {
            connection,
            read: Script::new(READ_SCRIPT),
            write: Script::new(WRITE_SCRIPT),
            settle: Script::new(SETTLE_SCRIPT),
            atomic_sale: Script::new(ATOMIC_SALE_SCRIPT),
            segments: Segments::ONE,
            one_per_buyer: false,
            orders: false,
            atomic_sale_seen: Arc::default(),
            keys: Keys::default(),
            replicated_writes: None,
        }
    }

    /// Every sale is written on `writes`, and counts only once `wait.replicas` replicas
    /// acknowledged it (`WAIT`, on the same connection: it counts that client's writes).
    /// A failover then cannot lose a sale a buyer was told of, nor the fence's mark its
    /// read raised before it: the replica that has the write has everything the master
    /// sent before it. One connection for the writes, since `WAIT` blocks it: the reads
    /// of the other sales do not queue behind it.
    pub fn with_replica_wait(mut self, writes: MasterConnection, wait: ReplicaWait) -> Self {
        self.replicated_writes = Some((writes, wait));
        self
    }

    pub fn waits_for_replicas(&self) -> bool {
        self.replicated_writes.is_some()
    }

    /// How many replicas each sale waits for; 0 when it waits for none.
    pub fn replicas_waited_for(&self) -> u32 {
        self.replicated_writes.as_ref().map_or(0, |(_, wait)| wait.replicas)
    }

    /// The connection a sale's write goes on.
    fn writes(&self) -> MasterConnection {
        match &self.replicated_writes {
            Some((writes, _)) => writes.clone(),
            None => self.connection.clone(),
        }
    }

    /// Runs a selling script on the writes' connection. With a replica wait, the script
    /// and its `WAIT` go in one pipeline, so both reach the one server that runs the
    /// script: sent apart, the `WAIT` could follow a master that moved in between (a
    /// Sentinel's, or a slot's on a cluster) to a server where this connection wrote
    /// nothing, and that server would count its replicas at once. Answers the script's
    /// answer and, with a wait, how many replicas acknowledged it.
    pub(super) async fn run_selling<T: redis::FromRedisValue>(
        &self,
        call: &SellingCall<'_>,
    ) -> Result<(redis::RedisResult<T>, Option<u32>), StockError> {
        let mut writes = self.writes();
        let Some((_, wait)) = &self.replicated_writes else {
            let mut invocation = call.script.prepare_invoke();
            for key in &call.keys {
                invocation.key(key);
            }
            for arg in &call.args {
                invocation.arg(arg);
            }
            return Ok((invocation.invoke_async(&mut writes).await, None));
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("EVALSHA")
            .arg(call.script.get_hash())
            .arg(call.keys.len())
            .arg(&call.keys)
            .arg(&call.args)
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64);
        let (answer, acknowledged): (redis::RedisResult<T>, redis::RedisResult<u32>) =
            match pipe.query_async(&mut writes).await? {
                (Err(error), _) if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    call.script.load_async(&mut writes).await?;
                    pipe.query_async(&mut writes).await?
                }
                answers => answers,
            };
        Ok((answer, Some(acknowledged?)))
    }

    /// A sale's outcome once its script sold: with a replica wait, only when enough
    /// replicas acknowledged it.
    pub(super) fn replicated(&self, acknowledged: Option<u32>) -> Result<(), StockError> {
        let (Some((_, wait)), Some(acknowledged)) = (&self.replicated_writes, acknowledged) else {
            return Ok(());
        };
        if acknowledged < wait.replicas {
            return Err(StockError::NotReplicated {
                acknowledged,
                wanted: wait.replicas,
                timeout: wait.timeout,
            });
        }
        Ok(())
    }

    /// A reset splits the stock into `segments` ([`crate::sale::segments`]).
    pub fn with_segments(mut self, segments: Segments) -> Self {
        self.segments = segments;
        self
    }

    pub fn segments(&self) -> Segments {
        self.segments
    }

    /// The buyer that each segment's read checks too: with one unit per buyer on a
    /// cluster, where each segment keeps its own buyers (see [`crate::sale::buyers`]).
    pub fn buyer_to_check_per_segment<'b>(&self, buyer: Option<&'b BuyerId>) -> Option<&'b BuyerId> {
        buyer.filter(|_| self.one_per_buyer && self.keys.is_on_cluster())
    }

    /// Which of `buyers` got a unit of `segment` already, one answer each (`SMISMEMBER`, no
    /// lock: a set of buyers only grows during a sale). For a group that read a segment
    /// empty on a cluster, as the fenced read checks one buyer ([`crate::sale::buyers`]).
    pub async fn bought_here(&self, segment: Segment, buyers: &[&BuyerId]) -> Result<Vec<bool>, StockError> {
        let mut ask = redis::cmd("SMISMEMBER");
        ask.arg(self.keys.buyers_of(segment));
        for buyer in buyers {
            ask.arg(buyer.as_str());
        }
        Ok(ask.query_async(&mut self.connection.clone()).await?)
    }

    /// Whether `buyer` got a unit of any of `segments` already (a `SISMEMBER` each, no
    /// lock: a set of buyers only grows during a sale).
    pub async fn bought_in_any(&self, segments: &[Segment], buyer: &BuyerId) -> Result<bool, StockError> {
        for segment in segments {
            let bought: bool = redis::cmd("SISMEMBER")
                .arg(self.keys.buyers_of(*segment))
                .arg(buyer.as_str())
                .query_async(&mut self.connection.clone())
                .await?;
            if bought {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The sale refuses a second unit to a buyer, in the script that takes the unit.
    pub fn with_one_per_buyer(mut self, one_per_buyer: bool) -> Self {
        self.one_per_buyer = one_per_buyer;
        self
    }

    pub fn one_per_buyer(&self) -> bool {
        self.one_per_buyer
    }

    /// Each sale also appends its order to the orders stream, in the script that takes the unit.
    pub fn with_orders(mut self, orders: bool) -> Self {
        self.orders = orders;
        self
    }

    pub fn orders(&self) -> bool {
        self.orders
    }

    /// The rules both selling scripts apply once they take a unit, one unit per buyer and
    /// the order: their three keys (the buyers, the orders stream, the sale's name) go last
    /// among the KEYS, and their two arguments next among the ARGV (the buyer to hold to
    /// one unit, `1` to append the order; each empty when off).
    fn add_sale_rules(&self, call: &mut SellingCall<'_>, segment: Segment, record: &SaleRecord) {
        let buyer = match (self.one_per_buyer, &record.buyer) {
            (true, Some(buyer)) => buyer.as_str(),
            _ => "",
        };
        let order = if self.orders { "1" } else { "" };
        call.keys.extend([
            self.keys.buyers_of(segment),
            self.keys.orders_of(segment),
            self.keys.sale_name_of(segment),
        ]);
        call.args.extend([buyer.to_owned(), order.to_owned()]);
    }

    /// The sale's keys, named from a prefix (`--key-prefix`); the default names without.
    pub fn with_keys(mut self, keys: Keys) -> Self {
        self.keys = keys;
        self
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The connection, for a reader that adds keys of its own (the dashboard).
    pub fn connection(&self) -> MasterConnection {
        self.connection.clone()
    }

    /// The same sale, read on `connection`: for a reader whose long replies must not
    /// queue the sales' commands behind them (the dashboard's event streams). It sells nothing.
    pub fn reading_on(&self, connection: MasterConnection) -> StockStore {
        StockStore {
            connection,
            replicated_writes: None,
            ..self.clone()
        }
    }

    /// The name the last reset gave the sale, or `None` if none did (a Redis that lost
    /// its data, or a stock put there by hand).
    pub async fn sale_name(&self) -> Result<Option<String>, StockError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.sale_name())
            .query_async(&mut self.connection.clone())
            .await?)
    }

    pub async fn ping(&self) -> Result<(), StockError> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.connection.clone())
            .await?;
        Ok(())
    }

    /// Step 1 of a fenced sale: read `segment`'s stock under `token` (unfenced when `None`).
    pub async fn read(
        &self,
        segment: Segment,
        token: Option<&FencingToken>,
        sale_id: &str,
    ) -> Result<StockRead, StockError> {
        self.read_for(segment, token, sale_id, None).await
    }

    /// [`StockStore::read`] for `buyer`, whom a segment of a cluster refuses when they got a
    /// unit of it already ([`StockStore::buyer_to_check_per_segment`]).
    pub async fn read_for(
        &self,
        segment: Segment,
        token: Option<&FencingToken>,
        sale_id: &str,
        buyer: Option<&BuyerId>,
    ) -> Result<StockRead, StockError> {
        let mut invocation = self.read.key(self.keys.stock_of(segment));
        invocation
            .key(self.keys.fence_of(segment))
            .key(self.keys.fence_refusals_of(segment))
            .key(self.keys.segment_count_of(segment))
            .key(self.keys.sale_name_of(segment))
            .key(self.keys.buyers_of(segment))
            .arg(segment.of)
            .arg(self.buyer_to_check_per_segment(buyer).map_or("", BuyerId::as_str));
        if let Some(token) = token {
            invocation.arg(token.epoch).arg(token.counter).arg(sale_id);
        }
        // `{status, value}`, and the sale's name when the status is `ok`.
        let answer: Vec<String> = invocation.invoke_async(&mut self.connection.clone()).await?;
        let mut answer = answer.into_iter();
        let (status, value, sale) = (answer.next(), answer.next().unwrap_or_default(), answer.next());
        match status.as_deref() {
            Some("fenced") => Ok(StockRead::Fenced { newest: value }),
            Some("segments") => Ok(StockRead::OtherSegments { reset_with: value }),
            Some("repeat") => Ok(StockRead::AlreadyBought),
            _ => Ok(StockRead::Stock {
                units: number(&self.keys.stock(), Some(&value))?.unwrap_or(0),
                sale: SaleName(sale.unwrap_or_default()),
            }),
        }
    }

    /// Step 2 of a fenced sale: write `segment`'s `new_stock` and `record` under `token`,
    /// in the sale the read saw (`read_from`) and in no other.
    pub async fn write(
        &self,
        segment: Segment,
        record: &SaleRecord,
        new_stock: i64,
        read_from: &SaleName,
        token: Option<&FencingToken>,
    ) -> Result<WriteOutcome, StockError> {
        let json = serde_json::to_string(record).expect("a sale record serializes");
        let mut call = SellingCall {
            script: &self.write,
            keys: vec![
                self.keys.stock_of(segment),
                self.keys.lucky_of(segment),
                self.keys.sales_of(segment),
                self.keys.outcomes_of(segment),
                self.keys.fence_of(segment),
                self.keys.fence_refusals_of(segment),
                self.keys.total_stock_of(segment),
            ],
            args: vec![record.sale_id.clone(), new_stock.to_string(), json],
        };
        self.add_sale_rules(&mut call, segment, record);
        call.args.push(read_from.0.clone());
        if let Some(token) = token {
            call.args.extend([token.epoch.to_string(), token.counter.to_string()]);
        }
        let (outcome, acknowledged) = self.run_selling::<String>(&call).await?;
        Ok(match outcome?.as_str() {
            "sold" => {
                self.replicated(acknowledged)?;
                WriteOutcome::Sold
            }
            "reset" => WriteOutcome::SaleReset,
            "fenced" => WriteOutcome::Fenced,
            "repeat" => WriteOutcome::AlreadyBought,
            _ => WriteOutcome::Aborted,
        })
    }

    /// Decides a sale whose write went unanswered: sold if the write got there first,
    /// otherwise aborted for good (a late write is then refused). `read_from` is the sale
    /// the read saw (for the atomic script, [`StockStore::sale_seen_by_atomic`] before it
    /// was sent): once a reset renamed it, an outcome not found is unknown.
    pub async fn settle(&self, segment: Segment, sale_id: &str, read_from: &SaleName) -> Result<Settled, StockError> {
        let outcome: String = self
            .settle
            .key(self.keys.outcomes_of(segment))
            .key(self.keys.sale_name_of(segment))
            .arg(sale_id)
            .arg(&read_from.0)
            .invoke_async(&mut self.connection.clone())
            .await?;
        if outcome == "reset" {
            return Ok(Settled::Unknown);
        }
        Ok(match outcome.strip_prefix("sold:") {
            Some(stock_after) => Settled::Sold {
                stock_after: stock_after.parse().unwrap_or(0),
            },
            None => Settled::NotSold,
        })
    }

    /// The sale's name as this store's last atomic sale saw it (empty before the first).
    /// A sale takes it before it sends the script, and settles with it if the answer is
    /// lost: names never come back, so if it is still the sale's name at the settle, no
    /// reset erased the outcomes since the script was sent.
    pub fn sale_seen_by_atomic(&self) -> SaleName {
        self.atomic_sale_seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The whole sale as one script.
    pub async fn sell_atomically(&self, record: &SaleRecord) -> Result<AtomicOutcome, StockError> {
        let json = serde_json::to_string(record).expect("a sale record serializes");
        let whole = Segment::WHOLE;
        let mut call = SellingCall {
            script: &self.atomic_sale,
            keys: vec![
                self.keys.total_stock_of(whole),
                self.keys.lucky_of(whole),
                self.keys.sales_of(whole),
                self.keys.outcomes_of(whole),
                self.keys.segment_count_of(whole),
            ],
            args: vec![json, record.sale_id.clone()],
        };
        self.add_sale_rules(&mut call, whole, record);
        let (answer, acknowledged) = self.run_selling::<(i64, String)>(&call).await?;
        if let Ok((_, sale)) = &answer {
            *self
                .atomic_sale_seen
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = SaleName(sale.clone());
        }
        match answer {
            Ok((stock_before, sale)) if stock_before > 0 => {
                self.replicated(acknowledged)?;
                Ok(AtomicOutcome::Sold {
                    stock_before,
                    sale: SaleName(sale),
                })
            }
            Ok((-2, _)) => Ok(AtomicOutcome::Aborted),
            Ok((-3, _)) => Ok(AtomicOutcome::AlreadyBought),
            Ok(_) => Ok(AtomicOutcome::SoldOut),
            Err(error) if error.code() == Some("SEGMENTS") => Ok(AtomicOutcome::OtherSegments {
                reset_with: error.detail().unwrap_or_default().to_owned(),
            }),
            Err(error) if error.code() == Some("NOTANUMBER") => Err(StockError::NotANumber {
                key: self.keys.stock(),
                value: error.detail().unwrap_or_default().to_owned(),
            }),
            Err(error) => Err(error.into()),
        }
    }
}

/// A selling script (the fenced write, or the atomic sale) with its keys and arguments,
/// kept apart so that [`StockStore::run_selling`] can send it alone or before a `WAIT`.
pub(super) struct SellingCall<'s> {
    pub(super) script: &'s Script,
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<String>,
}

/// Parses a stored counter, naming the key if it holds something else.
pub(crate) fn number(key: &str, value: Option<&str>) -> Result<Option<i64>, StockError> {
    match value {
        None => Ok(None),
        Some(text) => text.trim().parse().map(Some).map_err(|_| StockError::NotANumber {
            key: key.to_owned(),
            value: text.to_owned(),
        }),
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
