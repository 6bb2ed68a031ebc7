//! What the nemesis does to the bytes right now: one fault at a time, for every link.

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

    /// Whether bytes may pass at all.
    pub fn passes(self) -> bool {
        matches!(self, Fault::Healed | Fault::Delay(_))
    }
}
