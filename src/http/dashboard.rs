//! The live dashboard: `GET /` serves one page (compiled into the binary, nothing
//! fetched from elsewhere), and `GET /events` streams the sale to it as server-sent
//! events, four times a second.
//!
//! Everything it shows is read from the stock Redis, which every instance shares, so
//! one page on either instance sees them all:
//! - `stock`, `lucky` and the stock of the last reset;
//! - the sale records written since the last event: who sold (the instance), and when
//!   it held the lock (`locked_at_ms` to `sold_at_ms`): the page draws the lock passing
//!   between the instances from them;
//! - the buyers turned away, by instance and error code (each instance counts its
//!   own in `stock:refusals` after answering, off the sale's path).
//!
//! Each stream keeps its place in the sales list and starts over after a reset (the
//! reset generation changed), so a class can reset and watch the next sale from zero.
//!
//! A stream outlives its request: the bound on requests in flight and the request
//! timeout let go of it once its headers are sent. So the streams have a bound of their
//! own, `--max-event-streams`, held for a stream's whole life ([`EventStreams`]). They
//! also read Redis on a connection of their own, made once at start: a reply of 2000 sale
//! records must not hold up the sales' commands queued behind it on theirs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Html;
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::StockSnapshot;
use crate::sale::error::AppError;
use crate::sale::stock::{number, SaleRecord, StockError, StockStore};

/// How often the page is told.
const TICK: Duration = Duration::from_millis(250);
/// Sale records sent per event at most; a page opened late catches up over a few events.
const RECORDS_PER_EVENT: usize = 2000;

/// The page. The markup, style and script are in `dashboard.html`, beside this file.
pub async fn page() -> Html<&'static str> {
    Html(include_str!("dashboard.html"))
}

/// What the page shows about the instance it came from.
#[derive(Clone, Serialize)]
pub struct Banner {
    pub strategy: &'static str,
    pub fencing: &'static str,
    pub instance: String,
}

/// One event: the sale now, and what happened since the last event.
#[derive(Serialize)]
struct Tick<'a> {
    banner: &'a Banner,
    /// The sale was reset since the last event (or this is the first): start over.
    reset: bool,
    stock: i64,
    lucky: i64,
    initial: Option<i64>,
    sales: Vec<SoldUnit>,
    refusals: Vec<(String, i64)>,
    /// When this was read, by this instance's clock (the records use the same clocks).
    now_ms: u64,
}

/// One unit, as the timeline draws it.
#[derive(Serialize)]
struct SoldUnit {
    instance: String,
    stock_before: i64,
    locked_at_ms: u64,
    sold_at_ms: u64,
}

impl From<SaleRecord> for SoldUnit {
    fn from(record: SaleRecord) -> Self {
        SoldUnit {
            instance: record.instance,
            stock_before: record.stock_before,
            locked_at_ms: record.locked_at_ms,
            sold_at_ms: record.sold_at_ms,
        }
    }
}

/// One look at the sale for the dashboard (see [`look_at_the_sale`]).
pub struct DashboardView {
    pub snapshot: StockSnapshot,
    pub generation: i64,
    pub records: Vec<SaleRecord>,
    /// Records read from each list of sale records, readable or not: where the next look
    /// starts. One list on one Redis, one per segment on a Redis Cluster.
    pub records_read: Vec<usize>,
    /// `("<instance> <error code>", count)`.
    pub refusals: Vec<(String, i64)>,
}

/// What the page shows: the counters, the reset generation, up to `limit` sale records
/// of each list from the index `from` holds for it on, and the refusals.
pub async fn look_at_the_sale(store: &StockStore, from: &[usize], limit: usize) -> Result<DashboardView, StockError> {
    let keys = store.keys();
    let snapshot = store.snapshot().await?;
    let mut connection = store.connection();
    let (generation, refusals): (Option<String>, Vec<(String, i64)>) = redis::pipe()
        .get(keys.generation())
        .hgetall(keys.refusals())
        .query_async(&mut connection)
        .await?;
    let (mut records, mut records_read) = (Vec::new(), Vec::new());
    for (list, group) in keys.groups(store.segments()).into_iter().enumerate() {
        let first = from.get(list).copied().unwrap_or(0);
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(keys.sales_of(group))
            .arg(first)
            .arg((first + limit).saturating_sub(1))
            .query_async(&mut connection)
            .await?;
        records.extend(
            raw.iter()
                .filter_map(|line| serde_json::from_str::<SaleRecord>(line).ok()),
        );
        records_read.push(raw.len());
    }
    Ok(DashboardView {
        snapshot,
        generation: number(&keys.generation(), generation.as_deref())?.unwrap_or(0),
        records,
        records_read,
        refusals,
    })
}

