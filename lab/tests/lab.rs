//! The lab as a teacher uses it: the `lab` binary on a free port, driven through its page
//! in Debian's headless chromium (`tests/browser/lab.mjs`) and through its calls; then
//! stopped with Ctrl-C, after which nothing it started may be left.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The user id and group id of `nobody` on Debian.
const NOBODY: u32 = 65534;

/// The project's root (the lab crate is one folder down).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A lab of the test's own: its process, its port and its folder.
struct Lab {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Lab {
    fn start() -> Lab {
        Self::start_with(Command::new(env!("CARGO_BIN_EXE_lab")), tempfile::tempdir().unwrap())
    }

    /// As a user without root: as root, the lab is started as `nobody`, with a user's
    /// PATH (no /usr/sbin), in a folder `nobody` owns.
    fn start_without_root() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: geteuid(2) reads this process's user id and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Self::start_with(Command::new(env!("CARGO_BIN_EXE_lab")), dir);
        }
        std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid",
                &NOBODY.to_string(),
                "--regid",
                &NOBODY.to_string(),
                "--clear-groups",
            ])
            .arg(env!("CARGO_BIN_EXE_lab"))
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir.path());
        Self::start_with(command, dir)
    }

    fn start_with(mut command: Command, dir: tempfile::TempDir) -> Lab {
        let port = testkit::free_port();
        let child = command
            .args(["--port", &port.to_string(), "--dir"])
            .arg(dir.path())
            // Settings a teacher's shell may hold for another run: none may reach the
            // lab's instances (a token would refuse the crowd's reset) nor its crowd.
            .env("SECKILL_ADMIN_TOKEN", "from-another-run")
            .env("SECKILL_BIND", "0.0.0.0")
            .env("LOADTEST_USERS", "3")
            .stdout(Stdio::null())
            .spawn()
            .expect("the lab runs");
        testkit::wait_for_port(port, Duration::from_secs(10), "the lab");
        Lab { child, port, dir }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, String) {
        let answer = reqwest::Client::new()
            .post(format!("{}{path}", self.url()))
            .json(&body)
            .send()
            .await
            .expect("the lab answers");
        (answer.status().as_u16(), answer.text().await.unwrap())
    }

    async fn state(&self) -> Value {
        reqwest::get(format!("{}/state", self.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Ctrl-C, and its exit status once it stopped (at most 30 s later).
    fn interrupt(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the lab did not stop within 30 s of Ctrl-C");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Lab {
    /// Ctrl-C, so that the lab stops what it started even when a test failed; a kill if
    /// it does not stop.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn setup(fencing: bool) -> Value {
    json!({"strategy": "redis", "fencing": fencing, "ttl_ms": 500, "segments": 1,
           "group_commit": false, "one_per_buyer": false, "linger_ms": 50})
}

/// `node tests/browser/lab.mjs` on `lab` with fencing `on` or `off`, with a guided
/// scenario's prediction (`scenario:ID:yes`), or with a history to replay
/// (`replay:PATH`): what the page showed. Its screenshot goes to `.run/results/`.
fn clicked(lab: &Lab, mode: &str) -> Value {
    let screenshot = match mode.split_once(':') {
        Some(("scenario", scenario)) => format!("lab-{}.png", scenario.split(':').next().unwrap()),
        Some(_) => "lab-replay.png".to_owned(),
        None => format!("lab-fencing-{mode}.png"),
    };
    let screenshot = root().join(".run/results").join(screenshot);
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let url = lab.url();
    let args = [OsStr::new(&url), OsStr::new(mode), screenshot.as_os_str()];
    testkit::browser::run_script("lab.mjs", args)
}

#[test]
fn pausing_the_holder_shows_the_double_sale_without_fencing_and_none_with_it() {
    let lab = Lab::start();
    let off = clicked(&lab, "off");
    assert_eq!(off["verdict"], "oversold", "{off}");
    let failed = off["failed"].as_array().unwrap();
    assert!(
        failed.contains(&json!("unique")),
        "a unit sold twice fails `unique`: {off}"
    );
    assert!(
        off["faultBands"].as_u64().unwrap() >= 1,
        "the pause is a band on the timeline: {off}"
    );
    assert_eq!(off["errors"], json!([]), "{off}");

    // The same crowd again, from its history file, in the replay.
    let crowd = off["crowds"].as_u64().unwrap();
    let history = lab.dir.path().join(format!("crowd-{crowd}.history.jsonl"));
    let replayed = clicked(&lab, &format!("replay:{}", history.display()));
    let events = replayed["events"].as_u64().unwrap();
    assert!(
        events > 1000,
        "500 requests, each sent and answered, and the pause: {replayed}"
    );
    assert_eq!(
        replayed["title"],
        format!("replay: {events} of {events} events"),
        "{replayed}"
    );
    assert!(
        replayed["redAtEnd"].as_u64().unwrap() >= 2,
        "the two buyers of one unit: {replayed}"
    );
    assert_eq!(
        replayed["redAtStart"], 0,
        "nothing has happened yet at the first step: {replayed}"
    );
    assert_eq!(replayed["errors"], json!([]), "{replayed}");

    let on = clicked(&lab, "on");
    assert_eq!(
        (&on["verdict"], &on["failed"], &on["crowds"]),
        (&json!("held"), &json!([]), &json!(1)),
        "the fence refuses the paused holder's write: {on}"
    );
    let passed = on["passed"].as_array().unwrap();
    for check in ["unique", "lost", "linearizable", "fence-order"] {
        assert!(passed.contains(&json!(check)), "{check} passes with fencing on: {on}");
    }
    assert_eq!(on["errors"], json!([]), "{on}");
}

/// Whether process `pid` is gone (or a zombie, which is dead and only waits to be reaped).
/// The process ids the lab's state names: its servers' and its running instances'.
fn pids_of(state: &Value) -> Vec<u64> {
    let servers = state["server_pids"].as_array().into_iter().flatten();
    let instances = state["instances"].as_array().into_iter().flatten();
    servers
        .filter_map(Value::as_u64)
        .chain(instances.filter_map(|instance| instance["pid"].as_u64()))
        .collect()
}

fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_leaves_no_process_paused_link_cut_or_clock_moved_behind() {
    let mut lab = Lab::start();
    assert_eq!(lab.post("/start", setup(false)).await, (200, "started".to_owned()));
    // Faults meant to outlast the lab: a minute each.
    for strike in [
        json!({"kind": "pause", "instance": 0, "ms": 60_000}),
        json!({"kind": "cut-from-lock", "instance": 1, "ms": 60_000}),
        json!({"kind": "jump-clock", "instance": 1, "seconds": 3600}),
    ] {
        let (status, said) = lab.post("/strike", strike.clone()).await;
        assert_eq!(status, 200, "{strike}: {said}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let state = loop {
        let state = lab.state().await;
        let struck = state["instances"][0]["paused"] == true
            && state["instances"][1]["lock_link"]["fault"] == "partition"
            && state["instances"][1]["clock_offset_s"] == 3600;
        if struck {
            break state;
        }
        assert!(Instant::now() < deadline, "the faults were not struck: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let pids = pids_of(&state);
    assert_eq!(pids.len(), 4, "a stock Redis, a lock Redis and two instances: {state}");
    let ports: Vec<u16> = state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|instance| {
            instance["url"]
                .as_str()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();

    assert!(lab.interrupt().success(), "the lab stops cleanly on Ctrl-C");
    for pid in pids {
        assert!(gone(pid), "process {pid}, started by the lab, outlived it");
    }
    for port in ports.into_iter().chain([lab.port]) {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still answers after the lab stopped"
        );
    }
}

#[test]
fn a_guided_scenario_answers_the_learners_prediction_in_the_page() {
    let lab = Lab::start();
    let seen = clicked(&lab, "scenario:pause-fenced:yes");
    assert_eq!(
        (&seen["soldTwice"], &seen["right"], &seen["errors"]),
        (&json!(false), &json!(false), &json!([])),
        "a learner who predicted a double sale under the fence is told it did not happen: {seen}"
    );
    assert!(seen["why"].as_str().unwrap().contains("refuses"), "{seen}");
}

#[tokio::test]
async fn a_second_lab_on_a_taken_port_names_it_and_how_to_pick_another() {
    let lab = Lab::start();
    let second = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["--port", &lab.port.to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("port {} is taken", lab.port)) && said.contains(&format!("--port {}", lab.port + 1)),
        "{said}"
    );
}

#[tokio::test]
async fn a_page_of_another_site_cannot_drive_the_lab() {
    let lab = Lab::start();
    let http = reqwest::Client::new();
    // A rebound name: the page of evil.example, its name now pointing at 127.0.0.1.
    let rebound = http
        .post(format!("{}/crowd", lab.url()))
        .header("host", format!("evil.example:{}", lab.port))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 403);
    assert!(rebound.text().await.unwrap().contains("evil.example"));
    let foreign = http
        .post(format!("{}/strike", lab.url()))
        .header("origin", "http://evil.example")
        .json(&json!({"kind": "pause", "instance": 0, "ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status().as_u16(), 403);
    let own = http.get(format!("{}/state", lab.url())).send().await.unwrap();
    assert_eq!(own.status().as_u16(), 200);
}

#[tokio::test]
async fn a_strategy_the_lab_cannot_start_and_a_fault_before_start_are_refused_with_the_fix() {
    let lab = Lab::start();
    let (status, said) = lab.post("/strike", json!({"kind": "pause-holder", "ms": 1000})).await;
    assert_eq!(
        (status, said.as_str()),
        (409, "nothing runs yet: choose a strategy and press start")
    );
    let mut redlock = setup(true);
    redlock["strategy"] = json!("redlock");
    redlock["lock_failover"] = json!(true);
    let (status, said) = lab.post("/start", redlock).await;
    assert_eq!(
        (status, said.as_str()),
        (
            409,
            "a lock Redis that fails over is for `redis` only, not `redlock`: untick it"
        )
    );
    let (status, said) = lab.post("/start", setup(true)).await;
    assert_eq!(status, 200, "{said}");
    let (status, said) = lab.post("/strike", json!({"kind": "fail-over-lock", "ms": 1000})).await;
    assert_eq!(status, 409);
    assert!(
        said.starts_with("a failover needs the lock's Redis with a replica and a Sentinel"),
        "{said}"
    );
    let (status, said) = lab
        .post("/strike", json!({"kind": "fail-over-stock", "ms": 1000}))
        .await;
    assert_eq!(status, 409);
    assert!(
        said.starts_with("a failover needs the stock's Redis with a replica and a Sentinel"),
        "{said}"
    );
    let mut failover = setup(true);
    failover["lock_failover"] = json!(true);
    let (status, said) = lab.post("/start", failover).await;
    assert_eq!(status, 200, "{said}");
    let (status, said) = lab
        .post("/strike", json!({"kind": "cut-from-lock", "instance": 0, "ms": 1000}))
        .await;
    assert_eq!(status, 409);
    assert!(said.contains("the lab cannot cut that link"), "{said}");
}

/// Sends scenario `id` and waits for its verdict: whether a unit was sold twice (the
/// history's `unique` check failed), the outcome, and what the lab said meanwhile (a
/// fault that stopped says why there).
async fn run_scenario(lab: &Lab, id: &str) -> (bool, Value, Vec<String>) {
    let said_before = lab.state().await["log"].as_array().map_or(0, Vec::len);
    let (status, said) = lab.post(&format!("/scenarios/{id}"), json!(null)).await;
    assert_eq!(status, 200, "{id}: {said}");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let state = lab.state().await;
        assert_eq!(state["scenario"], id, "{state}");
        if let Some(outcome) = state["crowd"]["outcome"].as_object() {
            let failed = |name: &str| {
                outcome["checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|check| check["name"] == name && check["status"] == "fail")
            };
            assert!(
                ["held", "oversold"].contains(&outcome["verdict"].as_str().unwrap()),
                "{id}: a scenario ends held or oversold, nothing else: {outcome:?}"
            );
            let log = state["log"].as_array().into_iter().flatten().skip(said_before);
            let log = log.filter_map(|line| line.as_str().map(str::to_owned)).collect();
            return (failed("unique"), Value::Object(outcome.clone()), log);
        }
        assert!(Instant::now() < deadline, "{id}: no verdict within 180 s: {state}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A scenario that says a unit will be sold twice gets this many crowds to show it: a
/// pause may land where the holder already wrote.
const TRIES: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guided_scenario_shows_what_its_answer_says() {
    let lab = Lab::start();
    let scenarios: Value = reqwest::get(format!("{}/scenarios", lab.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lessons: Vec<u64> = scenarios
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["lesson"].as_u64().unwrap())
        .collect();
    for lesson in [1, 3, 4, 5, 6, 9, 14] {
        assert!(lessons.contains(&lesson), "a scenario of lesson {lesson}: {lessons:?}");
    }
    for scenario in scenarios.as_array().unwrap() {
        let (id, sold_twice) = (
            scenario["id"].as_str().unwrap(),
            scenario["sold_twice"].as_bool().unwrap(),
        );
        let tries = if sold_twice { TRIES } else { 1 };
        let (mut seen, mut logs) = (Vec::new(), Vec::new());
        for _ in 0..tries {
            let (twice, outcome, log) = run_scenario(&lab, id).await;
            seen.push(outcome);
            logs.push(log);
            if twice == sold_twice {
                break;
            }
        }
        let last = seen.last().unwrap();
        let twice = last["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "unique" && c["status"] == "fail");
        let told: Vec<String> = seen
            .iter()
            .map(|outcome| {
                let failed: Vec<&str> = outcome["checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|check| check["status"] == "fail")
                    .map(|check| check["name"].as_str().unwrap())
                    .collect();
                format!("{} (failed: {})", outcome["verdict"], failed.join(", "))
            })
            .collect();
        assert_eq!(
            twice, sold_twice,
            "{id} says sold twice = {sold_twice}; its crowds: {told:?}; what the lab said: {logs:#?}"
        );
        println!("{id}: sold twice = {twice}, after {} crowd(s)", seen.len());
    }
}

/// A steady load of 20 buyers a second, the holder paused for 1.5 s after 2 s of it, then
/// stopped 4 s later: the verdict and the checks that failed.
async fn a_steady_load_with_the_holder_paused(lab: &Lab, restocked: bool) -> (String, Vec<String>) {
    let (status, said) = lab.post("/sell?rate=20", json!(null)).await;
    assert_eq!(status, 200, "{said}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, said) = lab.post("/strike", json!({"kind": "pause-holder", "ms": 1500})).await;
    assert_eq!(status, 200, "{said}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    if restocked {
        let (status, said) = lab.post("/strike", json!({"kind": "restock"})).await;
        assert_eq!(status, 200, "{said}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, said) = lab.post("/sell/stop", json!(null)).await;
    assert_eq!(status, 200, "{said}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = lab.state().await;
        assert_eq!(state["crowd"]["kind"], "steady", "{state}");
        if let Some(outcome) = state["crowd"]["outcome"].as_object() {
            let failed = outcome["checks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|check| check["status"] == "fail")
                .map(|check| check["name"].as_str().unwrap().to_owned())
                .collect();
            return (outcome["verdict"].as_str().unwrap().to_owned(), failed);
        }
        assert!(
            Instant::now() < deadline,
            "no verdict 120 s after the load stopped: {state}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_selling_then_stop_is_judged_from_its_history_as_a_crowd_is() {
    let lab = Lab::start();
    assert_eq!(
        lab.post("/sell/stop", json!(null)).await,
        (409, "nothing is selling".to_owned())
    );
    assert_eq!(lab.post("/start", setup(false)).await.0, 200);
    let (status, said) = lab.post("/strike", json!({"kind": "restock"})).await;
    assert!(
        status == 409 && said.contains("press \"keep selling\" first"),
        "a restock ends the sale a crowd is judged in: {status} {said}"
    );
    let mut seen = Vec::new();
    for _ in 0..TRIES {
        let (verdict, failed) = a_steady_load_with_the_holder_paused(&lab, false).await;
        let sold_twice = failed.contains(&"unique".to_owned());
        seen.push((verdict, failed));
        if sold_twice {
            break;
        }
    }
    let (verdict, failed) = seen.last().unwrap();
    assert_eq!(
        verdict, "oversold",
        "without the fence, a paused holder sells a unit twice: {seen:?}"
    );
    assert!(failed.contains(&"unique".to_owned()), "{seen:?}");

    // With the fence, and restocked mid-load: the old sale's buyers are held to `unique`,
    // the new sale's to every check.
    assert_eq!(lab.post("/start", setup(true)).await.0, 200);
    let (verdict, failed) = a_steady_load_with_the_holder_paused(&lab, true).await;
    assert_eq!(
        (verdict.as_str(), failed),
        ("held", Vec::<String>::new()),
        "with the fence, across a restock"
    );
    let crowds = lab.state().await["crowds_sent"].as_u64().unwrap();
    let history = lab.dir.path().join(format!("crowd-{crowds}.history.jsonl"));
    let events = std::fs::read_to_string(&history).unwrap();
    for fault in ["pause", "resume", "restock"] {
        assert!(
            events.contains(&format!(r#""fault":"{fault}""#)),
            "the {fault} is in the steady load's history: {}",
            history.display()
        );
    }
}

/// Without root (item 5 of the lab's issue): run as `nobody`, the lab starts its Redis
/// servers and instances, pauses a holder and shows the double sale; every process it
/// started runs as that user; and a strategy whose server is not on that user's PATH is
/// greyed out with the line that installs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_root_runs_the_redis_scenarios_and_is_told_what_the_others_need() {
    let lab = Lab::start_without_root();
    let state = lab.state().await;
    let mysql = state["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|offer| offer["strategy"] == "mysql")
        .unwrap()
        .clone();
    // SAFETY: geteuid(2) reads this process's user id and cannot fail.
    let as_root = unsafe { libc::geteuid() } == 0;
    if as_root {
        let missing = mysql["missing"].as_str().unwrap_or_default();
        assert!(
            missing.contains("mariadbd") && missing.contains("sudo apt-get install mariadb-server"),
            "{mysql}"
        );
    }
    let mut twice = false;
    for _ in 0..TRIES {
        twice = run_scenario(&lab, "pause-unfenced").await.0;
        if twice {
            break;
        }
    }
    assert!(twice, "the paused holder sold a unit twice, without root");
    let state = lab.state().await;
    let mut pids = pids_of(&state);
    pids.push(lab.child.id().into());
    assert_eq!(pids.len(), 5, "the lab, two Redis servers, two instances: {state}");
    // SAFETY: geteuid(2) reads this process's user id and cannot fail.
    let user = if as_root { NOBODY } else { unsafe { libc::geteuid() } };
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid = status.lines().find(|line| line.starts_with("Uid:")).unwrap();
        let real: u32 = uid.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(real, user, "process {pid} runs as {uid}");
    }
}
