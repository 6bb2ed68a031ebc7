//! Who used the CPU during a measurement: each process named, the load generator (this
//! process) and the whole machine, read from `/proc` before and after. On a small
//! machine the service, its backends and the load generator share the same cores, so a
//! rate means little until it says what ran out: the cores, one single-threaded server,
//! or nothing (then the time goes to waiting on round trips and hand-overs).

use serde::{Deserialize, Serialize};

/// Linux reports process CPU time in clock ticks of 1/100 s (`USER_HZ`, fixed for `/proc`).
const TICKS_PER_SECOND: f64 = 100.0;
/// Busier than this (as a fraction of what it could use) counts as saturated.
const SATURATED: f64 = 0.9;

/// A process to watch, by the name the report gives it.
#[derive(Clone, Debug)]
pub struct Watched {
    pub name: String,
    pub pid: u32,
}

/// CPU counters at one moment.
pub struct Sample {
    process_ticks: Vec<Option<u64>>,
    machine_busy_ticks: u64,
    machine_total_ticks: u64,
}

/// What a process used between two samples, in cores (1.0 = one core all the time).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuUse {
    pub name: String,
    pub cores: f64,
}

/// Everything used between two samples, and what ran out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuReport {
    pub cores: usize,
    /// The whole machine, as a fraction of all its cores.
    pub machine_busy: f64,
    pub processes: Vec<CpuUse>,
    /// One sentence: the cores, one process, or waiting.
    pub saturated: String,
}

pub fn sample(watched: &[Watched]) -> Sample {
    let (machine_busy_ticks, machine_total_ticks) = machine_ticks().unwrap_or((0, 0));
    Sample {
        process_ticks: watched.iter().map(|process| process_ticks(process.pid)).collect(),
        machine_busy_ticks,
        machine_total_ticks,
    }
}

pub fn between(watched: &[Watched], before: &Sample, after: &Sample, seconds: f64) -> CpuReport {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut processes: Vec<CpuUse> = watched
        .iter()
        .zip(before.process_ticks.iter().zip(&after.process_ticks))
        .filter_map(|(process, ticks)| match ticks {
            (Some(before), Some(after)) => Some(CpuUse {
                name: process.name.clone(),
                cores: after.saturating_sub(*before) as f64 / TICKS_PER_SECOND / seconds,
            }),
            _ => None,
        })
        .collect();
    processes.sort_by(|a, b| b.cores.total_cmp(&a.cores));
    let total = after.machine_total_ticks.saturating_sub(before.machine_total_ticks);
    let busy = after.machine_busy_ticks.saturating_sub(before.machine_busy_ticks);
    let machine_busy = if total > 0 { busy as f64 / total as f64 } else { 0.0 };
    let saturated = verdict(cores, machine_busy, &processes);
    CpuReport {
        cores,
        machine_busy,
        processes,
        saturated,
    }
}

/// What ran out, in a sentence.
fn verdict(cores: usize, machine_busy: f64, processes: &[CpuUse]) -> String {
    let shares: Vec<String> = processes
        .iter()
        .filter(|p| p.cores >= 0.05)
        .map(|p| format!("{} {:.2}", p.name, p.cores))
        .collect();
    let shares = shares.join(", ");
    if machine_busy >= SATURATED {
        return format!(
            "the CPU: {cores} cores {:.0}% busy (cores used: {shares})",
            machine_busy * 100.0
        );
    }
    match processes.iter().find(|p| p.cores >= SATURATED) {
        Some(busiest) => format!("{}: one core busy (cores used: {shares})", busiest.name),
        None => format!(
            "no CPU: the machine is {:.0}% busy; the time goes to waiting (cores used: {shares})",
            machine_busy * 100.0
        ),
    }
}

/// utime + stime of a process, from `/proc/<pid>/stat`; `None` if it is gone.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it start past its ')'.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are the 12th and 13th after the name.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// Busy and total ticks of all cores together, from the first line of `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: u64 = ticks.iter().take(8).sum(); // user nice system idle iowait irq softirq steal
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU time this whole process has used, as `getrusage` reports it. The kernel
    /// keeps one count behind both; this reading needs no parsing and no ticks per
    /// second, so it checks how `sample` reads `/proc`.
    fn cpu_seconds_used() -> f64 {
        // SAFETY: getrusage only writes into the struct it is given.
        let usage = unsafe {
            let mut usage = std::mem::zeroed::<libc::rusage>();
            assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
            usage
        };
        let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// The busy loop burns a known amount of CPU, not of wall time: on a machine busy
    /// with other work a loop of 300 ms got half a core, and a test that expected one
    /// failed (CI, 2026-11-26, while a build ran beside it).
    #[test]
    fn this_process_is_seen_using_the_cpu_it_burns() {
        const BURN_SECONDS: f64 = 0.3;
        // /proc counts in ticks of 10 ms, read at each end; other tests' threads in this
        // process move both witnesses alike.
        const TOLERANCE_SECONDS: f64 = 0.05;
        let me = [Watched {
            name: "me".into(),
            pid: std::process::id(),
        }];
        let before = sample(&me);
        let cpu_before = cpu_seconds_used();
        let started = std::time::Instant::now();
        let mut spin = 0u64;
        while cpu_seconds_used() - cpu_before < BURN_SECONDS && started.elapsed().as_secs() < 10 {
            spin = spin.wrapping_add(1);
        }
        std::hint::black_box(spin);
        let after = sample(&me);
        let burned = cpu_seconds_used() - cpu_before;
        let seconds = started.elapsed().as_secs_f64();
        let report = between(&me, &before, &after, seconds);
        let seen = report.processes[0].cores * seconds;
        assert!(
            burned >= BURN_SECONDS,
            "the loop burned only {burned:.3} s of CPU in {seconds:.1} s"
        );
        assert!(
            (seen - burned).abs() <= TOLERANCE_SECONDS,
            "the kernel counted {burned:.3} s of CPU, the sample saw {seen:.3} s"
        );
    }

    #[test]
    fn the_verdict_names_what_ran_out() {
        let used = |name: &str, cores| CpuUse {
            name: name.into(),
            cores,
        };
        assert!(verdict(2, 0.97, &[used("service", 1.2)]).starts_with("the CPU"));
        assert!(verdict(4, 0.4, &[used("redis-server", 0.98)]).starts_with("redis-server: one core"));
        assert!(verdict(2, 0.3, &[used("service", 0.4)]).starts_with("no CPU"));
    }
}
