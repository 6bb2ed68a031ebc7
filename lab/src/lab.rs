//! The lab's state: the setup the page chose, the servers and the two instances it
//! started for it, the crowd under way, and the faults struck meanwhile. Everything it
//! starts it stops ([`Lab::shutdown`]): no process, cut link or moved clock outlives it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use loadtest::history::Fault;
use serde::Serialize;

use crate::crowd::{Crowd, Outcome, Sold};
use crate::failover::Which;
use crate::faults::{Strike, HOLDER_WITHIN_MS};
use crate::instances::Instance;
use crate::scenarios;
use crate::servers::Servers;
use crate::setup::{Available, Needs, Setup};

/// Two instances, as in every lesson.
const INSTANCES: usize = 2;

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
pub(crate) struct Stage {
    pub(crate) setup: Setup,
    pub(crate) needs: Needs,
    pub(crate) servers: Servers,
    instances: Vec<Instance>,
    /// Counts setups, so a fault still waiting on an old one leaves the new one alone.
    pub(crate) generation: u64,
    /// The faults struck on it, stopped with it: one still under way (a restart, a
    /// failover) must not bring a server back while the next setup starts its own.
    faults: Vec<tokio::task::AbortHandle>,
}

impl Stage {
    /// Why this setup cannot take `strike`, with what to do instead; `None` if it can.
    fn refusal_of(&self, strike: &Strike) -> Option<String> {
        let clock_jumps = |instance: usize| self.instances[instance].can_jump_clock();
        let refused = crate::faults::refusal(&self.setup, self.needs, strike, clock_jumps);
        refused.or_else(|| match strike {
            Strike::JumpLockClock { .. } if self.servers.lock_clock.is_none() => Some(
                "a jump of the lock's Redis clock needs gcc, which compiles the preload that moves it \
                 (scripts/lib/clock-shift.c): `sudo apt-get install build-essential`, then start again"
                    .to_owned(),
            ),
            _ => None,
        })
    }

    /// Where its instances answer buyers.
    pub(crate) fn hosts(&self) -> Vec<String> {
        self.instances.iter().map(Instance::url).collect()
    }

    /// Where this setup's MariaDB is kept (the lock's, or the orders' own); `None` if it
    /// keeps nothing in MariaDB.
    pub(crate) fn mariadb_slot(&mut self) -> Option<&mut Option<testkit::PrivateServer>> {
        self.servers.mariadb_slot(self.needs, self.setup.orders)
    }
}

#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) stage: Option<Stage>,
    /// The guided scenario the stage was started for, if any.
    scenario: Option<&'static str>,
    pub(crate) crowd: Option<Crowd>,
    crowds: u32,
    generations: u64,
}

