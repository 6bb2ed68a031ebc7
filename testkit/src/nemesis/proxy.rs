//! A nemesis in front of one server, for a test: the port its client connects to, spelled
//! as each client takes it.

use std::ops::Deref;
use std::time::Duration;

use super::{AnswerTrap, LinkSpec, Nemesis};

/// One link from a free loopback port to a server on loopback, with the nemesis that
/// strikes it ([`Nemesis::strike`] and the rest, through `Deref`).
pub struct Proxy {
    pub port: u16,
    nemesis: Nemesis,
}

impl Proxy {
    /// A proxy to the server on `server_port`, healed.
    pub async fn start(server_port: u16) -> Self {
        let nemesis = Nemesis::new();
        let spec = LinkSpec {
            listen: (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            upstream: (std::net::Ipv4Addr::LOCALHOST, server_port).into(),
        };
        let listen = nemesis.link(spec).await.expect("a free loopback port");
        Proxy {
            port: listen.port(),
            nemesis,
        }
    }

    /// The proxy as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy as an etcd endpoint.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy as a ZooKeeper connect string.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Holds, for `hold`, the answers on the connection of the next request that
    /// mentions `marker`: the command runs, and its client times out.
    pub fn hold_the_answer_to(&self, marker: &[u8], hold: Duration) {
        self.nemesis.set_trap(AnswerTrap {
            marker: marker.to_vec(),
            hold,
        });
    }
}

impl Deref for Proxy {
    type Target = Nemesis;

    fn deref(&self) -> &Nemesis {
        &self.nemesis
    }
}
