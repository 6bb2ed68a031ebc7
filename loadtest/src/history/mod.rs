//! The history of a run: every buyer's request as it was sent and as it ended, and
//! every fault, on one clock. The verdict is drawn from it, as Jepsen draws its verdicts
//! from a history of invocations and completions checked against a model.
//!
//! 1. This module: the events, and the [`Recorder`] every load writes them with.
//! 2. [`operations`]: the events paired into operations, patched with what Redis
//!    persisted (as etcd's robustness tests patch theirs).
//! 3. [`checks`]: the named checks (`unique`, `lost`, `phantom`, `sold-out`, ...).
//! 4. [`linearizable`]: the whole history against a model of the stock, by
//!    Wing-Gong-Lowe.
//!
//! ## The file
//! `history.jsonl`, one JSON object per line, in the order they happened:
//!
//! ```text
//! {"at_us":12,"process":7,"type":"invoke","buyer":"buyer-7","host":"http://127.0.0.1:8090"}
//! {"at_us":4810,"process":7,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"9f..","segment":0,"unit":300,"sale_id":"5f.."}}
//! {"at_us":4903,"process":8,"type":"fail","answer":"sold_out"}
//! {"at_us":5120,"process":9,"type":"info","answer":"504 sale_outcome_unknown"}
//! {"at_us":2000,"process":"nemesis","type":"fault","fault":"pause","target":"seckill-8080"}
//! {"at_us":9000,"process":"nemesis","type":"fault","fault":"restock","target":"stock-redis","detail":"9f.."}
//! ```
//!
//! `at_us` is microseconds on the clock every process of the machine shares
//! (`CLOCK_MONOTONIC`), so a fault injected by another program lands where it happened.
//! A `process` sends one request at a time; its next event after an `invoke` is how that
//! request ended: `ok` (sold, with the unit), `fail` (nothing was sold: `sold_out`, or the
//! refusal's status and code), or `info` (the outcome is unknown: a 504, a timeout, a
//! lost connection).

pub mod operations;
pub mod linearizable;
pub mod checks;

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use seckill::api::SoldUnit;
use seckill::lock::FencingToken;

/// Who an event is about: a buyer's process, or the nemesis that injects faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    Buyer(u64),
    Nemesis(NemesisName),
}

/// The one name the nemesis goes by in a history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NemesisName {
    Nemesis,
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Microseconds on the machine's monotonic clock.
    pub at_us: u64,
    pub process: Process,
    #[serde(flatten)]
    pub what: What,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum What {
    /// A buyer sent `GET /stock/reduce` to `host`.
    Invoke {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        buyer: Option<String>,
        host: String,
    },
    /// Sold: the unit the answer named.
    Ok {
        instance: String,
        sold_unit: SoldUnit,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fencing_token: Option<FencingToken>,
    },
    /// Nothing was sold: `sold_out`, or the refusal (`503 lock_timeout`, `409 already_bought`).
    Fail { answer: String },
    /// The outcome is unknown: the answer (`504 sale_outcome_unknown`, `timeout`).
    Info { answer: String },
    /// A fault the nemesis injected, or ended, on `target`.
    Fault {
        fault: Fault,
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

/// The faults a history can hold. A fault that lasts begins with one kind and ends with
/// another ([`Fault::ended_by`]); the timeline draws it as a band between the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    Pause,
    Resume,
    Kill,
    Start,
    Partition,
    Delay,
    Heal,
    ClockJump,
    Failover,
    Reset,
    /// A hash slot moves to another master of a Redis Cluster, keys and all; a `heal` of
    /// the same target says it has moved.
    Reshard,
    /// The stock was put on sale again (`POST /stock/reset`) while buyers kept coming:
    /// the sale its `detail` names ended, with its records, and a new one began.
    Restock,
}

impl Fault {
    /// The kind that ends this one, for a fault that lasts.
    pub fn ended_by(self) -> Option<Fault> {
        match self {
            Fault::Pause => Some(Fault::Resume),
            Fault::Kill => Some(Fault::Start),
            Fault::Partition | Fault::Delay | Fault::Reset | Fault::Reshard => Some(Fault::Heal),
            _ => None,
        }
    }
}

/// The answer that ends "sold out": a `fail`, but one the model judges.
pub const SOLD_OUT: &str = "sold_out";

/// The `info` of a "sold" that did not name its unit (a seller older than `sold_unit`):
/// the sale records settle it, and without one the `lost` check fails it.
pub const SOLD_UNNAMED: &str = "sold, unit not named";

/// Microseconds on `CLOCK_MONOTONIC`, the clock every process of the machine shares.
pub fn now_us() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write into, and CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

/// Gathers the events of one run from every task that sends a request.
#[derive(Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
    /// Where each event is also written the moment it is recorded, for a page that draws
    /// the run while it runs (the lab); `None` for a history read only at the end.
    live: Option<Arc<Mutex<std::fs::File>>>,
}

impl Recorder {
    /// A recorder that also appends each event to the file at `path` (created empty) as it
    /// happens, one JSON line each, in the order they were recorded.
    pub fn live_to(path: &Path) -> anyhow::Result<Recorder> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot write the live history to {}", path.display()))?;
        Ok(Recorder {
            live: Some(Arc::new(Mutex::new(file))),
            ..Recorder::default()
        })
    }

    /// Records `what` about `process`, now.
    pub fn record(&self, process: Process, what: What) {
        let event = Event {
            at_us: now_us(),
            process,
            what,
        };
        if let Some(live) = &self.live {
            // One write per line, so that a reader never sees half an event. A line that
            // cannot be written is missing from the live view only: the history written
            // at the end has every event.
            let line = serde_json::to_string(&event).unwrap_or_default() + "\n";
            let _ = live
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .write_all(line.as_bytes());
        }
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event);
    }

    /// Every event so far, in the order of their clock.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        events.sort_by_key(|event| event.at_us);
        events
    }
}

