//! The integration tests of `seckill`: one binary, whose modules follow `src/`. Every
//! test of a lock is under `lock::` and the file of its name (`lock::etcd`), every test
//! of the sale under `sale::`, and so on; `chaos::` holds the faults that span them,
//! `docs::` and `project::` check the pages and the tree. The shared helpers are the
//! `testkit` crate.
//!
//! Run one module with a filter: `cargo test --test it lock::etcd::`.

mod store {
    mod mysql;
    mod redis_cluster;
}
mod lock {
    mod conformance;
    mod baselines;
    mod redis;
    mod redis_failover;
    mod redlock;
    mod queue;
    mod etcd;
    mod zookeeper;
    mod critical_path;
    mod mysql;
    mod mysql_token_order;
    mod mysql_version;
    mod redis_degrade;
    mod release_notices;
}
mod sale {
    mod fencing;
    mod segments;
    mod buyers;
    mod sold_out;
    mod local_queue;
    mod group;
    mod stock_failover;
}
mod orders;
mod config;
mod metrics;
mod http {
    mod routes;
    mod hostile;
    mod dashboard;
}
mod server;
mod chaos {
    mod pauses;
    mod backend_outages;
    mod clock_jumps;
    mod timeline;
}
mod docs {
    mod pages;
    mod lessons;
    mod five_minutes;
    mod twins;
    mod diagrams;
    mod break_it;
}
mod project {
    mod layout;
    mod own_servers;
    mod compose;
    mod shell;
    mod sizes;
    mod strategies;
}
