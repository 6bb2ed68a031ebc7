//! The connections to the servers the service keeps its data in: [`redis`] (the stock,
//! and the Redis locks) and [`mysql`] (the orders, and the MySQL locks). Each fails with
//! an error that names the server and the fix.

pub mod redis;
pub mod mysql;
