//! A wall clock that a test can make jump, as an NTP step would: forward or back, at
//! run time, while the monotonic clock runs on untouched.
//!
//! A process follows a [`WallClock`] when it starts with [`WallClock::env`]. Two tools
//! do the moving, one per kind of process:
//! - **redis-server**: the project's clock-shift preload, `scripts/lib/clock-shift.c`,
//!   compiled here with the machine's `gcc`. Debian's libfaketime cannot run
//!   redis-server: its set-up recurses while Redis's jemalloc starts
//!   (<https://github.com/wolfcw/libfaketime/issues/130>,
//!   <https://github.com/wolfcw/libfaketime/issues/327>). Redis reads its clock for key
//!   expiry with `gettimeofday`, which the preload moves.
//! - **`seckill serve`**: Debian's libfaketime itself (package `faketime`), which works
//!   with a Rust program: the tool an operator would reach for.

use std::path::PathBuf;
use std::process::Command;

use tempfile::TempDir;

use super::private_server::temp_dir;

/// Where Debian's `libfaketime` package puts its preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Which preload moves the clock.
enum Tool {
    ClockShift { library: PathBuf },
    Libfaketime,
}

/// A wall clock that jumps when the test says so. Starts at the real time.
pub struct WallClock {
    tool: Tool,
    /// Holds the offset file (and the compiled preload).
    dir: TempDir,
}

impl WallClock {
    /// For a redis-server: the clock-shift preload, compiled into a folder of its own.
    pub fn for_redis() -> Self {
        Self::try_for_redis().unwrap_or_else(|error| panic!("{error}"))
    }

    /// [`WallClock::for_redis`], or why the preload could not be compiled: no gcc, or a
    /// gcc without the C library's headers (`build-essential` brings both).
    pub fn try_for_redis() -> Result<Self, String> {
        let dir = temp_dir("clock-shift");
        let library = dir.path().join("clock-shift.so");
        let source = super::test_redis::project_root().join("scripts/lib/clock-shift.c");
        let compiled = Command::new("gcc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .map_err(|error| format!("cannot run gcc ({error}); `make services` installs it"))?;
        if !compiled.status.success() {
            return Err(format!(
                "gcc could not compile {}: {}",
                source.display(),
                String::from_utf8_lossy(&compiled.stderr)
            ));
        }
        let clock = WallClock {
            tool: Tool::ClockShift { library },
            dir,
        };
        clock.jump_to(0);
        Ok(clock)
    }

    /// For a `seckill serve` process: libfaketime, its monotonic clock left alone.
    pub fn for_seckill() -> Self {
        assert!(
            std::path::Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing; `make services` installs the `faketime` package"
        );
        let clock = WallClock {
            tool: Tool::Libfaketime,
            dir: temp_dir("faketime"),
        };
        clock.jump_to(0);
        clock
    }

    fn offset_file(&self) -> PathBuf {
        self.dir.path().join("offset")
    }

    /// The environment that makes a process follow this clock.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let offset_file = self.offset_file().display().to_string();
        match &self.tool {
            Tool::ClockShift { library } => vec![
                ("LD_PRELOAD", library.display().to_string()),
                ("CLOCK_SHIFT_FILE", offset_file),
            ],
            Tool::Libfaketime => vec![
                ("LD_PRELOAD", LIBFAKETIME.to_owned()),
                ("FAKETIME_TIMESTAMP_FILE", offset_file),
                // Read the file on every call, so a jump lands at once.
                ("FAKETIME_NO_CACHE", "1".to_owned()),
                // Only the wall clock jumps, as with an NTP step.
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
            ],
        }
    }

    /// From now on the wall clock reads `offset_ms` milliseconds ahead of the real
    /// time (behind it if negative). Whole seconds for libfaketime.
    pub fn jump_to(&self, offset_ms: i64) {
        let text = match self.tool {
            Tool::ClockShift { .. } => offset_ms.to_string(),
            Tool::Libfaketime => {
                assert_eq!(offset_ms % 1000, 0, "libfaketime offsets are whole seconds");
                format!("{:+}", offset_ms / 1000) // its relative form: "+3600" is an hour ahead
            }
        };
        // Written whole into a new file and renamed over the old: a reader never sees half.
        let new = self.dir.path().join("offset.new");
        std::fs::write(&new, text).expect("the offset file is writable");
        std::fs::rename(&new, self.offset_file()).expect("the offset file is writable");
    }
}
