//! The binary refuses bad configuration with a message that names the fix.

use std::process::{Command, Output};
use std::time::Duration;

fn seckill(args: &[&str]) -> Output {
    seckill_with_env(args, &[])
}

/// Runs the binary with only the `SECKILL_*` variables given here: the tests' own
/// environment must not leak settings into it.
fn seckill_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("SECKILL_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command.output().expect("the seckill binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_unknown_strategy_is_refused_with_the_list_of_valid_ones() {
    let output = seckill(&["serve", "--lock", "zookeper"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("zookeper"), "{message}");
    assert!(
        message.contains("none, local, redis, redis-degrade, redlock, etcd, zookeeper, mysql, mysql-version, atomic"),
        "{message}"
    );
}

#[test]
fn an_unknown_strategy_from_the_environment_is_refused_too() {
    let output = seckill_with_env(&["serve"], &[("SECKILL_LOCK", "mutex")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("possible values"), "{}", stderr(&output));
}

#[test]
fn a_fencing_mode_that_is_not_on_or_off_is_refused() {
    let output = seckill(&["serve", "--fencing", "maybe"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("--fencing") && message.contains("on, off"),
        "{message}"
    );
}

#[test]
fn an_unreachable_redis_is_refused_with_its_url_and_how_to_start_one() {
    let output = seckill(&["serve", "--redis-url", "redis://127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("cannot reach the stock Redis at redis://127.0.0.1:1"),
        "{message}"
    );
    assert!(message.contains("make services"), "{message}");
}

#[test]
fn stock_sentinels_that_do_not_answer_are_refused_with_the_url_and_how_to_start_them() {
    let url = "redis-sentinel://127.0.0.1:1#seckill-stock";
    let output = seckill(&["serve", "--redis-url", url]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains(&format!("cannot reach the stock Redis at {url}")),
        "{message}"
    );
    assert!(message.contains("make cluster"), "{message}");
}

#[test]
fn a_redis_url_that_is_not_one_is_named() {
    let output = seckill(&["serve", "--redis-url", "localhost:6379"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("`localhost:6379` is not a Redis URL"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_lock_ttl_too_short_to_renew_is_refused() {
    let output = seckill(&["serve", "--lock-ttl-ms", "5"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--lock-ttl-ms"), "{}", stderr(&output));
}

#[tokio::test]
async fn a_port_already_in_use_is_refused_with_the_port_and_the_fix() {
    testkit::redis_client().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || serve_a_test_sale(&["--port", &port])),
    )
    .await
    .expect("seckill exits instead of serving")
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.contains("cannot listen on 127.0.0.1:"), "{message}");
    assert!(message.contains("--port"), "{message}");
}

#[tokio::test]
async fn logs_written_to_a_file_or_pipe_carry_no_colour_codes() {
    testkit::redis_client().await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port().to_string();
    drop(free);
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    let sale = testkit::TestSale::new();
    command.args([
        "serve",
        "--port",
        &port,
        "--redis-url",
        &testkit::redis_url(),
        "--key-prefix",
        sale.prefix(),
    ]);
    for (key, _) in std::env::vars() {
        if key.starts_with("SECKILL_") || key == "RUST_LOG" {
            command.env_remove(key);
        }
    }
    let mut child = command.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let first_line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(20), first_line)
        .await
        .expect("a log line")
        .unwrap()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("seckill is serving"), "{line:?}");
    assert!(
        !line.contains('\u{1b}'),
        "an escape code in a log that is not a terminal: {line:?}"
    );
}

/// Runs `seckill serve --lock LOCK FLAG VALUE` against a server that is not there, and
/// expects it to give up within 15 s, naming the server and how to start it.
fn refused_quickly(lock: &str, flag: &str, value: &str, names_the_server: &str) {
    let started = std::time::Instant::now();
    let message = refused_message(lock, &[flag, value]);
    assert!(message.contains(names_the_server), "{message}");
    assert!(message.contains("make services") && message.contains(flag), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn an_etcd_that_is_down_is_refused_with_its_url_and_how_to_start_it() {
    refused_quickly(
        "etcd",
        "--etcd-endpoints",
        "http://127.0.0.1:1",
        "cannot reach etcd at http://127.0.0.1:1",
    );
}

#[test]
fn a_zookeeper_that_is_down_is_refused_with_its_address_and_how_to_start_it() {
    refused_quickly(
        "zookeeper",
        "--zk-connect",
        "127.0.0.1:1",
        "cannot reach ZooKeeper at 127.0.0.1:1",
    );
}

#[test]
fn a_mysql_that_is_down_or_refuses_the_account_is_refused_with_the_url_and_the_fix() {
    for (strategy, url, shown) in [
        (
            "mysql",
            "mysql://seckill:seckill@127.0.0.1:1/seckill",
            "mysql://seckill:***@127.0.0.1:1/seckill",
        ),
        (
            "mysql",
            "mysql://seckill:wrong@127.0.0.1:3306/seckill",
            "mysql://seckill:***@127.0.0.1:3306/seckill",
        ),
        (
            "mysql-version",
            "mysql://seckill:seckill@127.0.0.1:1/seckill",
            "mysql://seckill:***@127.0.0.1:1/seckill",
        ),
    ] {
        let output = serve_a_test_sale(&["--lock", strategy, "--mysql-url", url]);
        assert_eq!(output.status.code(), Some(1), "{strategy} {url}");
        let message = stderr(&output);
        assert!(message.contains(&format!("cannot use MySQL at {shown}")), "{message}");
        assert!(
            message.contains("make services") && message.contains("--mysql-url"),
            "{message}"
        );
        assert!(!message.contains("wrong"), "the password was printed: {message}");
    }
}

#[test]
fn mysql_permits_that_leave_no_connection_for_releases_are_refused() {
    for strategy in ["mysql", "mysql-version"] {
        let output = seckill(&[
            "serve",
            "--lock",
            strategy,
            "--mysql-permits",
            "16",
            "--mysql-pool",
            "16",
        ]);
        assert_eq!(output.status.code(), Some(1));
        let message = stderr(&output);
        assert!(
            message.contains("--mysql-permits (16) must be less than --mysql-pool (16)"),
            "{message}"
        );
        assert!(
            message.contains("--mysql-permits 0"),
            "the way to run without the semaphore: {message}"
        );
    }
}

#[test]
fn redlock_without_a_majority_of_masters_is_refused_with_the_count_and_the_fix() {
    let urls = "redis://127.0.0.1:6381,redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3,redis://127.0.0.1:4";
    let output = serve_a_test_sale(&["--lock", "redlock", "--redlock-urls", urls]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.contains("only 1 of 5 Redlock masters answer"), "{message}");
    assert!(
        message.contains("make services") && message.contains("--redlock-urls"),
        "{message}"
    );

    let output = seckill(&[
        "serve",
        "--lock",
        "redlock",
        "--redlock-urls",
        "redis://127.0.0.1:6381,redis://127.0.0.1:6382",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("at least 3 masters"), "{}", stderr(&output));
}

#[test]
fn a_redlock_node_timeout_that_eats_the_lease_is_refused() {
    let output = seckill(&[
        "serve",
        "--lock",
        "redlock",
        "--redlock-node-timeout-ms",
        "500",
        "--lock-ttl-ms",
        "3000",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("--redlock-node-timeout-ms (500 ms) must be at most a tenth of --lock-ttl-ms"),
        "{message}"
    );
}

#[test]
fn a_key_prefix_that_a_lock_backend_could_not_take_is_refused_with_the_characters_it_may_hold() {
    let output = seckill(&["serve", "--key-prefix", "shop/7:"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("--key-prefix"), "{message}");
    assert!(
        message.contains("letters, digits") && message.contains("\"shop/7:\""),
        "{message}"
    );
}

#[test]
fn an_admin_token_too_short_to_be_a_secret_is_refused() {
    let output = seckill(&["serve", "--admin-token", "secret"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("at least 16 characters"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_event_stream_limit_of_zero_is_refused_with_the_range() {
    let output = seckill(&["serve", "--max-event-streams", "0"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("--max-event-streams") && message.contains("1..=1024"),
        "{message}"
    );
}

#[test]
fn an_allowed_host_with_a_port_is_refused_with_the_form_it_takes() {
    let output = seckill(&["serve", "--allowed-host", "seckill.lan:8080"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("--allowed-host") && message.contains("without scheme or port"),
        "{message}"
    );
}

#[test]
fn an_allowed_host_where_the_host_does_not_decide_is_refused() {
    for (args, why) in [
        (
            &["--admin-token", "0123456789abcdef-admin"][..],
            "the admin token decides",
        ),
        (&["--bind", "0.0.0.0"][..], "refused until an --admin-token is set"),
    ] {
        let output = seckill(&[&["serve", "--allowed-host", "seckill.lan"][..], args].concat());
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains(why) && message.contains("Leave --allowed-host out"),
            "{message}"
        );
    }
}

/// `seckill serve ARGS...` selling a sale of its own from the test Redis.
fn serve_a_test_sale(args: &[&str]) -> Output {
    let (redis_url, sale) = (testkit::redis_url(), testkit::TestSale::new());
    let serve = ["serve", "--redis-url", &redis_url, "--key-prefix", sale.prefix()];
    seckill(&[&serve[..], args].concat())
}

/// `seckill serve --lock LOCK ARGS...` on a sale of its own: its message, once it exited 1.
fn refused_message(lock: &str, args: &[&str]) -> String {
    let output = serve_a_test_sale(&[&["--lock", lock], args].concat());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    stderr(&output)
}

#[test]
fn a_sentinel_url_without_a_master_name_is_refused_with_the_form_it_needs() {
    let message = refused_message("redis", &["--lock-redis-url", "redis-sentinel://127.0.0.1:26486"]);
    assert!(
        message.contains("names no master") && message.contains("#mymaster"),
        "{message}"
    );
    assert!(message.contains("--lock-redis-url"), "{message}");
}

#[test]
fn sentinels_that_do_not_answer_are_refused_with_the_url_and_how_to_start_them() {
    let started = std::time::Instant::now();
    let message = refused_message(
        "redis",
        &["--lock-redis-url", "redis-sentinel://127.0.0.1:1#seckill-lock"],
    );
    assert!(
        message.contains("redis-sentinel://127.0.0.1:1#seckill-lock"),
        "{message}"
    );
    assert!(message.contains("make cluster"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn redis_degrade_behind_sentinels_is_refused_until_it_can_follow_them() {
    let message = refused_message(
        "redis-degrade",
        &["--lock-redis-url", "redis-sentinel://127.0.0.1:26486#seckill-lock"],
    );
    assert!(message.contains("does not follow Sentinels"), "{message}");
}

#[test]
fn a_replica_wait_longer_than_a_renewal_may_take_is_refused() {
    let message = refused_message(
        "redis",
        &[
            "--lock-redis-wait-replicas",
            "1",
            "--lock-redis-wait-timeout-ms",
            "600",
            "--lock-ttl-ms",
            "3000",
        ],
    );
    assert!(
        message.contains("must be shorter than a renewal's timeout")
            && message.contains("--lock-redis-wait-timeout-ms"),
        "{message}"
    );
}

/// The load scripts' `+segments-N` variant (`scripts/lib/instances.sh`) as a shell sees
/// it: the flags it becomes, or the script's refusal.
fn segments_variant(count: u32) -> Output {
    let instances = testkit::project_root().join("scripts/lib/instances.sh");
    let script = format!(
        "die() {{ echo \"$*\" >&2; exit 1; }}; source '{}'; variant_flags redis+segments-{count}",
        instances.display()
    );
    Command::new("bash").args(["-c", &script]).output().expect("bash runs")
}

/// `--stock-segments` takes 1 to `MAX_SEGMENTS` (`src/config.rs`); a variant the script
/// passed beyond that started instances that refused to run.
#[test]
fn the_load_scripts_take_exactly_the_segment_counts_seckill_serve_takes() {
    use seckill::config::MAX_SEGMENTS;
    for count in [0, 1, 2, 16, MAX_SEGMENTS - 1, MAX_SEGMENTS, MAX_SEGMENTS + 1, 99, 100] {
        let script = segments_variant(count);
        let takes = (1..=MAX_SEGMENTS).contains(&count);
        assert_eq!(script.status.success(), takes, "+segments-{count}: {}", stderr(&script));
        if takes {
            let flags = String::from_utf8_lossy(&script.stdout);
            assert_eq!(flags.trim(), format!("--stock-segments {count}"));
        } else {
            assert!(
                stderr(&script).contains(&format!("N from 1 to {MAX_SEGMENTS}")),
                "the refusal names the range: {}",
                stderr(&script)
            );
        }
    }
}

/// The docs write `--orders` and `--one-per-buyer` bare, as switches; `--orders false`
/// must still turn one off, and a bare switch must not swallow the flag after it.
#[test]
fn a_boolean_option_given_bare_is_switched_on_and_still_takes_a_value() {
    use clap::parser::ValueSource;
    use clap::{CommandFactory, Parser};
    use seckill::config::{Cli, Command};

    let parse = |args: &[&str]| {
        let Command::Serve(config) = Cli::try_parse_from(["seckill", "serve"].iter().chain(args))
            .unwrap_or_else(|error| panic!("{args:?} was refused: {error}"))
            .command
        else {
            panic!("`seckill serve` parsed as another command");
        };
        config
    };
    let bare = parse(&["--orders", "--one-per-buyer", "--sold-out-flag", "--port", "8091"]);
    assert!(
        bare.orders && bare.one_per_buyer && bare.sold_out_flag,
        "bare switches stay off: {bare:?}"
    );
    assert_eq!(bare.port, 8091, "a bare switch took the next flag as its value");

    let valued = parse(&["--orders", "false", "--local-queue", "false", "--hand-over=false"]);
    assert!(
        !valued.orders && !valued.local_queue && !valued.hand_over,
        "values ignored: {valued:?}"
    );
    // `--local-queue` is on by default, so its value alone cannot show that the bare
    // switch was read. Where the value came from can.
    let matches = Cli::command()
        .try_get_matches_from(["seckill", "serve", "--local-queue"])
        .unwrap_or_else(|error| panic!("the bare `--local-queue` was refused: {error}"));
    let serve = matches
        .subcommand_matches("serve")
        .expect("`seckill serve` parsed as serve");
    assert_eq!(
        (serve.get_one::<bool>("local_queue"), serve.value_source("local_queue")),
        (Some(&true), Some(ValueSource::CommandLine)),
        "the bare `--local-queue` was not read as on"
    );

    let hosts = parse(&["--allowed-host", "Seckill.LAN", "--allowed-host", "a.lan,[::1]"]).allowed_hosts;
    assert_eq!(
        hosts,
        ["seckill.lan", "a.lan", "::1"],
        "a repeated or listed flag takes every name"
    );
}

/// The stock may live on a Redis Cluster, the `redis` lock may not, and a key prefix
/// with a brace would become the segments' hash tag: each refused with the fix.
#[test]
fn on_a_redis_cluster_the_redis_lock_and_a_prefix_with_braces_are_refused_with_the_fix() {
    let cluster = testkit::PrivateRedisCluster::start(3);
    let serve = |args: &[&str]| {
        let output = seckill(&[&["serve", "--redis-url", &cluster.url()][..], args].concat());
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        stderr(&output)
    };
    let lock = serve(&["--lock", "redis", "--key-prefix", "t-cluster-lock:"]);
    assert!(
        lock.contains("the Redis lock needs one master") && lock.contains("--lock-redis-url"),
        "{lock}"
    );
    let braces = serve(&["--lock", "local", "--key-prefix", "{shop}:"]);
    assert!(
        braces.contains("--key-prefix `{shop}:` holds a brace") && braces.contains("Leave the braces out"),
        "{braces}"
    );
}