/// The file beside the report at `report` that ends in `suffix`: `run.json` has its
/// history in `run.history.jsonl` and the faults another program added in
/// `run.faults.jsonl`.
pub fn beside_report(report: &Path, suffix: &str) -> std::path::PathBuf {
    let stem = report.file_stem().unwrap_or_default().to_string_lossy();
    report.with_file_name(format!("{stem}.{suffix}"))
}

/// Writes `events` to `path`, one JSON line each.
pub fn write(path: &Path, events: &[Event]) -> anyhow::Result<()> {
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write the history to {}", path.display()))?,
    );
    for event in events {
        serde_json::to_writer(&mut file, event)?;
        file.write_all(b"\n")?;
    }
    file.flush()?;
    Ok(())
}

/// Appends one fault to the file at `path`, stamped now: how a program that injects
/// faults (`scripts/chaos.sh`, through `loadtest record-fault`) puts them in the history
/// of the run it strikes. One short line per `write`, so that two writers do not mix.
pub fn append_fault(path: &Path, fault: Fault, target: &str, detail: Option<&str>) -> anyhow::Result<()> {
    let event = Event {
        at_us: now_us(),
        process: Process::Nemesis(NemesisName::Nemesis),
        what: What::Fault {
            fault,
            target: target.to_owned(),
            detail: detail.map(str::to_owned),
        },
    };
    let mut line = serde_json::to_vec(&event)?;
    line.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(&line))
        .with_context(|| format!("cannot add the fault to {}", path.display()))
}

/// Reads a history written by [`write`], or by another program that follows the format,
/// in the order of its clock. Names the line that is not an event.
pub fn read(path: &Path) -> anyhow::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the history {}", path.display()))?;
    parse(&text, &path.display().to_string())
}

/// Adds the faults another program wrote to `faults` (a nemesis, a script, the lab)
/// to `events`, in the order of their clock; nothing when the file does not exist.
pub fn merge_faults(events: &mut Vec<Event>, faults: &Path) -> anyhow::Result<()> {
    if faults.exists() {
        events.extend(read(faults)?);
        events.sort_by_key(|event| event.at_us);
    }
    Ok(())
}

/// The events of a history's `text`, in the order of their clock; `source` names it in
/// the error that names the line that is not an event.
pub fn parse(text: &str, source: &str) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let event: Event = serde_json::from_str(line)
            .with_context(|| format!("{source} line {}: not an event of a history", number + 1))?;
        events.push(event);
    }
    events.sort_by_key(|event| event.at_us);
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_recorder_has_each_event_in_its_file_the_moment_it_is_recorded() {
        let path = std::env::temp_dir().join(format!("live-history-{}.jsonl", std::process::id()));
        let recorder = Recorder::live_to(&path).unwrap();
        recorder.record(
            Process::Buyer(3),
            What::Fail {
                answer: SOLD_OUT.to_owned(),
            },
        );
        let first = std::fs::read_to_string(&path).unwrap();
        assert_eq!(first.lines().count(), 1, "written at once, not at the end: {first:?}");
        recorder.record(
            Process::Buyer(4),
            What::Info {
                answer: "timeout".to_owned(),
            },
        );
        let events = read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(events, recorder.events(), "the file holds what the recorder holds");
    }

    #[test]
    fn each_kind_of_event_reads_back_as_written() {
        let events = [
            r#"{"at_us":12,"process":7,"type":"invoke","buyer":"buyer-7","host":"http://127.0.0.1:8090"}"#,
            r#"{"at_us":4810,"process":7,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"s","segment":0,"unit":300,"sale_id":"a"}}"#,
            r#"{"at_us":4903,"process":8,"type":"fail","answer":"sold_out"}"#,
            r#"{"at_us":5120,"process":9,"type":"info","answer":"504 sale_outcome_unknown"}"#,
            r#"{"at_us":2000,"process":"nemesis","type":"fault","fault":"clock_jump","target":"seckill-8080","detail":"+30s"}"#,
        ];
        for line in events {
            let event: Event = serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}"));
            assert_eq!(serde_json::to_string(&event).unwrap(), line);
        }
        let fault: Event = serde_json::from_str(events[4]).unwrap();
        assert_eq!(fault.process, Process::Nemesis(NemesisName::Nemesis));
        assert!(matches!(
            fault.what,
            What::Fault {
                fault: Fault::ClockJump,
                ..
            }
        ));
    }

    #[test]
    fn a_line_that_is_not_an_event_is_named() {
        let path = std::env::temp_dir().join(format!("history-test-{}.jsonl", std::process::id()));
        std::fs::write(
            &path,
            "{\"at_us\":1,\"process\":1,\"type\":\"fail\",\"answer\":\"sold_out\"}\n{\"at_us\":2}\n",
        )
        .unwrap();
        let error = format!("{:#}", read(&path).unwrap_err());
        std::fs::remove_file(&path).unwrap();
        assert!(error.contains("line 2: not an event"), "{error}");
    }

    #[test]
    fn the_clock_goes_forward() {
        let (first, second) = (now_us(), now_us());
        assert!(first > 0 && second >= first, "{first} then {second}");
    }
}
