//! The lab's state: the setup the page chose, the servers and the two instances it
//! started for it, the crowd under way, and the faults struck meanwhile. Everything it
//! starts it stops ([`Lab::shutdown`]): no process, cut link or moved clock outlives it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use loadtest::history::Fault;
use serde::Serialize;

use crate::crowd::{Crowd, Outcome};
use crate::failover::Failover;
use crate::faults::{Strike, HOLDER_WITHIN_MS};
use crate::instances::Instance;
use crate::scenarios;
use crate::servers::Servers;
use crate::setup::{Available, Needs, Setup};

/// Two instances, as in every lesson.
const INSTANCES: usize = 2;
/// How long after the replication cut the failover's holder is picked. The replica
/// still has the grant of the holder at the cut (its release never reached it), until
/// its lease runs out; a holder picked this late keeps a lease that outlives that one
/// by as much, and in that time the promoted replica grants the lock again.
const GRANT_AFTER_CUT: Duration = Duration::from_secs(3);
/// The lock's Redis, as the history names it.
const LOCK_REDIS: &str = "lock-redis";

/// The programs the lab runs, built beside it by `cargo build --release --workspace`.
pub struct Binaries {
    pub seckill: PathBuf,
    pub loadtest: PathBuf,
}

impl Binaries {
    /// `seckill` and `loadtest` in the folder of the running `lab`; says how to build them.
    pub fn beside_this_program() -> anyhow::Result<Binaries> {
        let lab = std::env::current_exe().context("cannot tell where the lab's program is")?;
        let folder = lab.parent().unwrap_or(Path::new("."));
        let binaries = Binaries {
            seckill: folder.join("seckill"),
            loadtest: folder.join("loadtest"),
        };
        for binary in [&binaries.seckill, &binaries.loadtest] {
            if !binary.exists() {
                bail!(
                    "{} is missing: build every program of the project with `cargo build --release --workspace` \
                     (`make lab` does)",
                    binary.display()
                );
            }
        }
        Ok(binaries)
    }
}

/// One setup, running.
struct Stage {
    setup: Setup,
    needs: Needs,
    servers: Servers,
    instances: Vec<Instance>,
    /// Counts setups, so a fault still waiting on an old one leaves the new one alone.
    generation: u64,
}

#[derive(Default)]
struct Inner {
    stage: Option<Stage>,
    /// The guided scenario the stage was started for, if any.
    scenario: Option<&'static str>,
    crowd: Option<Crowd>,
    crowds: u32,
    generations: u64,
}

/// The lab. Cheap to share: the page's requests and the faults' timers hold an `Arc`.
pub struct Lab {
    inner: tokio::sync::Mutex<Inner>,
    binaries: Binaries,
    dir: PathBuf,
    started: Instant,
    /// What happened, a line each, for the page.
    log: std::sync::Mutex<Vec<String>>,
}

