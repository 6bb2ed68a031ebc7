//! Logging: `RUST_LOG` picks the level, `info` by default.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,tower_http=info"));
    // Colour only on a terminal: a log redirected to a file stays plain text.
    let colour = std::io::stdout().is_terminal();
    // A second init (in tests) is harmless: the first subscriber stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour)
        .try_init();
}
