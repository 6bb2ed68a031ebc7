//! The checks that read the answers alone, against the model of the stock: `unique`,
//! `sold-out`, `real-time`, `one-per-buyer` and `linearizable`. Apart from the sale
//! records' checks, because a history checked alone (`loadtest check`) runs only these.

use std::collections::{BTreeMap, HashSet};

use crate::history::linearizable::{self, Linearizability, StockModel};
use crate::history::operations::{Operation, Outcome};

use super::{answer_of, at, named, Check, Finding, Status, SEARCH_LIMIT};

/// `unique`: no unit of a sale and segment sold to two buyers.
pub(super) fn unique<'a>(operations: impl IntoIterator<Item = &'a Operation>) -> Vec<Finding> {
    let mut buyers_of: BTreeMap<(&str, u32, i64), Vec<&Operation>> = BTreeMap::new();
    for operation in operations {
        if let Some(unit) = operation.sold_unit() {
            buyers_of
                .entry((&unit.sale, unit.segment, unit.unit))
                .or_default()
                .push(operation);
        }
    }
    buyers_of
        .iter()
        .filter(|(_, buyers)| buyers.len() > 1)
        .map(|((_, segment, unit), buyers)| {
            let text = format!("unit {unit} of segment {segment} was sold to {}", named(buyers));
            Finding::new(text, buyers)
        })
        .collect()
}

/// `sold-out`: "sold out" is legal only if every unit of every segment was taken by a
/// request sent before the answer came (sales, and requests whose outcome is unknown).
pub(super) fn sold_out(operations: &[Operation], model: &StockModel) -> Vec<Finding> {
    let mut findings = Vec::new();
    for operation in operations
        .iter()
        .filter(|operation| operation.outcome == Outcome::SoldOut)
    {
        let Some(answered) = operation.answered_us else {
            continue;
        };
        // Sent at the instant of the answer counts as sent before it: the two overlap.
        let sent_before: Vec<&Operation> = operations.iter().filter(|other| other.invoked_us <= answered).collect();
        let unknown = sent_before
            .iter()
            .filter(|other| matches!(other.outcome, Outcome::Unknown(_)))
            .count() as i64;
        let mut left = 0;
        for (segment, &units) in (0u32..).zip(&model.units_per_segment) {
            let taken: HashSet<i64> = sent_before
                .iter()
                .filter_map(|other| other.sold_unit())
                .filter(|unit| unit.sale == model.sale && unit.segment == segment)
                .map(|unit| unit.unit)
                .collect();
            left += (units - taken.len() as i64).max(0);
        }
        if left > unknown {
            let text = format!(
                "{} heard \"sold out\" at {}, but {left} unit(s) were never taken by a request sent before that",
                operation.name(),
                at(operations, answered)
            );
            findings.push(Finding::new(text, &[operation]));
        }
    }
    findings
}

/// `real-time`: no request sent after a "sold out" was answered comes back "sold".
pub(super) fn real_time(operations: &[Operation]) -> Vec<Finding> {
    let first_sold_out = operations
        .iter()
        .filter(|operation| operation.outcome == Outcome::SoldOut)
        .filter_map(|operation| operation.answered_us.map(|answered| (answered, operation)))
        .min_by_key(|(answered, _)| *answered);
    let Some((answered, sold_out)) = first_sold_out else {
        return Vec::new();
    };
    operations
        .iter()
        .filter(|operation| operation.invoked_us > answered)
        .filter_map(|operation| operation.sold_unit().map(|unit| (operation, unit)))
        .map(|(operation, unit)| {
            let text = format!(
                "{} was sent at {}, after {} heard \"sold out\" at {}, and bought unit {}",
                operation.name(),
                at(operations, operation.invoked_us),
                sold_out.name(),
                at(operations, answered),
                unit.unit
            );
            Finding::new(text, &[sold_out, operation])
        })
        .collect()
}

/// `one-per-buyer`: no buyer got two units.
pub(super) fn one_per_buyer(operations: &[Operation]) -> Vec<Finding> {
    let mut sales_of: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in operations.iter().filter(|operation| operation.sold_unit().is_some()) {
        if let Some(buyer) = &operation.buyer {
            sales_of.entry(buyer).or_default().push(operation);
        }
    }
    sales_of
        .iter()
        .filter(|(_, sales)| sales.len() > 1)
        .map(|(buyer, sales)| {
            let units: Vec<i64> = sales
                .iter()
                .filter_map(|sale| sale.sold_unit())
                .map(|unit| unit.unit)
                .collect();
            Finding::new(format!("{buyer} got units {units:?}"), sales)
        })
        .collect()
}

pub(super) fn linearizable(operations: &[Operation], model: &StockModel) -> Check {
    let name = "linearizable";
    match linearizable::check(operations, model, SEARCH_LIMIT) {
        Linearizability::Linearizable => Check::of(name, Vec::new()),
        Linearizability::Not {
            segment,
            stuck,
            linearized,
            units,
        } => {
            let operation = &operations[stuck];
            let text = format!(
                "in segment {segment}, after {linearized} request(s) in the longest order found, {} ({}) fits nowhere: \
                 the segment then held {units} unit(s)",
                operation.name(),
                answer_of(operation)
            );
            Check::of(name, vec![Finding::new(text, &[operation])])
        }
        Linearizability::Unknown { segment, after } => Check {
            name: name.to_owned(),
            status: Status::Unknown,
            findings: vec![format!("the search of segment {segment} gave up after {after:?}")],
            culprits: Vec::new(),
        },
    }
}
