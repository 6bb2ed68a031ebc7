//! Guided scenarios: each lesson's anomaly, ready to run. The page states the set-up,
//! asks the learner to predict ("will a unit be sold twice?"), then runs it and shows
//! what happened beside the prediction. `lab/tests/scenarios.rs` runs every one and
//! checks that it shows what its answer says, so a scenario cannot teach a wrong thing.
//!
//! Each is written in English and in Chinese; the page shows the browser's language.

use serde::Serialize;

use crate::faults::Strike;
use crate::setup::Setup;

/// A text in both of the course's languages.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Words {
    pub en: &'static str,
    pub zh: &'static str,
}

/// One scenario.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// Its name in the page's address and in `POST /scenarios/ID`.
    pub id: &'static str,
    /// The lesson whose anomaly it shows.
    pub lesson: u32,
    pub title: Words,
    /// What runs, before the learner predicts.
    pub set_up: Words,
    /// Why it ends as it does, shown after the run.
    pub why: Words,
    pub setup: Setup,
    /// Struck as the crowd is sent.
    pub strikes: Vec<Strike>,
    /// The answer to "will a unit be sold twice?".
    pub sold_twice: bool,
}

/// The scenarios, in the course's order.
pub fn all() -> Vec<Scenario> {
    let redis = |fencing| Setup {
        fencing,
        ..Setup::default()
    };
    let failover = |fencing| Setup {
        fencing,
        ttl_ms: 6000,
        lock_failover: true,
        ..Setup::default()
    };
    let pause_the_holder = vec![Strike::PauseHolder { ms: 1500 }];
    vec![
        Scenario {
            id: "race-none",
            lesson: 1,
            title: Words { en: "No lock at all", zh: "完全不加锁" },
            set_up: Words {
                en: "`none`: each sale reads the stock, lingers 50 ms, and writes it minus one. No fault.",
                zh: "`none`：每次下单读库存，多停 50 ms，再写回减一后的值。不制造故障。",
            },
            why: Words {
                en: "Two buyers read the same stock and both write it minus one: one unit, two sales. Lesson 1.",
                zh: "两个买家读到同一个库存值，都写回它减一：一件货，卖了两次，一货多卖。见第 1 课。",
            },
            setup: Setup { strategy: "none".to_owned(), fencing: false, ..Setup::default() },
            strikes: Vec::new(),
            sold_twice: true,
        },
        Scenario {
            id: "race-local",
            lesson: 1,
            title: Words { en: "A lock inside each instance", zh: "每个实例各自加本地锁" },
            set_up: Words {
                en: "`local`: a mutex in each instance; the two instances share the stock. No fault.",
                zh: "`local`：每个实例内一把互斥锁；两个实例共用同一份库存。不制造故障。",
            },
            why: Words {
                en: "Each instance takes turns only with itself: A's buyer and B's buyer still read the same stock. Lesson 1.",
                zh: "每个实例的互斥锁只让自己的买家轮流来：A 的买家和 B 的买家照样会读到同一个库存值。见第 1 课。",
            },
            setup: Setup { strategy: "local".to_owned(), fencing: false, ..Setup::default() },
            strikes: Vec::new(),
            sold_twice: true,
        },
        Scenario {
            id: "pause-unfenced",
            lesson: 3,
            title: Words { en: "The holder paused, no fence", zh: "持有者被暂停，没有栅栏" },
            set_up: Words {
                en: "`redis` with fencing off, a lease of 500 ms. The holder is stopped (SIGSTOP) for 1.5 s in the middle of a sale, as a long GC pause would.",
                zh: "`redis`，关掉栅栏，租约 500 ms。持有者在一次下单中途被停住（SIGSTOP）1.5 s，就像一次很长的 GC 停顿。",
            },
            why: Words {
                en: "The lease ran out while it slept; the other instance took the lock and sold. On waking, the holder wrote the stock it had read: a unit sold twice. Lesson 3.",
                zh: "它睡着时租约到期了，另一个实例拿到锁，卖出了货。持有者醒来后，把停住之前读到的库存写了回去：一货多卖。见第 3 课。",
            },
            setup: redis(false),
            strikes: pause_the_holder.clone(),
            sold_twice: true,
        },
        Scenario {
            id: "pause-fenced",
            lesson: 3,
            title: Words { en: "The holder paused, with the fence", zh: "持有者被暂停，有栅栏" },
            set_up: Words {
                en: "The same pause, with fencing on: every write carries the lock's token, and the stock refuses a token older than one it has seen.",
                zh: "同样的暂停，打开栅栏：每次写都带着锁发的令牌，库存拒绝比它见过的令牌更旧的令牌。",
            },
            why: Words {
                en: "The woken holder's write carries the old token; the stock refuses it, and its buyer is told 503. Lesson 3.",
                zh: "醒来的持有者写的时候带着旧令牌：库存拒绝了这次写，它的买家收到 503。见第 3 课。",
            },
            setup: redis(true),
            strikes: pause_the_holder.clone(),
            sold_twice: false,
        },
        Scenario {
            id: "redlock-paused",
            lesson: 4,
            title: Words { en: "Redlock, the holder paused", zh: "红锁，持有者被暂停" },
            set_up: Words {
                en: "`redlock` on five Redis masters, lease 500 ms. The holder is stopped for 1.5 s mid-sale: Kleppmann's objection.",
                zh: "`redlock`，五个 Redis 主节点，租约 500 ms。持有者在下单中途被停住 1.5 s：正是 Kleppmann 的反驳。",
            },
            why: Words {
                en: "A majority of five does not help: every master let the lease expire, and Redlock has no token for the stock to check. Lesson 4.",
                zh: "拿到五个里的多数也没用：每个主节点上的租约都到期了，而红锁不发令牌，库存没有东西可查。见第 4 课。",
            },
            setup: Setup { strategy: "redlock".to_owned(), fencing: false, ..Setup::default() },
            strikes: pause_the_holder,
            sold_twice: true,
        },
        Scenario {
            id: "failover-unfenced",
            lesson: 5,
            title: Words { en: "The lock's Redis fails over", zh: "锁 Redis 主从切换" },
            set_up: Words {
                en: "`redis` with fencing off, its Redis a master with a replica and a Sentinel, a lease of 6 s. Replication is cut; the next holder is stopped mid-sale for 5 s; the master is killed, and the Sentinel promotes the replica.",
                zh: "`redis`，关掉栅栏；锁 Redis 是一主一从加一个哨兵，租约 6 s。先切断复制；下一个持有者在下单中途被停住 5 s；杀掉主节点，哨兵把从节点提升为主节点。",
            },
            why: Words {
                en: "The master answered the grant before its replica had it. The promoted replica never heard of it and granted the lock again, while the first holder's lease still ran: two holders, no clock jumped, and the pause shorter than the lease. Lesson 5.",
                zh: "主节点先答复了加锁，从节点还没收到这次加锁。被提升的从节点根本不知道这把锁，又把它发给了别人，而第一个持有者的租约还没到期：两个持有者。没有时钟跳变，暂停也比租约短。见第 5 课。",
            },
            setup: failover(false),
            strikes: vec![Strike::FailOverLock { ms: 5000 }],
            sold_twice: true,
        },
        Scenario {
            id: "failover-fenced",
            lesson: 5,
            title: Words { en: "The failover, with the fence", zh: "主从切换，有栅栏" },
            set_up: Words {
                en: "The same failover, with fencing on: each new master begins a new epoch of tokens, and the stock refuses a token older than one it has seen.",
                zh: "同样的主从切换，打开栅栏：每换一个主节点，令牌就进入新的纪元（epoch），库存拒绝比它见过的令牌更旧的令牌。",
            },
            why: Words {
                en: "The second holder's token, of the new master's epoch, outranks the first's; the woken holder's write is refused, and its buyer told 503. Lesson 5.",
                zh: "第二个持有者的令牌属于新主节点的纪元，比第一个持有者的大；醒来的持有者的写被拒绝，它的买家收到 503。见第 5 课。",
            },
            setup: failover(true),
            strikes: vec![Strike::FailOverLock { ms: 5000 }],
            sold_twice: false,
        },
        Scenario {
            id: "session-unfenced",
            lesson: 6,
            title: Words { en: "A ZooKeeper holder past its session", zh: "ZooKeeper 持有者超过会话时限" },
            set_up: Words {
                en: "`zookeeper` with fencing off, a session of 4 s (the shortest the server grants). The holder is stopped mid-sale for 7 s.",
                zh: "`zookeeper`，关掉栅栏，会话 4 s（服务器给的最短会话）。持有者在下单中途被停住 7 s。",
            },
            why: Words {
                en: "Its heartbeats stopped, so ZooKeeper ended its session and deleted its queue entry; the next waiter was woken and sold. The holder learned it only on waking, after its write: a unit sold twice. A queue does not fence. Lesson 6.",
                zh: "它的心跳停了，ZooKeeper 结束了它的会话，删掉了它在队列里的节点；下一个等待者被唤醒，卖出了货。持有者醒来写完之后才知道这件事：一货多卖。排队不等于栅栏。见第 6 课。",
            },
            setup: Setup {
                strategy: "zookeeper".to_owned(),
                fencing: false,
                ttl_ms: 4000,
                ..Setup::default()
            },
            strikes: vec![Strike::PauseHolder { ms: 7000 }],
            sold_twice: true,
        },
        Scenario {
            id: "partition-lease",
            lesson: 9,
            title: Words { en: "Cut off from the lock", zh: "与锁断开" },
            set_up: Words {
                en: "`redis` with fencing off. Instance A is cut from the lock's Redis for 3 s while it sells (its link to the stock stays up).",
                zh: "`redis`，关掉栅栏。实例 A 正在卖货时，和锁 Redis 断开 3 s（它到库存的连接不受影响）。",
            },
            why: Words {
                en: "A cannot renew, so it checks its lease before each write and stops selling when the lease runs out, before B can be granted: a lease is a promise kept by the holder's own clock. Lesson 9.",
                zh: "A 续不上租约，每次写之前都检查自己的租约，租约一到就不再卖，这时 B 还拿不到锁：租约是持有者靠自己的时钟守住的承诺。见第 9 课。",
            },
            setup: redis(false),
            strikes: vec![Strike::CutFromLock { instance: 0, ms: 3000 }],
            sold_twice: false,
        },
        Scenario {
            id: "stock-failover",
            lesson: 14,
            title: Words { en: "The stock's Redis fails over", zh: "库存 Redis 主从切换" },
            set_up: Words {
                en: "`redis` with fencing on, the stock's Redis a master with a replica and a Sentinel. Once the sale is under way, replication is cut; the master sells alone for 1 s; it is killed, and the Sentinel promotes the replica.",
                zh: "`redis`，打开栅栏；库存 Redis 是一主一从加一个哨兵。开卖之后先切断复制；主节点单独卖 1 s；然后杀掉它，哨兵把从节点提升为主节点。",
            },
            why: Words {
                en: "The replica never heard of that second's sales: the promoted replica's stock still has those units, and sells them again. The fence lives in the stock, and failed over with it. `--stock-wait-replicas 1` answers a sale only once the replica has it. Lesson 14.",
                zh: "从节点根本没收到那一秒里的下单：被提升的从节点上，库存里还有那几件货，于是又把它们卖了一遍。栅栏也存在库存里，跟着一起主从切换了。`--stock-wait-replicas 1` 要等从节点收到这次下单，才答复买家。见第 14 课。",
            },
            setup: Setup {
                stock_failover: true,
                ..Setup::default()
            },
            strikes: vec![Strike::FailOverStock { ms: 1000 }],
            sold_twice: true,
        },
    ]
}

/// The scenario called `id`.
pub fn named(id: &str) -> Option<Scenario> {
    all().into_iter().find(|scenario| scenario.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_runs_in_the_lab_and_is_written_in_both_languages() {
        let scenarios = all();
        for scenario in &scenarios {
            assert_eq!(scenario.setup.validate().map(|_| ()), Ok(()), "{}", scenario.id);
            for strike in &scenario.strikes {
                assert_eq!(strike.validate(2), Ok(()), "{}", scenario.id);
            }
            for words in [scenario.title, scenario.set_up, scenario.why] {
                assert!(!words.en.is_empty() && !words.zh.is_empty(), "{}", scenario.id);
                assert!(
                    words.zh.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
                    "{}: {}",
                    scenario.id,
                    words.zh
                );
            }
            assert!(
                scenario.why.en.contains(&format!("Lesson {}", scenario.lesson)),
                "{}",
                scenario.id
            );
            assert!(
                scenario.why.zh.contains(&format!("第 {} 课", scenario.lesson)),
                "{}",
                scenario.id
            );
        }
        let mut ids: Vec<&str> = scenarios.iter().map(|scenario| scenario.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), scenarios.len(), "one id each");
    }
}
