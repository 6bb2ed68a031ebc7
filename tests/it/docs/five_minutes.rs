//! The five minutes work on a bare Debian 12 or Ubuntu 24.04: the README's block runs
//! `apt-get update`, then installs every package the build and the Redis lessons need;
//! the Rust it names is the floor Cargo.toml declares, and that floor is at least every
//! dependency's. Both READMEs give the same commands.

use std::process::Command;

/// The Debian packages a bare machine lacks for the five minutes, and why each.
const NEEDED: &[(&str, &str)] = &[
    (
        "build-essential",
        "the linker `cc`, and the C of aws-lc-sys (rustls, in the load test's reqwest)",
    ),
    ("curl", "rustup's installer"),
    (
        "redis-server",
        "the stock and the lock of the five minutes; redis-cli comes with it",
    ),
    ("protobuf-compiler", "etcd-client's build runs protoc"),
    ("libprotobuf-dev", "the well-known types protoc includes"),
];

/// The first `sh` block after the heading that starts with `heading`, as lines.
fn five_minutes(page: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(testkit::project_root().join(page)).unwrap();
    let section = text
        .split("\n## ")
        .find(|section| section.starts_with(heading))
        .unwrap_or_else(|| panic!("{page} has no section `## {heading}`"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap_or_else(|| panic!("{page}: `## {heading}` has no sh block"));
    block.lines().map(str::to_owned).collect()
}

/// `1.94` or `1.94.0` as numbers, to compare.
fn version(text: &str) -> (u32, u32, u32) {
    let mut parts = text.split('.').map(|part| part.parse().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// The `rust-version` of the workspace's Cargo.toml.
fn declared_floor() -> String {
    let manifest = std::fs::read_to_string(testkit::project_root().join("Cargo.toml")).unwrap();
    manifest
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml declares a rust-version")
        .to_owned()
}

/// The triple of the machine that builds, as rustc names it.
fn host() -> String {
    let rustc = Command::new("rustc").arg("-vV").output().expect("rustc runs");
    let about = String::from_utf8_lossy(&rustc.stdout).into_owned();
    about
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names its host")
        .to_owned()
}

#[test]
fn the_five_minutes_install_what_a_bare_machine_lacks() {
    let english = five_minutes("README.md", "Five minutes");
    let chinese = five_minutes("docs/zh-CN/README.md", "五分钟上手");
    assert_eq!(english, chinese, "both READMEs give the same commands");
    let at = |words: &str| {
        english
            .iter()
            .position(|line| line.contains(words))
            .unwrap_or_else(|| panic!("the five minutes have no `{words}`: {english:#?}"))
    };
    let install = at("apt-get install");
    assert!(
        at("apt-get update") < install,
        "a bare machine's package lists are empty until updated"
    );
    let packages: Vec<&str> = english[install].split_whitespace().collect();
    for (package, why) in NEEDED {
        assert!(
            packages.contains(package),
            "the install line lacks {package} ({why}): {}",
            english[install]
        );
    }
    assert!(
        at("sh.rustup.rs") < at("cargo build"),
        "Rust is installed before the build"
    );
    assert!(
        !english.iter().any(|line| line.contains('<')),
        "no placeholder to fill: {english:#?}"
    );
}

#[test]
fn the_rust_the_readmes_name_is_the_floor_of_every_dependency() {
    let floor = declared_floor();
    let metadata = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        // This machine's dependencies: the others are not downloaded.
        .args(["--filter-platform", &host()])
        .current_dir(testkit::project_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        metadata.status.success(),
        "{}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let highest = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|package| Some((package["rust_version"].as_str()?, package["name"].as_str()?)))
        .max_by_key(|(rust, _)| version(rust))
        .expect("some package declares a rust-version");
    assert!(
        version(&floor) >= version(highest.0),
        "Cargo.toml says rust-version {floor}, but {} needs {}: raise it, and the READMEs' line",
        highest.1,
        highest.0
    );
    for page in ["README.md", "docs/zh-CN/README.md"] {
        let text = std::fs::read_to_string(testkit::project_root().join(page)).unwrap();
        assert!(
            text.contains(&format!("Rust {floor} ")),
            "{page} names Rust {floor}, the floor"
        );
    }
}

/// The packages `scripts/services.sh` installs, read from its `PACKAGES=(...)` line(s).
fn packages_services_installs() -> Vec<String> {
    let script = std::fs::read_to_string(testkit::project_root().join("scripts/services.sh")).unwrap();
    let list = script
        .split("PACKAGES=(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("scripts/services.sh has a PACKAGES=(...) list");
    list.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_testing_page_says_why_each_package_make_services_installs_is_there() {
    let page = "docs/reference/testing.md";
    let text = std::fs::read_to_string(testkit::project_root().join(page)).unwrap();
    let table = text
        .split("## The servers and packages")
        .nth(1)
        .unwrap_or_else(|| panic!("{page} has no section `## The servers and packages`"));
    let named: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|line| line.split(" |").next())
        .collect();
    let packages = packages_services_installs();
    assert!(packages.len() >= 10, "read {packages:?} from scripts/services.sh");
    for package in packages {
        assert!(
            named.iter().any(|cell| cell.contains(&format!("`{package}`"))),
            "{page}'s table of packages does not say why `{package}` is installed"
        );
    }
}
