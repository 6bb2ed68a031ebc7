//! The browser tests' one way to run a script of `tests/browser/` (playwright-core
//! driving Debian's headless chromium): it needs both installed, it must exit 0, and it
//! prints what the page showed as one JSON line, which the test then judges.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// The folder of the browser tests, once chromium and playwright-core are there; a test
/// that must set up a long run first asks before it starts.
pub fn installed() -> std::path::PathBuf {
    let folder = super::test_redis::project_root().join("tests/browser");
    assert!(
        folder.join("node_modules/playwright-core").is_dir() && Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium and playwright-core: `scripts/services.sh install` installs both"
    );
    folder
}

/// `node tests/browser/SCRIPT ARGS...`: what it printed, as JSON. Panics naming what is
/// missing, or with what the script said when it failed.
pub fn run_script<I, A>(script: &str, args: I) -> serde_json::Value
where
    I: IntoIterator<Item = A>,
    A: AsRef<OsStr>,
{
    let folder = installed();
    let output = Command::new("node")
        .arg(folder.join(script))
        .args(args)
        .output()
        .expect("node runs (Node.js 20 or newer)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "{script} failed in the browser:\n{stderr}\n{stdout}"
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("{script} prints what it saw as one JSON line ({error}):\n{stdout}"))
}
