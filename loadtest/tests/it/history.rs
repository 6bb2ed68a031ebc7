//! How fast the history is judged: the check must be cheap enough to run on every run.
//! Two generated histories, shaped as the load test makes them: the crowd (500 buyers
//! at once, one lock, 300 units), and a long sale of 100,000 requests over 100
//! segments. Each is checked whole, then with one unit sold twice, which must be found.
//! The figures print with `-- --nocapture`; the bounds are for a debug build on two
//! loaded cores, far above what a release build takes.

use std::time::{Duration, Instant};

use loadtest::history::linearizable::{check, Linearizability, StockModel};
use loadtest::history::operations::pair;
use loadtest::history::{Event, Process, What};
use seckill::api::SoldUnit;

fn invoke(at_us: u64, process: u64) -> Event {
    Event {
        at_us,
        process: Process::Buyer(process),
        what: What::Invoke {
            buyer: Some(format!("buyer-{process}")),
            host: "http://127.0.0.1:8080".into(),
        },
    }
}

fn sold(at_us: u64, process: u64, segment: u32, unit: i64) -> Event {
    Event {
        at_us,
        process: Process::Buyer(process),
        what: What::Ok {
            instance: "seckill-8080".into(),
            sold_unit: SoldUnit {
                sale: "s".into(),
                segment,
                unit,
                sale_id: format!("sale-{process}"),
            },
            fencing_token: None,
        },
    }
}

fn ended(at_us: u64, process: u64, answer: &str, unknown: bool) -> Event {
    let answer = answer.to_owned();
    Event {
        at_us,
        process: Process::Buyer(process),
        what: if unknown {
            What::Info { answer }
        } else {
            What::Fail { answer }
        },
    }
}

/// 500 buyers sent at once; the lock sells units 300 down to 1, one every 100 µs, five
/// of the buyers time out, and the other 195 hear "sold out".
fn crowd() -> Vec<Event> {
    let mut events: Vec<Event> = (0..500).map(|process| invoke(0, process)).collect();
    for process in 0..300u64 {
        events.push(sold(1_000 + process * 100, process, 0, 300 - process as i64));
    }
    for process in 300..500u64 {
        let unknown = process < 305;
        let answer = if unknown { "timeout" } else { "sold_out" };
        events.push(ended(40_000 + process, process, answer, unknown));
    }
    events.sort_by_key(|event| event.at_us);
    events
}

/// 100,000 requests over 100 segments of 1,000 units, about 50 in flight per segment.
fn long_sale() -> Vec<Event> {
    let mut events = Vec::with_capacity(200_000);
    for segment in 0..100u32 {
        for k in 0..1_000u64 {
            let process = u64::from(segment) * 1_000 + k;
            let sent = k * 100 + u64::from(segment);
            events.push(invoke(sent, process));
            events.push(sold(sent + 5_000, process, segment, 1_000 - k as i64));
        }
    }
    events.sort_by_key(|event| event.at_us);
    events
}

/// Sells the unit of the request `process` to the request after it too.
fn sell_twice(events: &mut [Event], process: u64) {
    let unit = events
        .iter()
        .find_map(|event| match (&event.process, &event.what) {
            (Process::Buyer(p), What::Ok { sold_unit, .. }) if *p == process => Some(sold_unit.unit),
            _ => None,
        })
        .unwrap();
    for event in events.iter_mut() {
        if let (Process::Buyer(p), What::Ok { sold_unit, .. }) = (&event.process, &mut event.what) {
            if *p == process + 1 {
                sold_unit.unit = unit;
            }
        }
    }
}

fn timed(events: &[Event], model: &StockModel) -> (Linearizability, Duration) {
    let operations = pair(events);
    let started = Instant::now();
    let verdict = check(&operations, model, Duration::from_secs(60));
    (verdict, started.elapsed())
}

#[test]
fn the_crowd_is_judged_in_well_under_a_second() {
    let model = StockModel {
        sale: "s".into(),
        units_per_segment: vec![300],
    };
    let mut events = crowd();
    let (verdict, took) = timed(&events, &model);
    println!("the crowd (500 requests, 5 unknown): {verdict:?} in {took:?}");
    assert_eq!(verdict, Linearizability::Linearizable);
    assert!(took < Duration::from_secs(1), "{took:?}");
    sell_twice(&mut events, 120);
    let (verdict, took) = timed(&events, &model);
    println!("the crowd, unit 180 sold twice: {verdict:?} in {took:?}");
    assert!(
        matches!(verdict, Linearizability::Not { segment: 0, .. }),
        "{verdict:?}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_history_of_100_000_requests_is_judged_in_seconds() {
    let model = StockModel {
        sale: "s".into(),
        units_per_segment: vec![1_000; 100],
    };
    let mut events = long_sale();
    let (verdict, took) = timed(&events, &model);
    println!("100,000 requests over 100 segments: {verdict:?} in {took:?}");
    assert_eq!(verdict, Linearizability::Linearizable);
    assert!(took < Duration::from_secs(30), "{took:?}");
    sell_twice(&mut events, 57_500);
    let (verdict, took) = timed(&events, &model);
    println!("the same, one unit of segment 57 sold twice: {verdict:?} in {took:?}");
    assert!(
        matches!(verdict, Linearizability::Not { segment: 57, .. }),
        "{verdict:?}"
    );
}
