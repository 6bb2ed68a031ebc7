//! Restock: the stock put on sale again while a steady load keeps buying, as a shop
//! restocks mid-sale (`POST /stock/reset` through an instance, as lesson 2 resets it).
//!
//! The reset ends the sale and deletes its records; a new sale, with a new name, begins.
//! A seller that read the old sale and writes after the reset is refused by the write's
//! check of the sale's name (`src/sale/stock/write.lua`), so no unit of the new sale is
//! taken twice. The history keeps the buyers of the old sale: the restock's event names
//! it, and the checker holds its answers to `unique` alone, their records being gone
//! (loadtest's `Restocks`).

use std::time::Duration;

use anyhow::{bail, Context};
use loadtest::history::Fault;
use loadtest::verdict::sale_state;
use seckill::sale::keys::Keys;

use crate::crowd::Kind;
use crate::lab::{Inner, Lab};

/// How long an instance may take to answer the reset: a paused one never does, and the
/// other is asked then.
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
    /// still sells: reads the name of the sale that ends, resets through the first
    /// instance that answers, and puts the restock in the history with that name.
    pub(crate) async fn restock(&self, generation: u64) -> anyhow::Result<()> {
        let inner = self.inner.lock().await;
        let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
            return Ok(()); // the setup changed meanwhile: its sale is gone
        };
        if let Some(why) = refusal(&inner) {
            bail!(why);
        }
        let stock_url = stage.servers.stock_url();
        let keys = Keys::for_stock_at("", &stock_url);
        let mut redis = sale_state::connect(&stock_url).await?;
        let ended: Option<String> = redis::cmd("GET")
            .arg(keys.sale_name())
            .query_async(&mut redis)
            .await
            .context("reading the name of the sale a restock ends")?;
        reset_through_any(&stage.hosts()).await?;
        self.record(&inner, Fault::Restock, "stock", &ended.unwrap_or_default())
    }
}

/// `POST /stock/reset` of a steady load's stock through the first of `hosts` that answers.
async fn reset_through_any(hosts: &[String]) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().timeout(RESET_WITHIN).build()?;
    let mut refused = Vec::new();
    for host in hosts {
        let answer = http
            .post(format!("{host}/stock/reset"))
            .json(&serde_json::json!({ "stock": crate::selling::STOCK }))
            .send()
            .await
            .and_then(|answer| answer.error_for_status());
        match answer {
            Ok(_) => return Ok(()),
            Err(error) => refused.push(format!("{host}: {error}")),
        }
    }
    bail!(
        "no instance took the reset ({}): is one of them paused or killed?",
        refused.join("; ")
    )
}
