//! `scripts/cluster.sh` (the `cluster` binary) on bad input: a clear error that names the
//! problem and the fix, exit status 1, and nothing started or signalled. The commands that
//! start and break servers are proven by `make chaos`, which runs them on every row.

use std::process::{Command, Output};

fn cluster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cluster")).args(args).output().unwrap()
}

fn error_of(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_member_nobody_has_is_refused_with_the_names_there_are() {
    for args in [
        ["kill", "etcd-4"],
        ["pause", "redis"],
        ["restart", "stock-cluster-7"],
        ["port", "mysql-2"],
    ] {
        let error = error_of(&cluster(&args));
        assert!(
            error.starts_with(&format!("[cluster] error: no member named '{}'", args[1])),
            "{error}"
        );
        assert!(error.contains("stock-redis lock-redis redlock-6481"), "{error}");
    }
}

#[test]
fn a_command_nobody_has_is_refused_by_the_parser_with_the_usage() {
    let output = cluster(&["reboot", "mysql"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("unrecognized subcommand 'reboot'") && error.contains("Usage: scripts/cluster.sh"),
        "{error}"
    );
}

#[test]
fn a_leader_of_something_that_elects_none_is_refused_with_the_choices() {
    let error = error_of(&cluster(&["leader", "mysql"]));
    assert!(
        error.contains("leader of what? etcd, zookeeper or failover-redis, got 'mysql'"),
        "{error}"
    );
}

#[test]
fn the_ports_are_the_members_and_env_points_at_them() {
    let port = cluster(&["port", "failover-redis-b"]);
    assert_eq!(String::from_utf8_lossy(&port.stdout), "6487\n");
    let env = String::from_utf8_lossy(&cluster(&["env"]).stdout).into_owned();
    assert!(env.contains("export SECKILL_FAILOVER_LOCK_REDIS_URL=redis-sentinel://127.0.0.1:26486,127.0.0.1:26487,127.0.0.1:26488#seckill-lock\n"), "{env}");
    assert_eq!(env.lines().count(), 8, "{env}");
}
