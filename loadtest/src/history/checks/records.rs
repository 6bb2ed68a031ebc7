//! The checks that hold the answers against the sale records Redis persisted, in the
//! order they were written: `lost`, `phantom` and `fence-order`. Apart, because they
//! need those records: a history checked alone skips them.

use std::collections::{BTreeMap, HashMap, HashSet};

use seckill::sale::stock::SaleRecord;

use crate::history::operations::{Operation, Outcome};
use crate::history::SOLD_UNNAMED;

use super::{answer_of, Finding};

/// `lost`: every buyer told "sold" has its sale record, and the record took the unit
/// the answer named.
pub(super) fn lost(operations: &[Operation], records: &[SaleRecord]) -> Vec<Finding> {
    let recorded: HashMap<&str, &SaleRecord> = records.iter().map(|record| (record.sale_id.as_str(), record)).collect();
    let mut findings = Vec::new();
    for operation in operations {
        let text = match (&operation.outcome, operation.sold_unit()) {
            (_, Some(unit)) => match recorded.get(unit.sale_id.as_str()) {
                None => format!(
                    "{} was told it bought unit {} (sale {}), which no sale record holds",
                    operation.name(),
                    unit.unit,
                    unit.sale_id
                ),
                Some(record) if (record.segment.unwrap_or(0), record.stock_before) != (unit.segment, unit.unit) => {
                    format!(
                    "{} was told it bought unit {} of segment {}, but its record (sale {}) took unit {} of segment {}",
                    operation.name(),
                    unit.unit,
                    unit.segment,
                    unit.sale_id,
                    record.stock_before,
                    record.segment.unwrap_or(0)
                )
                }
                Some(_) => continue,
            },
            (Outcome::Unknown(answer), None) if answer == SOLD_UNNAMED => {
                format!(
                    "{} was told \"sold\" without a unit, and no sale record holds its sale",
                    operation.name()
                )
            }
            _ => continue,
        };
        findings.push(Finding::new(text, &[operation]));
    }
    findings
}

/// `phantom`: every sale record belongs to a buyer told "sold", or settled from an
/// unknown answer by the patch.
pub(super) fn phantom(operations: &[Operation], records: &[SaleRecord]) -> Vec<Finding> {
    let claimed: HashSet<&str> = operations
        .iter()
        .filter_map(|operation| operation.sold_unit().map(|unit| unit.sale_id.as_str()))
        .collect();
    // Per buyer, a request of it that was not told "sold": the one a phantom belongs to.
    let mut told: HashMap<&str, &Operation> = HashMap::new();
    for operation in operations.iter().filter(|operation| operation.sold_unit().is_none()) {
        if let Some(buyer) = operation.buyer.as_deref() {
            told.entry(buyer).or_insert(operation);
        }
    }
    records
        .iter()
        .filter(|record| !claimed.contains(record.sale_id.as_str()))
        .map(|record| {
            let buyer = record.buyer.as_deref().and_then(|buyer| told.get(buyer).copied());
            let heard = match buyer {
                Some(operation) => format!(", and {} heard {}", operation.name(), answer_of(operation)),
                None => ": no request claims it".to_owned(),
            };
            let text = format!(
                "sale {} of unit {} is in Redis{heard}",
                record.sale_id, record.stock_before
            );
            Finding::new(text, &buyer.into_iter().collect::<Vec<_>>())
        })
        .collect()
}

/// `fence-order`: along the order the records were written, each lock's tokens (a lock
/// is a token source and a segment) must grow; two records share a token only when they
/// name the same group. Each finding comes with the sale ids of its two records.
/// `None` when no record carries a token.
pub fn fence_regressions(records: &[SaleRecord]) -> Option<Vec<(String, [String; 2])>> {
    let mut last_of: BTreeMap<(&str, Option<u32>), &SaleRecord> = BTreeMap::new();
    let mut findings = Vec::new();
    for record in records {
        let Some(token) = &record.fencing_token else {
            continue;
        };
        let lock = (token.source.as_ref(), record.segment);
        if let Some(before) = last_of.insert(lock, record) {
            let earlier = before.fencing_token.as_ref().map(|token| token.order());
            let same_group = record.group.is_some() && record.group == before.group;
            let regressed = match earlier {
                Some(earlier) => token.order() < earlier || (token.order() == earlier && !same_group),
                None => false,
            };
            if regressed {
                let text = format!(
                    "sale {} (unit {}, token {token}) was written after sale {} (unit {}, token {})",
                    record.sale_id,
                    record.stock_before,
                    before.sale_id,
                    before.stock_before,
                    before
                        .fencing_token
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                );
                findings.push((text, [record.sale_id.clone(), before.sale_id.clone()]));
            }
        }
    }
    (!last_of.is_empty()).then_some(findings)
}

/// Findings about sale records, each with the requests told "sold" under the sale ids
/// it names: the timeline draws those in red.
pub(super) fn with_culprits(texts: Vec<(String, [String; 2])>, operations: &[Operation]) -> Vec<Finding> {
    let by_sale: HashMap<&str, &Operation> = operations
        .iter()
        .filter_map(|operation| operation.sold_unit().map(|unit| (unit.sale_id.as_str(), operation)))
        .collect();
    texts
        .into_iter()
        .map(|(text, sale_ids)| {
            let culprits: Vec<&Operation> = sale_ids
                .iter()
                .filter_map(|id| by_sale.get(id.as_str()).copied())
                .collect();
            Finding::new(text, &culprits)
        })
        .collect()
}
