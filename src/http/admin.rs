//! Who may reset the sale: `POST /stock/reset` wipes every sale, so it is an admin action.
//!
//! On loopback only the machine itself can reach the service, which is how the demo and
//! the tests run it. There a reset needs no token, but it must name this machine in its
//! `Host` header: `localhost`, an address in `127.0.0.0/8`, `[::1]`, or a name given by
//! `--allowed-host`. That stops DNS rebinding: a page of `evil.example` whose name now
//! points at 127.0.0.1 is same-origin with the service, so the browser lets its JSON post
//! through, but the post still says `Host: evil.example`.
//!
//! Once the service listens on anything else (`--bind 0.0.0.0`, a container), a reset
//! needs `Authorization: Bearer <token>` with the token given by `--admin-token` /
//! `SECKILL_ADMIN_TOKEN`, and without such a token resets are refused outright. A token,
//! once set, is asked for on loopback too. With a token the `Host` is not checked: a
//! browser never adds a bearer token by itself, so a rebound page has none to send.

use std::net::IpAddr;

/// The policy for `POST /stock/reset`, fixed at start.
#[derive(Clone, Debug)]
pub enum ResetAccess {
    /// Loopback only and no token: a client that names this machine, or one of these hosts.
    Loopback { allowed_hosts: Vec<String> },
    /// Callers presenting this bearer token.
    Token(String),
    /// Reachable from other machines, and no token to check: nobody.
    Refused,
}

/// Why a reset was refused; the HTTP layer turns it into 401 or 403.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// No token, or the wrong one.
    BadToken,
    /// The service has no token and listens beyond loopback.
    NoTokenConfigured,
    /// No token is configured, and the request's `Host` (this one, or none) does not name this machine.
    ForeignHost(Option<String>),
}

impl ResetAccess {
    /// The policy for a service listening on `bind`. `allowed_hosts` (`--allowed-host`)
    /// matter only on loopback without a token, and are refused anywhere else.
    pub fn new(bind: IpAddr, token: Option<String>, allowed_hosts: Vec<String>) -> anyhow::Result<Self> {
        let (access, what_decides) = match token {
            None if bind.is_loopback() => return Ok(ResetAccess::Loopback { allowed_hosts }),
            Some(token) => (ResetAccess::Token(token), "the admin token decides"),
            None => (ResetAccess::Refused, "resets are refused until an --admin-token is set"),
        };
        if !allowed_hosts.is_empty() {
            anyhow::bail!(
                "--allowed-host lets a reset without a token through by the host it names, which only a service on \
                 loopback without --admin-token takes; here {what_decides}. Leave --allowed-host out"
            );
        }
        Ok(access)
    }

    /// Checks the request's `Authorization` and `Host` header values, if any.
    pub fn check(&self, authorization: Option<&str>, host: Option<&str>) -> Result<(), Denied> {
        match self {
            ResetAccess::Loopback { allowed_hosts } => match host {
                Some(host) if names_this_machine(host, allowed_hosts) => Ok(()),
                _ => Err(Denied::ForeignHost(host.map(str::to_owned))),
            },
            ResetAccess::Refused => Err(Denied::NoTokenConfigured),
            ResetAccess::Token(expected) => {
                let given = authorization
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .unwrap_or("");
                if same_secret(given.trim().as_bytes(), expected.as_bytes()) {
                    Ok(())
                } else {
                    Err(Denied::BadToken)
                }
            }
        }
    }
}

/// Whether a `Host` header value (`localhost:8080`, `[::1]:8080`, `127.0.0.1`) names this
/// machine by a loopback name or address, or names one of `allowed_hosts`, port aside.
pub fn names_this_machine(host: &str, allowed_hosts: &[String]) -> bool {
    let name = host_name(host);
    match name.parse::<IpAddr>() {
        Ok(address) => address.is_loopback() || allowed_hosts.contains(&address.to_string()),
        Err(_) => {
            name.eq_ignore_ascii_case("localhost")
                || allowed_hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(name))
        }
    }
}

/// The name in a `Host` header value, without its port or an IPv6 address's brackets.
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(address, _port)| address),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    }
}

