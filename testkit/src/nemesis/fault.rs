//! What the nemesis does to the bytes right now: one fault at a time, for every link.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The fault in force. Every connection of every link follows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// Bytes pass as they come.
    #[default]
    Healed,
    /// Nothing passes either way. Bytes read meanwhile wait, in order, for the heal;
    /// a new connection is accepted but not connected upstream until then.
    Partition,
    /// Bytes pass, each late by the delay (one way or both), in order.
    Delay(Delay),
    /// Every open connection was reset (an RST, not a FIN), and new ones are reset at once.
    Reset,
    /// Requests pass and run; the answers wait, in order, for the heal. So a client
    /// times out on work the server did, and hears of it late.
    HoldAnswers,
    /// Nothing passes either way, and what was read is lost, for good: the server seems
    /// frozen, yet no connection closes, so the client hears nothing, not a close.
    Blackhole,
}

/// How late the bytes arrive: `ms` plus a random part of up to `jitter_ms`, so a
/// delayed byte is never early. The same shape as the query of `POST /delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delay {
    pub ms: u64,
    #[serde(default)]
    pub jitter_ms: u64,
    #[serde(default)]
    pub direction: Direction,
}

/// Which way a delay applies. The client is the one that connected to the nemesis
/// (a seckill instance); the server is upstream (a lock backend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    #[default]
    Both,
    /// Requests are late; answers come as soon as the server sends them.
    ToServer,
    /// Answers are late: the server did the work, the client hears of it late.
    ToClient,
}

/// One way of one connection, as [`Direction`] names the ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    ToServer,
    ToClient,
}

impl Direction {
    fn includes(self, way: Way) -> bool {
        match self {
            Direction::Both => true,
            Direction::ToServer => way == Way::ToServer,
            Direction::ToClient => way == Way::ToClient,
        }
    }
}

impl Fault {
    /// When bytes that arrive now, going `way`, may be passed on (under a partition, the
    /// heal decides instead).
    pub fn due(self, way: Way, arrived: Instant) -> Instant {
        match self {
            Fault::Delay(delay) if delay.direction.includes(way) => {
                let jitter = rand::random_range(0..=delay.jitter_ms);
                arrived + Duration::from_millis(delay.ms + jitter)
            }
            _ => arrived,
        }
    }

    /// Whether bytes going `way` may pass at all.
    pub fn passes(self, way: Way) -> bool {
        match self {
            Fault::Healed | Fault::Delay(_) => true,
            Fault::HoldAnswers => way == Way::ToServer,
            Fault::Partition | Fault::Reset | Fault::Blackhole => false,
        }
    }

    /// Whether bytes read now are lost instead of kept for the heal.
    pub fn loses(self) -> bool {
        self == Fault::Blackhole
    }

    /// Whether a new connection waits for the heal before it reaches the server. Not
    /// under a blackhole: there a new connection is carried at once, so that what its
    /// client sends is read, and lost, not kept in the socket for the heal.
    pub fn holds_new_connections(self) -> bool {
        self == Fault::Partition
    }
}

/// A one-shot fault on one connection: the first request that mentions `marker` reaches
/// the server and runs, and the answers on its connection are held for `hold` after it.
/// That is "the answer was lost after the command ran", aimed at one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerTrap {
    pub marker: Vec<u8>,
    pub hold: Duration,
}

impl AnswerTrap {
    fn sprung_by(&self, request: &[u8]) -> bool {
        request
            .windows(self.marker.len())
            .any(|window| window == self.marker.as_slice())
    }
}

/// The trap set on a nemesis, shared by its links; the first request that springs it
/// takes it away.
pub type SetTrap = Arc<Mutex<Option<AnswerTrap>>>;

/// One connection's view of the trap: the trap set, and until when this connection's
/// answers are held because one of its requests sprang it.
#[derive(Clone, Default)]
pub struct ConnectionTrap {
    set: SetTrap,
    answers_held_until: Arc<Mutex<Option<Instant>>>,
}

impl ConnectionTrap {
    pub fn new(set: SetTrap) -> Self {
        ConnectionTrap {
            set,
            answers_held_until: Arc::default(),
        }
    }

    /// Looks at a request on its way to the server, and springs the trap if it matches.
    pub fn request(&self, request: &[u8]) {
        let mut set = self.set.lock().unwrap();
        if let Some(trap) = set.as_ref().filter(|trap| trap.sprung_by(request)) {
            *self.answers_held_until.lock().unwrap() = Some(Instant::now() + trap.hold);
            *set = None;
        }
    }

    /// When an answer due at `due` may pass, the trap considered.
    pub fn answer_due(&self, due: Instant) -> Instant {
        match *self.answers_held_until.lock().unwrap() {
            Some(until) => due.max(until),
            None => due,
        }
    }
}