/// Counts a buyer turned away. Not part of any sale.
pub async fn count_refusal(store: &StockStore, instance: &str, code: &str) -> Result<(), StockError> {
    redis::cmd("HINCRBY")
        .arg(store.keys().refusals())
        .arg(format!("{instance} {code}"))
        .arg(1)
        .query_async::<i64>(&mut store.connection())
        .await?;
    Ok(())
}

/// The event streams of one instance: the sale, read on the streams' own connection,
/// and the places left under `--max-event-streams`. Cheap to clone.
#[derive(Clone)]
pub struct EventStreams {
    store: StockStore,
    places: Arc<Semaphore>,
    limit: u32,
}

impl EventStreams {
    /// `store` should read on a connection the sales do not use (see [`StockStore::reading_on`]).
    pub fn new(store: StockStore, limit: u32) -> Self {
        EventStreams {
            store,
            places: Arc::new(Semaphore::new(limit as usize)),
            limit,
        }
    }

    /// `GET /events`: a tick every [`TICK`]; a Redis that does not answer is an `error`
    /// event (the page says so), and the stream goes on. Refused with 503 `overloaded`
    /// while every place is taken.
    pub fn open(&self, banner: Banner) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, AppError> {
        let place = self
            .places
            .clone()
            .try_acquire_owned()
            .map_err(|_| AppError::TooManyEventStreams { open: self.limit })?;
        let cursor = Cursor {
            store: self.store.clone(),
            banner,
            generation: None,
            next_record: Vec::new(),
            _place: place,
        };
        let stream = futures_util::stream::unfold((cursor, true), |(mut cursor, first)| async move {
            if !first {
                tokio::time::sleep(TICK).await;
            }
            let event = cursor.next_event().await;
            Some((Ok(event), (cursor, false)))
        });
        Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
    }
}

/// Where one stream is in the sale.
struct Cursor {
    store: StockStore,
    banner: Banner,
    generation: Option<i64>,
    /// Where the next look starts in each list of sale records.
    next_record: Vec<usize>,
    /// The stream's place under `--max-event-streams`. The server drops the stream, and
    /// so this, when the client goes away.
    _place: OwnedSemaphorePermit,
}

impl Cursor {
    async fn next_event(&mut self) -> Event {
        let view = match look_at_the_sale(&self.store, &self.next_record, RECORDS_PER_EVENT).await {
            Ok(view) => view,
            Err(error) => {
                return Event::default().event("error").data(format!(
                    "the stock's Redis did not answer ({error}); is it running? `make services`"
                ))
            }
        };
        let reset = self.generation != Some(view.generation);
        if reset && self.generation.is_some() {
            // The list started over: read it again from its first record next time.
            self.generation = Some(view.generation);
            self.next_record.clear();
            return self.tick(true, &view.snapshot, Vec::new(), view.refusals);
        }
        self.generation = Some(view.generation);
        self.next_record.resize(view.records_read.len(), 0);
        for (next, read) in self.next_record.iter_mut().zip(&view.records_read) {
            *next += read;
        }
        let sales = view.records.into_iter().map(SoldUnit::from).collect();
        self.tick(reset, &view.snapshot, sales, view.refusals)
    }

    fn tick(&self, reset: bool, snapshot: &StockSnapshot, sales: Vec<SoldUnit>, refusals: Vec<(String, i64)>) -> Event {
        let tick = Tick {
            banner: &self.banner,
            reset,
            stock: snapshot.stock,
            lucky: snapshot.lucky,
            initial: snapshot.initial,
            sales,
            refusals,
            now_ms: crate::sale::stock::unix_ms(),
        };
        Event::default()
            .event("tick")
            .json_data(&tick)
            .unwrap_or_else(|_| Event::default().event("error"))
    }
}