/// Compares every byte whatever the first difference, so the time taken does not tell
/// an attacker how much of a guess was right.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |differ, (a, b)| differ | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::allowed_host;

    fn loopback(allowed_hosts: &[&str]) -> ResetAccess {
        let allowed_hosts = allowed_hosts.iter().map(|name| allowed_host(name).unwrap()).collect();
        ResetAccess::new("127.0.0.1".parse().unwrap(), None, allowed_hosts).unwrap()
    }

    #[test]
    fn on_loopback_without_a_token_a_client_that_names_this_machine_may_reset() {
        let access = loopback(&[]);
        for host in [
            "localhost",
            "LocalHost:8080",
            "127.0.0.1:8080",
            "127.9.9.9",
            "[::1]:8080",
            "[::1]",
        ] {
            assert_eq!(access.check(None, Some(host)), Ok(()), "{host}");
        }
        let on_ipv6 = ResetAccess::new("::1".parse().unwrap(), None, Vec::new()).unwrap();
        assert_eq!(on_ipv6.check(None, Some("localhost:8080")), Ok(()));
    }

    #[test]
    fn on_loopback_without_a_token_a_host_that_is_not_this_machine_is_refused() {
        let access = loopback(&[]);
        for host in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "localhost.",
            "128.0.0.1:8080",
            "0.0.0.0:8080",
            "[::2]:8080",
            "[::1",
            "",
        ] {
            assert_eq!(
                access.check(None, Some(host)),
                Err(Denied::ForeignHost(Some(host.to_owned()))),
                "{host}"
            );
        }
        assert_eq!(access.check(None, None), Err(Denied::ForeignHost(None)));
    }

    #[test]
    fn an_allowed_host_is_taken_whatever_its_case_and_port() {
        let access = loopback(&["Seckill.LAN", "[fe80::1]", "192.168.1.5"]);
        for host in ["seckill.lan:8080", "SECKILL.lan", "[fe80::1]:8080", "192.168.1.5:8080"] {
            assert_eq!(access.check(None, Some(host)), Ok(()), "{host}");
        }
        assert!(access.check(None, Some("other.lan:8080")).is_err());
    }

    #[test]
    fn an_allowed_host_with_a_port_or_a_scheme_is_refused() {
        for name in ["seckill.lan:8080", "http://seckill.lan", "seckill lan", ""] {
            assert!(allowed_host(name).is_err(), "{name}");
        }
    }

    #[test]
    fn allowed_hosts_are_refused_where_the_host_does_not_decide() {
        let allowed = vec!["seckill.lan".to_owned()];
        let with_token = ResetAccess::new(
            "127.0.0.1".parse().unwrap(),
            Some("s3cret-token".into()),
            allowed.clone(),
        );
        assert!(with_token.unwrap_err().to_string().contains("the admin token decides"));
        let beyond_loopback = ResetAccess::new("0.0.0.0".parse().unwrap(), None, allowed);
        assert!(beyond_loopback
            .unwrap_err()
            .to_string()
            .contains("Leave --allowed-host out"));
    }

    #[test]
    fn beyond_loopback_without_a_token_nobody_may_reset() {
        let access = ResetAccess::new("0.0.0.0".parse().unwrap(), None, Vec::new()).unwrap();
        assert_eq!(
            access.check(Some("Bearer anything"), Some("localhost")),
            Err(Denied::NoTokenConfigured)
        );
    }

    #[test]
    fn with_a_token_only_the_token_resets_wherever_the_service_listens() {
        for bind in ["0.0.0.0", "127.0.0.1"] {
            let access = ResetAccess::new(bind.parse().unwrap(), Some("s3cret-token".into()), Vec::new()).unwrap();
            let host = Some("seckill.example:8080");
            assert_eq!(access.check(Some("Bearer s3cret-token"), host), Ok(()));
            assert_eq!(access.check(Some("Bearer s3cret-tokeN"), host), Err(Denied::BadToken));
            assert_eq!(
                access.check(Some("s3cret-token"), host),
                Err(Denied::BadToken),
                "the Bearer scheme is required"
            );
            assert_eq!(access.check(None, Some("localhost")), Err(Denied::BadToken));
        }
    }
}
