//! The connections to the servers the service keeps its data in: [`redis`] (one Redis
//! server, with the service's timeouts), [`redis_master`] (the master, one server or the
//! one the Sentinels name, for the stock and the Redis locks), [`redis_cluster`] (the
//! stock spread over the masters of a Redis Cluster) and [`mysql`] (the orders, and the
//! MySQL locks). Each fails with an error that names the server and the fix.

pub mod redis;
pub mod redis_cluster;
pub mod redis_master;
pub mod mysql;