/// The lab. Cheap to share: the page's requests and the faults' timers hold an `Arc`.
pub struct Lab {
    pub(crate) inner: tokio::sync::Mutex<Inner>,
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
        let servers = Servers::start(needs, &setup).await?;
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
            faults: Vec::new(),
        })
    }

    /// Sends the lessons' crowd at both instances.
    pub async fn send_crowd(&self) -> Result<u32, String> {
        self.send_crowd_of(crate::crowd::Size::LESSONS).await
    }

    /// Sends a crowd of `size` at both instances.
    pub async fn send_crowd_of(&self, size: crate::crowd::Size) -> Result<u32, String> {
        let loadtest = &self.binaries.loadtest;
        self.send(|number, hosts, servers| Crowd::start(loadtest, size, number, hosts, &Sold::of(servers), &self.dir))
            .await
            .inspect(|number| {
                let (buyers, units) = (size.buyers, size.units);
                self.say(format!("crowd {number}: {buyers} buyers at {units} units"));
            })
    }

    /// Starts crowd number N+1 with `start`, given that number, the instances' URLs and
    /// the servers; refused while another is buying or before a setup runs.
    async fn send<F>(&self, start: F) -> Result<u32, String>
    where
        F: FnOnce(u32, &[String], &Servers) -> anyhow::Result<Crowd>,
    {
        let mut inner = self.inner.lock().await;
        if inner.crowd.as_ref().is_some_and(Crowd::is_running) {
            return Err("buyers are still buying: wait for their verdict (or stop selling)".to_owned());
        }
        let Some(stage) = &inner.stage else {
            return Err("nothing runs yet: choose a strategy and press start".to_owned());
        };
        let hosts = stage.hosts();
        let number = inner.crowds + 1;
        let crowd = start(number, &hosts, &stage.servers).map_err(|error| format!("{error:#}"))?;
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
        self.send(|number, hosts, servers| Crowd::start_steady(number, hosts, &Sold::of(servers), rate, &self.dir))
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
        let mut inner = self.inner.lock().await;
        let Some(stage) = &inner.stage else {
            return Err("nothing runs yet: choose a strategy and press start".to_owned());
        };
        strike.validate(stage.instances.len())?;
        if let Some(why) = stage.refusal_of(&strike) {
            return Err(why);
        }
        if let Some(why) = (strike == Strike::Restock)
            .then(|| crate::restock::refusal(&inner))
            .flatten()
        {
            return Err(why);
        }
        let generation = stage.generation;
        let lab = self.clone();
        let said = strike.describe();
        let fault = tokio::spawn(async move {
            if let Err(error) = lab.play(strike, generation).await {
                lab.say(format!("the fault stopped: {error:#}"));
            }
        });
        if let Some(stage) = inner.stage.as_mut() {
            stage.faults.retain(|fault| !fault.is_finished());
            stage.faults.push(fault.abort_handle());
        }
        Ok(said)
    }

    /// A fault from its start to its end.
    async fn play(&self, strike: Strike, generation: u64) -> anyhow::Result<()> {
        let (instance, first, ms, then) = match strike {
            Strike::PauseHolder { ms } => {
                let holder = self.wait_for_holder(generation).await?;
                // Past its lease check, into the linger before its write: a holder stopped
                // earlier would check its lease on waking, see it lost, and sell nothing.
                tokio::time::sleep(holder.linger / 2).await;
                (holder.index, Act::Pause, ms, Act::Resume)
            }
            Strike::JumpClock { instance, seconds } => {
                return self.act(generation, instance, Act::JumpClock(seconds)).await
            }
            Strike::FailOverLock { ms } => return self.fail_over(generation, Which::Lock, ms).await,
            Strike::FailOverStock { ms } => return self.fail_over(generation, Which::Stock, ms).await,
            Strike::RestartMariaDb { ms } => return self.restart_mariadb(generation, ms).await,
            Strike::JumpLockClock { seconds } => return self.jump_lock_clock(generation, seconds).await,
            Strike::Restock => return self.restock(generation).await,
            ref on_one => match Act::lasting_on_one_instance(on_one) {
                Some(acts) => acts,
                None => bail!("the lab cannot play `{}`", on_one.describe()),
            },
        };
        self.act(generation, instance, first).await?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.act(generation, instance, then).await
    }

    /// Does `act` to instance `index` of the setup `generation`, if it still runs, and
    /// records it into the running crowd's history.
    pub(crate) async fn act(&self, generation: u64, index: usize, act: Act) -> anyhow::Result<()> {
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
                    testkit::nemesis::Fault::Reset => (
                        Fault::Reset,
                        format!("its {} connections, new ones refused", link.name()),
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

    /// Moves the wall clock of the setup `generation`'s lock Redis `seconds` from the real
    /// time (0 sets it right), and says so in the history. Redis expires a key by this
    /// clock: a jump past a lease frees the lock while its holder still sells.
    async fn jump_lock_clock(&self, generation: u64, seconds: i64) -> anyhow::Result<()> {
        let inner = self.inner.lock().await;
        let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
            return Ok(()); // the setup changed meanwhile: its servers are gone
        };
        let Some(clock) = &stage.servers.lock_clock else {
            bail!("the lock's Redis has no clock the lab can move");
        };
        clock.jump_to(seconds * 1000);
        self.record(
            &inner,
            Fault::ClockJump,
            Which::Lock.target(),
            &format!("{seconds:+} s"),
        )
    }

    /// Puts a fault into the running crowd's history, and into the page's log.
    pub(crate) fn record(&self, inner: &Inner, fault: Fault, target: &str, detail: &str) -> anyhow::Result<()> {
        if let Some(crowd) = inner.crowd.as_ref().filter(|crowd| crowd.is_running()) {
            let detail = (!detail.is_empty()).then_some(detail);
            loadtest::history::append_fault(&crowd.faults, fault, target, detail)?;
        }
        self.say(format!("{fault:?} {target} {detail}").to_lowercase());
        Ok(())
    }

    /// [`Lab::record`], if the setup `generation` still runs: a fault that outlived its
    /// setup belongs to no history.
    pub(crate) async fn record_if_current(
        &self,
        generation: u64,
        fault: Fault,
        target: &str,
        detail: &str,
    ) -> anyhow::Result<()> {
        let inner = self.inner.lock().await;
        match &inner.stage {
            Some(stage) if stage.generation == generation => self.record(&inner, fault, target, detail),
            _ => Ok(()),
        }
    }

    /// The instance that holds the lock (any segment's), once one does, and how long its
    /// sales linger before their writes. Each instance says how many grants it holds in
    /// its `/metrics` (`seckill_locks_held`), whatever the lock's backend.
    pub(crate) async fn wait_for_holder(&self, generation: u64) -> anyhow::Result<Holder> {
        self.say("waiting for an instance to hold the lock".to_owned());
        let Some((index, name, linger)) = self.first_with(generation, "seckill_locks_held").await? else {
            bail!("no instance held the lock within {HOLDER_WITHIN_MS} ms: send the crowd, then pause the holder")
        };
        self.say(format!("{name} holds the lock"));
        Ok(Holder { index, name, linger })
    }

    /// Waits for the first sale of the setup running now (see [`Lab::wait_for_a_sale`]).
    pub async fn first_sale(&self) -> anyhow::Result<()> {
        let generation = self.inner.lock().await.stage.as_ref().map(|stage| stage.generation);
        let Some(generation) = generation else {
            bail!("nothing runs yet: start a setup, then send the crowd");
        };
        self.wait_for_a_sale(generation).await
    }

    /// Once an instance has sold a unit (`seckill_units_sold_total`): the crowd's reset
    /// is behind, and the sale under way.
    pub(crate) async fn wait_for_a_sale(&self, generation: u64) -> anyhow::Result<()> {
        self.say("waiting for a sale".to_owned());
        match self.first_with(generation, "seckill_units_sold_total").await? {
            Some(_) => Ok(()),
            None => bail!("nothing was sold within {HOLDER_WITHIN_MS} ms: send the crowd, then strike"),
        }
    }

    /// The first instance whose `/metrics` shows `series` above 0, within
    /// [`HOLDER_WITHIN_MS`]: its index, its name, and how long its sales linger.
    async fn first_with(&self, generation: u64, series: &str) -> anyhow::Result<Option<(usize, String, Duration)>> {
        let (urls, names, linger) = {
            let inner = self.inner.lock().await;
            let Some(stage) = inner.stage.as_ref().filter(|stage| stage.generation == generation) else {
                bail!("the setup changed");
            };
            let urls = stage.hosts();
            let names: Vec<String> = stage.instances.iter().map(|instance| instance.name.clone()).collect();
            (urls, names, Duration::from_millis(stage.setup.linger_ms))
        };
        let http = reqwest::Client::builder().timeout(Duration::from_millis(200)).build()?;
        let deadline = Instant::now() + Duration::from_millis(HOLDER_WITHIN_MS);
        while Instant::now() < deadline {
            for (index, url) in urls.iter().enumerate() {
                if sample(&http, url, series).await > 0.0 {
                    return Ok(Some((index, names[index].clone(), linger)));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(None)
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

    pub(crate) fn say(&self, line: String) {
        let line = format!("{:7.1} s  {line}", self.started.elapsed().as_secs_f64());
        println!("[lab] {line}");
        self.log.lock().unwrap().push(line);
    }
}

/// The value of `series` in the `/metrics` of the instance at `url`; 0 when it does not answer.
async fn sample(http: &reqwest::Client, url: &str, series: &str) -> f64 {
    let Ok(response) = http.get(format!("{url}/metrics")).send().await else {
        return 0.0;
    };
    let page = response.text().await.unwrap_or_default();
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn stop_everything(inner: &mut Inner) {
    if let Some(crowd) = inner.crowd.take() {
        crowd.stop();
    }
    if let Some(mut stage) = inner.stage.take() {
        for fault in &stage.faults {
            fault.abort();
        }
        for instance in &mut stage.instances {
            instance.lock_link.strike(testkit::nemesis::Fault::Healed);
            instance.stock_link.strike(testkit::nemesis::Fault::Healed);
            instance.kill().await;
        }
        // The servers are killed as `stage` drops.
    }
}

/// One step of a fault, done to one instance.
pub(crate) enum Act {
    Pause,
    Resume,
    Kill,
    Launch,
    Cut(Link, testkit::nemesis::Fault),
    Heal(Link),
    JumpClock(i64),
}

impl Act {
    /// A fault that lasts on one instance: the instance, the act that starts it, how long
    /// it lasts, and the act that ends it; `None` for the others.
    fn lasting_on_one_instance(strike: &Strike) -> Option<(usize, Act, u64, Act)> {
        use testkit::nemesis::{Delay, Direction, Fault as Cut};
        let on_link = |instance, link, cut, ms| (instance, Act::Cut(link, cut), ms, Act::Heal(link));
        Some(match *strike {
            Strike::Pause { instance, ms } => (instance, Act::Pause, ms, Act::Resume),
            Strike::Kill { instance, ms } => (instance, Act::Kill, ms, Act::Launch),
            Strike::CutFromLock { instance, ms } => on_link(instance, Link::Lock, Cut::Partition, ms),
            Strike::CutFromStock { instance, ms } => on_link(instance, Link::Stock, Cut::Partition, ms),
            Strike::DelayLock { instance, delay_ms, ms } => {
                let delay = Delay {
                    ms: delay_ms,
                    jitter_ms: 0,
                    direction: Direction::Both,
                };
                on_link(instance, Link::Lock, Cut::Delay(delay), ms)
            }
            Strike::ResetLock { instance, ms } => on_link(instance, Link::Lock, Cut::Reset, ms),
            Strike::ResetStock { instance, ms } => on_link(instance, Link::Stock, Cut::Reset, ms),
            Strike::PauseHolder { .. }
            | Strike::JumpClock { .. }
            | Strike::JumpLockClock { .. }
            | Strike::FailOverLock { .. }
            | Strike::FailOverStock { .. }
            | Strike::RestartMariaDb { .. }
            | Strike::Restock => return None,
        })
    }
}

/// An instance seen holding the lock.
pub(crate) struct Holder {
    /// Its place among the stage's instances.
    pub index: usize,
    /// Its name, which starts its lock tokens (`seckill-<port>`).
    pub name: String,
    /// How long its sales linger between their read and their write.
    pub linger: Duration,
}

/// Which of an instance's links.
#[derive(Clone, Copy)]
pub(crate) enum Link {
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
