//! `cluster`: the chaos suite's servers, started, killed, paused and healed
//! (`testkit::cluster`). `scripts/cluster.sh` runs it; its usage is there.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use testkit::cluster::{failover_group, leaders, members, report, say, stock_cluster, Cluster};
use testkit::server_control::Signal;

/// The chaos suite's servers, each on its own ports, data in .run/cluster/.
#[derive(Parser)]
#[command(name = "scripts/cluster.sh", bin_name = "scripts/cluster.sh")]
struct Args {
    #[command(subcommand)]
    command: Option<Order>,
}

#[derive(Subcommand)]
enum Order {
    /// Start every member (or NAME...) that is not running.
    Start { names: Vec<String> },
    /// Stop what start started (all, or NAME...).
    Stop { names: Vec<String> },
    /// Each member, its port, and who leads.
    Status,
    /// The SECKILL_* settings that point seckill at the cluster: eval "$(scripts/cluster.sh env)".
    Env,
    /// kill -9 one member.
    Kill { name: String },
    /// SIGSTOP one member.
    Pause { name: String },
    /// SIGCONT one member.
    Resume { name: String },
    /// Start a killed member again (--empty: without its data).
    Restart {
        name: String,
        #[arg(long)]
        empty: bool,
    },
    /// The member that leads now: etcd, zookeeper, or failover-redis (the one the Sentinels name master).
    Leader { of: String },
    /// The port of one member.
    Port { name: String },
    /// Which master of the stock cluster holds which segment of the sale the last reset
    /// made (SECKILL_KEY_PREFIX names the sale).
    Segments,
    /// Form the stock cluster again, empty, if a node is not ok or holds a slot half moved.
    HealStockCluster,
    /// The member of the stock cluster that serves segment N now.
    ShardMaster { segment: u32 },
    /// Migrate the hash slot of segment N, keys and all, to another master of the stock cluster.
    MoveSegment { segment: u32 },
}

fn run(order: Order) -> anyhow::Result<()> {
    let cluster = Cluster::of_project()?;
    match order {
        Order::Start { names } => {
            cluster.start(&names)?;
            let what = if names.is_empty() {
                "every member".to_owned()
            } else {
                names.join(" ")
            };
            say(format!("started: {what}; data in {}", cluster.run_folder().display()));
        }
        Order::Stop { names } => cluster.stop(&names)?,
        Order::Status => report::status(&cluster),
        Order::Env => report::env().iter().for_each(|line| println!("{line}")),
        Order::Kill { name } => cluster.kill(&name)?,
        Order::Pause { name } => {
            cluster.signal(&name, Signal::Stop)?;
            say(format!("{name}: paused"));
        }
        Order::Resume { name } => {
            cluster.signal(&name, Signal::Cont)?;
            say(format!("{name}: resumed"));
        }
        Order::Restart { name, empty } => cluster.restart(&name, empty)?,
        Order::Leader { of } if of == "failover-redis" => println!("{}", failover_group::master()?.name),
        Order::Leader { of } => println!("{}", leaders::leader(&of)?),
        Order::Port { name } => println!("{}", members::named(&name)?.port),
        Order::Segments => stock_cluster::segments()?,
        Order::HealStockCluster => stock_cluster::heal(&cluster)?,
        Order::ShardMaster { segment } => println!("{}", stock_cluster::shard_master(segment)?),
        Order::MoveSegment { segment } => stock_cluster::move_segment(segment)?,
    }
    Ok(())
}

fn main() -> ExitCode {
    let order = Args::parse().command.unwrap_or(Order::Start { names: Vec::new() });
    match run(order) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("[cluster] error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
