//! Restock: the stock put on sale again while a steady load keeps buying, as a shop
//! restocks mid-sale, by the code behind `POST /stock/reset` (lesson 2).
//!
//! The reset ends the sale and deletes its records; a new sale, with a new name, begins.
//! A sale under way that read the old sale and writes after the reset is refused by the
//! write's check of the sale's name (`src/sale/stock/write.lua`), so no unit of the new
//! sale is taken twice. The history keeps the buyers of the old sale: the restock's event
//! names it, and the checker holds its answers to `unique` alone, their records being
//! gone (loadtest's `Restocks`).
//!
//! The lab resets the stock's Redis itself rather than through an instance: a request
//! held by a fault (a paused instance, a link cut from the stock) would reset once more
//! when the fault ends, a new sale no history event names.

use std::time::Duration;

use anyhow::{bail, Context};
use loadtest::history::Fault;
use loadtest::verdict::sale_state;
use seckill::sale::keys::Keys;
use seckill::sale::segments::Segments;
use seckill::sale::stock::StockStore;

use crate::crowd::Kind;
use crate::failover::Which;
use crate::lab::{Inner, Lab, Stage};

/// How long the reset may take: a stock failing over may not answer.
const RESET_WITHIN: Duration = Duration::from_secs(5);

/// Why a restock cannot strike now, if it cannot: it ends a sale that a crowd's checks
/// judge whole, so it needs a steady load that still sells.
pub(crate) fn refusal(inner: &Inner) -> Option<String> {
    let steady = inner
        .crowd
        .as_ref()
        .is_some_and(|crowd| crowd.kind == Kind::Steady && crowd.is_running());
    (!steady).then(|| {
        "a restock ends the sale the buyers are judged in: press \"keep selling\" first, then restock \
         while they buy"
            .to_owned()
    })
}

impl Lab {
    /// Restocks the sale of the setup `generation`, if it still runs and a steady load
    /// still sells: reads the name of the sale that ends, resets, and puts the restock in
    /// the history with that name. Held under the lab's lock throughout, so that the event
    /// lands in the history of the load it restocked.
    pub(crate) async fn restock(&self, generation: u64) -> anyhow::Result<()> {
        let inner = self.inner.lock().await;
        let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
            return Ok(()); // the setup changed meanwhile: its sale is gone
        };
        if let Some(why) = refusal(&inner) {
            bail!(why);
        }
        let store = stock_of(stage).await?;
        let ended = store
            .sale_name()
            .await
            .context("reading the name of the sale a restock ends")?;
        let reset = tokio::time::timeout(RESET_WITHIN, store.reset(crate::selling::STOCK)).await;
        // Recorded whatever the reset answered: one cut mid-way may have ended the sale or
        // not, and the checker never sets apart the sale the records show current.
        self.record(
            &inner,
            Fault::Restock,
            Which::Stock.target(),
            &ended.unwrap_or_default(),
        )?;
        match reset {
            Ok(answer) => answer.context("resetting the stock's Redis for a restock"),
            Err(_) => bail!("the stock's Redis did not take the restock's reset within {RESET_WITHIN:?}"),
        }
    }
}

/// The stock of `stage`, as its instances sell it: its Redis, its keys, its segments.
async fn stock_of(stage: &Stage) -> anyhow::Result<StockStore> {
    let url = stage.servers.stock_url();
    let segments = Segments::new(stage.setup.segments).map_err(anyhow::Error::msg)?;
    Ok(StockStore::new(sale_state::connect(&url).await?)
        .with_segments(segments)
        .with_keys(Keys::for_stock_at("", &url)))
}
