//! What a strategy is, in one value declared beside its code: its name, the server its
//! lock lives on, whether it issues fencing tokens, and its critical path.
//!
//! Each strategy file has a `pub const DESCRIPTION`; [`crate::strategy`] keeps the
//! closed list and reads it, so a new strategy is its own file and one line there.

use crate::lock::critical_path::{Backend, Step};

/// One strategy, as the service, `/healthz` and `make bench` see it.
#[derive(Clone, Copy, Debug)]
pub struct Description {
    /// As `--lock` names it, and as responses and reports spell it.
    pub name: &'static str,
    /// The server its lock lives on; `None` for the baselines, which need none.
    pub backend: Option<Backend>,
    /// Whether its grants carry fencing tokens the stock can check.
    pub tokens: bool,
    /// Whether two instances running it are expected to oversell (the baselines' lesson).
    pub oversells: bool,
    /// The round trips from one grant to the next (see [`crate::lock::critical_path`]);
    /// `None` for the baselines, which serialize nothing across instances.
    pub critical_path: Option<&'static [Step]>,
}
