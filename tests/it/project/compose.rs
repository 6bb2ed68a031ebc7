//! `docker-compose.yml`, checked without a Docker engine: it must parse as the Compose
//! specification defines it (the `compose_spec` crate, which refuses unknown keys and
//! wrong types), and keep this project's rules: pinned images, a healthcheck on every
//! server, ports on 127.0.0.1 only, the app image built once, and each strategy's
//! backends in the profile of its name, waited for healthy by both instances.

use serde_yaml::Value;

const COMPOSE_FILE: &str = include_str!("../../../docker-compose.yml");
/// The strategies whose backends sit behind a profile, and those backends.
const PROFILES: [(&str, &[&str]); 6] = [
    ("redlock", &["redlock1", "redlock2", "redlock3", "redlock4", "redlock5"]),
    ("etcd", &["etcd"]),
    ("zookeeper", &["zookeeper"]),
    ("mysql", &["mysql"]),
    ("mysql-version", &["mysql"]),
    ("redis-degrade", &["mysql"]),
];
const APPS: [&str; 2] = ["app1", "app2"];

fn services() -> serde_yaml::Mapping {
    let mut file: Value = serde_yaml::from_str(COMPOSE_FILE).expect("docker-compose.yml is YAML");
    file.apply_merge().expect("its `<<` merges resolve");
    file["services"].as_mapping().expect("it has services").clone()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_file_follows_the_compose_specification() {
    let compose = compose_spec::Compose::options()
        .apply_merge(true)
        .from_yaml_str(COMPOSE_FILE)
        .unwrap_or_else(|error| panic!("docker-compose.yml is not valid Compose: {error}"));
    compose
        .validate_all()
        .expect("every network, volume, config and secret it uses is defined");
    assert_eq!(compose.services.len(), services().len());
}

#[test]
fn every_image_is_pinned_and_the_app_is_built_once() {
    let mut builds = 0;
    for (name, service) in services() {
        let name = name.as_str().unwrap();
        if service.get("build").is_some() {
            builds += 1;
            continue;
        }
        let image = service["image"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has neither an image nor a build"));
        if image == "seckill-app:local" {
            assert_eq!(
                service["pull_policy"], "never",
                "{name} runs the image app1 builds; it must never pull it"
            );
            continue;
        }
        let tag = image.rsplit_once(':').map(|(_, tag)| tag).unwrap_or("latest");
        assert!(
            tag.chars().filter(|c| *c == '.').count() >= 2 && tag.chars().any(|c| c.is_ascii_digit()),
            "{name}: `{image}` is not pinned to a full version (major.minor.patch)"
        );
    }
    assert_eq!(builds, 1, "one build, for both instances and the load test");
}

#[test]
fn every_server_has_a_healthcheck_and_every_port_is_on_loopback() {
    for (name, service) in services() {
        let name = name.as_str().unwrap();
        let one_shot = strings(&service["profiles"]) == ["loadtest"];
        if !one_shot {
            let test = strings(&service["healthcheck"]["test"]);
            assert!(test.len() >= 2, "{name} has no healthcheck");
        }
        for port in strings(&service["ports"]) {
            assert!(
                port.starts_with("127.0.0.1:"),
                "{name} publishes {port} beyond loopback"
            );
        }
    }
}

#[test]
fn each_strategy_starts_its_backends_and_both_instances_wait_for_them() {
    let services = services();
    for (profile, backends) in PROFILES {
        for backend in backends {
            let profiles = strings(&services[*backend]["profiles"]);
            assert!(
                profiles.contains(&profile),
                "{backend} must be in the `{profile}` profile, has {profiles:?}"
            );
        }
    }
    for app in APPS {
        let depends_on = &services[app]["depends_on"];
        assert!(
            strings(&services[app]["profiles"]).is_empty(),
            "{app} runs in every profile"
        );
        assert_eq!(depends_on["redis"]["condition"], "service_healthy", "{app} needs Redis");
        assert!(
            depends_on["redis"].get("required").is_none(),
            "every strategy needs Redis"
        );
        for backend in PROFILES.iter().flat_map(|(_, backends)| backends.iter()) {
            assert_eq!(
                depends_on[*backend]["condition"], "service_healthy",
                "{app} waits for {backend}"
            );
            // A backend whose profile is off is not started; the app must start without it.
            assert_eq!(depends_on[*backend]["required"], false, "{app} on {backend}");
        }
    }
}
