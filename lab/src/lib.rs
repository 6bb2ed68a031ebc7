//! The lab: one page on loopback where a class picks a lock, sends the crowd, strikes a
//! fault with a click and watches what the history's checks say. `make lab` starts it.
//!
//! ## Reading order
//! | file | what |
//! | --- | --- |
//! | [`setup`] | what the page chose: the strategy, its switches, the servers it needs |
//! | [`servers`] | the servers of a setup (Redis, etcd, ZooKeeper, MariaDB), each of the lab's own |
//! | [`failover`] | the lock's Redis with a replica and a Sentinel, failed over (lesson 5) |
//! | [`restart`] | the setup's MariaDB killed and started again on its data |
//! | [`restock`] | a new sale while a steady load buys, the old one's buyers kept in the history |
//! | [`instances`] | the two `seckill serve` processes, each behind nemeses of its own |
//! | [`faults`] | the faults a click strikes, and how long each lasts |
//! | [`crowd`] | the lessons' load test as a process, its history read as it grows |
//! | [`selling`] | keep selling: a steady load until stopped, judged as a crowd is |
//! | [`replay`] | a past crowd's history, stepped through one event at a time |
//! | [`scenarios`] | each lesson's anomaly, ready to run, to predict and to compare |
//! | [`lab`] | the state that ties them, and the clean-up that leaves nothing behind |
//! | [`torture`] | `make torture`: rounds of random faults drawn from a seed, judged as a crowd is |
//! | [`guard`] | loopback only: requests from another site are refused (DNS rebinding) |
//! | [`routes`] | the page and the calls it makes |
//!
//! No root is needed: the lab runs servers and processes of its own, cuts links with
//! nemeses (TCP proxies) in its own process, and cuts a replication link by freezing
//! the replica.

pub mod setup;
pub mod servers;
pub mod failover;
pub mod restart;
pub mod restock;
pub mod instances;
pub mod faults;
pub mod selling;
pub mod crowd;
pub mod scenarios;
pub mod replay;
pub mod lab;
pub mod torture;
pub mod guard;
pub mod routes;
