//! Every shell script of the project passes shellcheck (installed by `make services`):
//! each exception is a `# shellcheck disable=SCnnnn # why` comment beside its line.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The project's shell scripts: tracked files named `*.sh`, or whose first line runs a shell.
fn shell_scripts(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("git runs");
    assert!(listed.status.success(), "git ls-files failed in {}", root.display());
    let mut scripts = Vec::new();
    for name in listed.stdout.split(|byte| *byte == 0).filter(|name| !name.is_empty()) {
        let path = root.join(String::from_utf8_lossy(name).as_ref());
        let first_line = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_owned))
            .unwrap_or_default();
        let runs_a_shell =
            first_line.starts_with("#!") && ["bash", "/sh"].iter().any(|shell| first_line.ends_with(shell));
        if path.extension().is_some_and(|ext| ext == "sh") || runs_a_shell {
            scripts.push(path);
        }
    }
    scripts
}

#[test]
fn every_shell_script_passes_shellcheck() {
    let root = testkit::project_root();
    let scripts = shell_scripts(&root);
    assert!(scripts.len() > 20, "found only {scripts:?}");
    let checked = Command::new("shellcheck")
        .current_dir(&root)
        .args(["--external-sources", "--format", "gcc"])
        .args(&scripts)
        .output()
        .unwrap_or_else(|error| panic!("shellcheck does not run ({error}): `make services` installs it"));
    let findings = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "shellcheck found, in {} scripts (fix each, or say why beside it with \
         `# shellcheck disable=SCnnnn # why`):\n{findings}{}",
        scripts.len(),
        String::from_utf8_lossy(&checked.stderr)
    );
}
