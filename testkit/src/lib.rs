//! What the integration tests of both crates share, one concern a file:
//!
//! | file | what |
//! | --- | --- |
//! | [`test_redis`] | the project's test Redis, and a sale of a test's own in it |
//! | [`server_control`] | launching, signalling and asking a server of ours: the private servers' and the cluster's one way |
//! | [`instances`] | instances of the service on free ports, in process or as `seckill serve` processes, and one buy |
//! | [`nemesis`] | the one fault proxy: partitions, delays, resets, held or lost answers, on command; `nemesis::Proxy` puts one in front of a server for a test, and the `nemesis` binary serves one to `make chaos` |
//! | [`locks`] | lock options, owners, and the race a lock must close |
//! | [`backends`] | the shared etcd, ZooKeeper, MariaDB and Redlock masters `make services` starts |
//! | [`cluster`] | the chaos suite's servers on fixed ports, as daemons with pid files (`scripts/cluster.sh`) |
//! | [`private_redis`] | a redis-server of a test's own, to stop, freeze or kill |
//! | [`private_cluster`] | a Redis Cluster of a test's own, masters with a replica each |
//! | [`private_server`] | etcd, ZooKeeper or MariaDB of a test's own, to kill and restart |
//! | [`browser`] | a script of `tests/browser/` in headless chromium, and what it saw |
//! | [`pages`] | the project's Markdown pages, for the tests that read the docs |
//! | [`wall_clock`] | a wall clock that jumps, for a redis-server or a `seckill serve` process |
//! | [`turns`] | one test at a time, for those that stop processes or count on timing |
//! | [`break_it`] | the break-it exercises: the lines a student deletes, and the rows that must fail (`make grade`) |
//!
//! A missing server fails the test loudly; nothing is skipped.

pub mod test_redis;
pub mod server_control;
pub mod instances;
pub mod nemesis;
pub mod locks;
pub mod backends;
pub mod cluster;
pub mod private_redis;
pub mod private_cluster;
pub mod private_server;
pub mod wall_clock;
pub mod pages;
pub mod browser;
pub mod turns;
pub mod break_it;

pub use backends::*;
pub use instances::*;
pub use locks::*;
pub use pages::*;
pub use private_cluster::*;
pub use private_redis::*;
pub use private_server::*;
pub use test_redis::*;
pub use turns::*;
pub use wall_clock::*;