impl Lab {
    /// A lab keeping its logs and crowds in `dir`.
    pub fn new(binaries: Binaries, dir: &Path) -> anyhow::Result<Arc<Lab>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
        Ok(Arc::new(Lab {
            inner: Default::default(),
            binaries,
            dir: dir.to_owned(),
            started: Instant::now(),
            log: Default::default(),
        }))
    }

    /// Stops what runs, then starts the servers and the two instances of `setup`.
    pub async fn start(&self, setup: Setup) -> Result<(), String> {
        let needs = setup.validate()?;
        let mut inner = self.inner.lock().await;
        stop_everything(&mut inner).await;
        let stage = self.stage(setup, needs, inner.generations + 1).await;
        let stage = stage.map_err(|error| format!("{error:#}"))?;
        inner.generations = stage.generation;
        inner.scenario = None;
        self.say(format!(
            "started `{}` with fencing {}: {} and {}",
            stage.setup.strategy,
            if stage.setup.fencing { "on" } else { "off" },
            stage.instances[0].name,
            stage.instances[1].name
        ));
        inner.stage = Some(stage);
        Ok(())
    }

    async fn stage(&self, setup: Setup, needs: Needs, generation: u64) -> anyhow::Result<Stage> {
        let servers = Servers::start(needs).await?;
        let mut instances = Vec::new();
        for _ in 0..INSTANCES {
            let instance = Instance::start(&self.binaries.seckill, &setup, needs, &servers, &self.dir).await;
            match instance {
                Ok(instance) => instances.push(instance),
                Err(error) => {
                    for mut started in instances {
                        started.kill().await;
                    }
                    return Err(error);
                }
            }
        }
        Ok(Stage {
            setup,
            needs,
            servers,
            instances,
            generation,
        })
    }

    /// Sends the lessons' crowd at both instances.
    pub async fn send_crowd(&self) -> Result<u32, String> {
        let loadtest = &self.binaries.loadtest;
        self.send(|number, hosts, stock| Crowd::start(loadtest, number, hosts, stock, &self.dir))
            .await
            .inspect(|number| {
                let (buyers, units) = (crate::crowd::BUYERS, crate::crowd::STOCK);
                self.say(format!("crowd {number}: {buyers} buyers at {units} units"));
            })
    }

    /// Starts crowd number N+1 with `start`, given that number, the instances' URLs and
    /// the stock's Redis; refused while another is buying or before a setup runs.
    async fn send<F>(&self, start: F) -> Result<u32, String>
    where
        F: FnOnce(u32, &[String], &str) -> anyhow::Result<Crowd>,
    {
        let mut inner = self.inner.lock().await;
        if inner.crowd.as_ref().is_some_and(Crowd::is_running) {
            return Err("buyers are still buying: wait for their verdict (or stop selling)".to_owned());
        }
        let Some(stage) = &inner.stage else {
            return Err("nothing runs yet: choose a strategy and press start".to_owned());
        };
        let hosts: Vec<String> = stage.instances.iter().map(Instance::url).collect();
        let number = inner.crowds + 1;
        let crowd = start(number, &hosts, &stage.servers.stock.url()).map_err(|error| format!("{error:#}"))?;
        inner.crowds = number;
        inner.crowd = Some(crowd);
        Ok(number)
    }

    /// Runs a guided scenario: its setup started, the crowd sent, its faults struck.
    pub async fn run_scenario(self: &Arc<Self>, id: &str) -> Result<u32, String> {
        let known = || {
            scenarios::all()
                .iter()
                .map(|scenario| scenario.id)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let scenario = scenarios::named(id).ok_or_else(|| format!("no scenario `{id}`; the lab has {}", known()))?;
        self.start(scenario.setup.clone()).await?;
        let crowd = self.send_crowd().await?;
        for strike in scenario.strikes {
            self.strike(strike).await?;
        }
        self.inner.lock().await.scenario = Some(scenario.id);
        self.say(format!("scenario `{}` (lesson {})", scenario.id, scenario.lesson));
        Ok(crowd)
    }

    /// Starts a steady load of `rate` buyers a second, until [`Lab::stop_selling`].
    pub async fn keep_selling(&self, rate: u32) -> Result<u32, String> {
        if !(1..=200).contains(&rate) {
            return Err(format!("{rate} buyers a second: pick 1 to 200"));
        }
        self.send(|number, hosts, stock| Crowd::start_steady(number, hosts, stock, rate, &self.dir))
            .await
            .inspect(|number| {
                self.say(format!(
                    "crowd {number}: a steady {rate} buyers a second, until stopped"
                ))
            })
    }

    /// Stops the steady load; its verdict comes once its last buyers have their answers.
    pub async fn stop_selling(&self) -> Result<u32, String> {
        let inner = self.inner.lock().await;
        match inner.crowd.as_ref().filter(|crowd| crowd.is_running()) {
            Some(crowd) if crowd.stop_selling() => {
                self.say(format!("crowd {}: no more buyers; judging", crowd.number));
                Ok(crowd.number)
            }
            Some(_) => Err("the crowd ends by itself: wait for its verdict".to_owned()),
            None => Err("nothing is selling".to_owned()),
        }
    }

    /// Strikes a fault, and lets it run its course in the background.
    pub async fn strike(self: &Arc<Self>, strike: Strike) -> Result<String, String> {
        let inner = self.inner.lock().await;
        let Some(stage) = &inner.stage else {
            return Err("nothing runs yet: choose a strategy and press start".to_owned());
        };
        strike.validate(stage.instances.len())?;
        match (&strike, stage.needs) {
            (Strike::PauseHolder { .. } | Strike::CutFromLock { .. } | Strike::DelayLock { .. }, Needs::StockOnly) => {
                return Err(format!(
                    "`{}` keeps no lock on a server: there is no holder to find nor link to cut; pause an instance instead",
                    stage.setup.strategy
                ))
            }
            (Strike::FailOverLock { .. }, needs) if needs != Needs::LockSentinel => {
                return Err(
                    "a failover needs the lock's Redis with a replica and a Sentinel: choose `redis`, tick \
                     \"the lock's Redis can fail over\" and start again"
                        .to_owned(),
                )
            }
            (Strike::CutFromLock { .. } | Strike::DelayLock { .. }, Needs::LockSentinel) => {
                return Err(
                    "the instances ask the Sentinel for the master, then reach it directly: the lab cannot \
                     cut that link; cut it from the stock, or start without the failover"
                        .to_owned(),
                )
            }
            (Strike::JumpClock { instance, .. }, _) if !stage.instances[*instance].can_jump_clock() => {
                return Err(format!(
                    "a clock jump needs libfaketime ({}): `sudo apt-get install faketime`, then start again",
                    testkit::wall_clock::LIBFAKETIME
                ))
            }
            _ => {}
        }
        let generation = stage.generation;
        drop(inner);
        let lab = self.clone();
        let said = strike.describe();
        tokio::spawn(async move {
            if let Err(error) = lab.play(strike, generation).await {
                lab.say(format!("the fault stopped: {error:#}"));
            }
        });
        Ok(said)
    }

    /// A fault from its start to its end.
    async fn play(&self, strike: Strike, generation: u64) -> anyhow::Result<()> {
        use testkit::nemesis::{Delay, Direction, Fault as Cut};
        let (instance, first, ms, then) = match strike {
            Strike::PauseHolder { ms } => {
                let (holder, linger) = self.wait_for_holder(generation).await?;
                // Past its lease check, into the linger before its write: a holder stopped
                // earlier would check its lease on waking, see it lost, and sell nothing.
                tokio::time::sleep(linger / 2).await;
                (holder, Act::Pause, ms, Act::Resume)
            }
            Strike::Pause { instance, ms } => (instance, Act::Pause, ms, Act::Resume),
            Strike::Kill { instance, ms } => (instance, Act::Kill, ms, Act::Launch),
            Strike::CutFromLock { instance, ms } => (
                instance,
                Act::Cut(Link::Lock, Cut::Partition),
                ms,
                Act::Heal(Link::Lock),
            ),
            Strike::CutFromStock { instance, ms } => (
                instance,
                Act::Cut(Link::Stock, Cut::Partition),
                ms,
                Act::Heal(Link::Stock),
            ),
            Strike::DelayLock { instance, delay_ms, ms } => {
                let delay = Delay {
                    ms: delay_ms,
                    jitter_ms: 0,
                    direction: Direction::Both,
                };
                (
                    instance,
                    Act::Cut(Link::Lock, Cut::Delay(delay)),
                    ms,
                    Act::Heal(Link::Lock),
                )
            }
            Strike::JumpClock { instance, seconds } => {
                return self.act(generation, instance, Act::JumpClock(seconds)).await
            }
            Strike::FailOverLock { ms } => return self.fail_over_the_lock(generation, ms).await,
        };
        self.act(generation, instance, first).await?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.act(generation, instance, then).await
    }

    /// Does `act` to instance `index` of the setup `generation`, if it still runs, and
    /// records it into the running crowd's history.
    async fn act(&self, generation: u64, index: usize, act: Act) -> anyhow::Result<()> {
        let mut inner = self.inner.lock().await;
        let inner = &mut *inner;
        let Some(stage) = inner.stage.as_mut().filter(|stage| stage.generation == generation) else {
            return Ok(()); // the setup changed meanwhile: its instances are gone
        };
        let target = &mut stage.instances[index];
        let (fault, detail) = match act {
            Act::Pause => (target.pause().map(|_| Fault::Pause)?, String::new()),
            Act::Resume => (target.resume().map(|_| Fault::Resume)?, String::new()),
            Act::Kill => {
                target.kill().await;
                (Fault::Kill, String::new())
            }
            Act::Launch => (target.launch().await.map(|_| Fault::Start)?, String::new()),
            Act::Cut(link, cut) => {
                link.of(target).strike(cut);
                match cut {
                    testkit::nemesis::Fault::Delay(delay) => (
                        Fault::Delay,
                        format!("its {} link, {} ms each way", link.name(), delay.ms),
                    ),
                    _ => (Fault::Partition, format!("its {} link", link.name())),
                }
            }
            Act::Heal(link) => {
                link.of(target).strike(testkit::nemesis::Fault::Healed);
                (Fault::Heal, format!("its {} link", link.name()))
            }
            Act::JumpClock(seconds) => (
                target.jump_clock(seconds).map(|_| Fault::ClockJump)?,
                format!("{seconds:+} s"),
            ),
        };
        let name = target.name.clone();
        self.record(inner, fault, &name, &detail)
    }

    /// Puts a fault into the running crowd's history, and into the page's log.
    fn record(&self, inner: &Inner, fault: Fault, target: &str, detail: &str) -> anyhow::Result<()> {
        if let Some(crowd) = inner.crowd.as_ref().filter(|crowd| crowd.is_running()) {
            let detail = (!detail.is_empty()).then_some(detail);
            loadtest::history::append_fault(&crowd.faults, fault, target, detail)?;
        }
        self.say(format!("{fault:?} {target} {detail}").to_lowercase());
        Ok(())
    }

    /// Lesson 5's failover, as `make demo-failover` plays it: the replication cut, a grant
    /// the replica never hears of, its holder paused, the master killed, the replica
    /// promoted; the holder wakes `ms` after its pause, and the old master comes back as
    /// the new one's replica.
    async fn fail_over_the_lock(&self, generation: u64, ms: u64) -> anyhow::Result<()> {
        self.on_failover(generation, Failover::cut_replication).await??;
        self.record_now(generation, Fault::Partition, "its replication").await?;
        let paused = match self.pause_a_holder_granted_after_the_cut(generation).await {
            Ok(paused) => paused,
            Err(error) => {
                self.on_failover(generation, Failover::heal_replication).await?;
                self.record_now(generation, Fault::Heal, "its replication").await?;
                return Err(error);
            }
        };
        let Some((old_port, master)) = self.on_failover(generation, Failover::take_master).await? else {
            bail!("the lock's Redis has no master to kill");
        };
        tokio::task::spawn_blocking(move || drop(master)).await?; // SIGKILL
        self.record_now(generation, Fault::Kill, "its master").await?;
        self.on_failover(generation, Failover::heal_replication).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.on_failover(generation, Failover::replica_promoted).await? {
            if Instant::now() > deadline {
                bail!("the Sentinel promoted no replica within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let new_port = self.on_failover(generation, Failover::promote).await?;
        self.record_now(generation, Fault::Failover, "the Sentinel promoted its replica")
            .await?;
        tokio::time::sleep(Duration::from_millis(ms).saturating_sub(paused.1.elapsed())).await;
        self.act(generation, paused.0, Act::Resume).await?;
        let replica = tokio::task::spawn_blocking(move || Failover::rejoin(old_port, new_port))
            .await
            .map_err(|failed| anyhow::anyhow!(crate::servers::panic_text(failed)))?;
        self.on_failover(generation, |failover| failover.put_replica(replica))
            .await?;
        self.record_now(generation, Fault::Heal, "its replication, the old master a replica")
            .await
    }

    /// Waits [`GRANT_AFTER_CUT`], then pauses the next holder in its linger; returns the
    /// holder and when it was paused.
    async fn pause_a_holder_granted_after_the_cut(&self, generation: u64) -> anyhow::Result<(usize, Instant)> {
        tokio::time::sleep(GRANT_AFTER_CUT).await;
        let (holder, linger) = self.wait_for_holder(generation).await?;
        tokio::time::sleep(linger / 2).await;
        self.act(generation, holder, Act::Pause).await?;
        Ok((holder, Instant::now()))
    }

    /// `step` done to the lock's failover group of the setup `generation`.
    async fn on_failover<T>(&self, generation: u64, step: impl FnOnce(&mut Failover) -> T) -> anyhow::Result<T> {
        let mut inner = self.inner.lock().await;
        let stage = inner.stage.as_mut().filter(|stage| stage.generation == generation);
        match stage.and_then(|stage| stage.servers.failover.as_mut()) {
            Some(failover) => Ok(step(failover)),
            None => bail!("the setup changed"),
        }
    }

    /// Records a fault of the lock's Redis into the running crowd's history.
    async fn record_now(&self, generation: u64, fault: Fault, detail: &str) -> anyhow::Result<()> {
        let inner = self.inner.lock().await;
        match &inner.stage {
            Some(stage) if stage.generation == generation => self.record(&inner, fault, LOCK_REDIS, detail),
            _ => Ok(()),
        }
    }

    /// The instance that holds the lock (any segment's), once one does, and how long its
    /// sales linger before their writes. Each instance says how many grants it holds in
    /// its `/metrics` (`seckill_locks_held`), whatever the lock's backend.
    async fn wait_for_holder(&self, generation: u64) -> anyhow::Result<(usize, Duration)> {
        let (urls, names, linger) = {
            let inner = self.inner.lock().await;
            let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
                bail!("the setup changed");
            };
            let urls: Vec<String> = stage.instances.iter().map(Instance::url).collect();
            let names: Vec<String> = stage.instances.iter().map(|instance| instance.name.clone()).collect();
            (urls, names, Duration::from_millis(stage.setup.linger_ms))
        };
        self.say("waiting for an instance to hold the lock".to_owned());
        let http = reqwest::Client::builder().timeout(Duration::from_millis(200)).build()?;
        let deadline = Instant::now() + Duration::from_millis(HOLDER_WITHIN_MS);
        while Instant::now() < deadline {
            for (index, url) in urls.iter().enumerate() {
                if locks_held(&http, url).await > 0 {
                    self.say(format!("{} holds the lock", names[index]));
                    return Ok((index, linger));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bail!("no instance held the lock within {HOLDER_WITHIN_MS} ms: send the crowd, then pause the holder")
    }

    /// What the page shows.
    pub async fn state(&self) -> State {
        let inner = self.inner.lock().await;
        let stage = inner.stage.as_ref();
        State {
            strategies: crate::setup::available(),
            setup: stage.map(|stage| stage.setup.clone()),
            scenario: inner.scenario,
            instances: stage.map_or_else(Vec::new, |stage| {
                stage.instances.iter().map(InstanceState::of).collect()
            }),
            server_pids: stage.map_or_else(Vec::new, |stage| stage.servers.pids()),
            crowds_sent: inner.crowds,
            crowd: inner.crowd.as_ref().map(|crowd| CrowdState {
                number: crowd.number,
                kind: crowd.kind,
                running: crowd.is_running(),
                outcome: crowd.outcome(),
            }),
            log: self.log.lock().unwrap().clone(),
        }
    }

    /// The page of the last crowd's timeline, or `None` before the first.
    pub async fn timeline(&self) -> Option<String> {
        let inner = self.inner.lock().await;
        inner.crowd.as_ref().map(Crowd::timeline)
    }

    /// Heals every link, resumes and kills every instance, stops the crowd and the servers.
    pub async fn shutdown(&self) {
        let mut inner = self.inner.lock().await;
        stop_everything(&mut inner).await;
    }

    fn say(&self, line: String) {
        let line = format!("{:7.1} s  {line}", self.started.elapsed().as_secs_f64());
        println!("[lab] {line}");
        self.log.lock().unwrap().push(line);
    }
}

/// The grants the instance at `url` holds now, by its `/metrics`; 0 when it does not answer.
async fn locks_held(http: &reqwest::Client, url: &str) -> u64 {
    let Ok(response) = http.get(format!("{url}/metrics")).send().await else {
        return 0;
    };
    let page = response.text().await.unwrap_or_default();
    page.lines()
        .find_map(|line| line.strip_prefix("seckill_locks_held ")?.trim().parse().ok())
        .unwrap_or(0)
}

async fn stop_everything(inner: &mut Inner) {
    if let Some(crowd) = inner.crowd.take() {
        crowd.stop();
    }
    if let Some(mut stage) = inner.stage.take() {
        for instance in &mut stage.instances {
            instance.lock_link.strike(testkit::nemesis::Fault::Healed);
            instance.stock_link.strike(testkit::nemesis::Fault::Healed);
            instance.kill().await;
        }
        // The servers are killed as `stage` drops.
    }
}

/// One step of a fault, done to one instance.
enum Act {
    Pause,
    Resume,
    Kill,
    Launch,
    Cut(Link, testkit::nemesis::Fault),
    Heal(Link),
    JumpClock(i64),
}

/// Which of an instance's links.
#[derive(Clone, Copy)]
enum Link {
    Lock,
    Stock,
}

impl Link {
    fn name(self) -> &'static str {
        match self {
            Link::Lock => "lock",
            Link::Stock => "stock",
        }
    }

    fn of(self, instance: &Instance) -> &testkit::nemesis::Nemesis {
        match self {
            Link::Lock => &instance.lock_link,
            Link::Stock => &instance.stock_link,
        }
    }
}

/// The lab as the page sees it, from `GET /state`.
#[derive(Serialize)]
pub struct State {
    pub strategies: Vec<Available>,
    pub setup: Option<Setup>,
    /// The id of the guided scenario running, if the setup is one's.
    pub scenario: Option<&'static str>,
    pub instances: Vec<InstanceState>,
    pub server_pids: Vec<u32>,
    /// Crowds sent since the lab started; the next is number `crowds_sent + 1`.
    pub crowds_sent: u32,
    /// The last crowd of this setup.
    pub crowd: Option<CrowdState>,
    pub log: Vec<String>,
}

#[derive(Serialize)]
pub struct InstanceState {
    pub name: String,
    pub url: String,
    pub pid: Option<u32>,
    pub paused: bool,
    pub clock_offset_s: i64,
    pub can_jump_clock: bool,
    pub lock_link: serde_json::Value,
    pub stock_link: serde_json::Value,
}

impl InstanceState {
    fn of(instance: &Instance) -> Self {
        InstanceState {
            name: instance.name.clone(),
            url: instance.url(),
            pid: instance.pid(),
            paused: instance.paused,
            clock_offset_s: instance.clock_offset_s,
            can_jump_clock: instance.can_jump_clock(),
            lock_link: serde_json::to_value(instance.lock_link.status()).unwrap_or_default(),
            stock_link: serde_json::to_value(instance.stock_link.status()).unwrap_or_default(),
        }
    }
}

#[derive(Serialize)]
pub struct CrowdState {
    pub number: u32,
    pub kind: crate::crowd::Kind,
    pub running: bool,
    pub outcome: Option<Outcome>,
}
