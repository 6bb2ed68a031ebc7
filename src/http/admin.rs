//! Who may reset the sale: `POST /stock/reset` wipes every sale, so it is an admin action.
//!
//! On loopback only the machine itself can reach the service, which is how the demo and
//! the tests run it, and anyone there may reset. Once the service listens on anything
//! else (`--bind 0.0.0.0`, a container), a reset needs `Authorization: Bearer <token>`
//! with the token given by `--admin-token` / `SECKILL_ADMIN_TOKEN`, and without such a
//! token resets are refused outright. A token, once set, is asked for on loopback too.

use std::net::IpAddr;

/// The policy for `POST /stock/reset`, fixed at start.
#[derive(Clone, Debug)]
pub enum ResetAccess {
    /// Loopback only and no token: whoever can connect is on this machine.
    Loopback,
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
}

impl ResetAccess {
    pub fn new(bind: IpAddr, token: Option<String>) -> Self {
        match token {
            Some(token) => ResetAccess::Token(token),
            None if bind.is_loopback() => ResetAccess::Loopback,
            None => ResetAccess::Refused,
        }
    }

    /// Checks the request's `Authorization` header value, if any.
    pub fn check(&self, authorization: Option<&str>) -> Result<(), Denied> {
        match self {
            ResetAccess::Loopback => Ok(()),
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

/// Compares every byte whatever the first difference, so the time taken does not tell
/// an attacker how much of a guess was right.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |differ, (a, b)| differ | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_loopback_without_a_token_anyone_may_reset() {
        let access = ResetAccess::new("127.0.0.1".parse().unwrap(), None);
        assert_eq!(access.check(None), Ok(()));
        assert_eq!(ResetAccess::new("::1".parse().unwrap(), None).check(None), Ok(()));
    }

    #[test]
    fn beyond_loopback_without_a_token_nobody_may_reset() {
        let access = ResetAccess::new("0.0.0.0".parse().unwrap(), None);
        assert_eq!(access.check(Some("Bearer anything")), Err(Denied::NoTokenConfigured));
    }

    #[test]
    fn with_a_token_only_the_token_resets_wherever_the_service_listens() {
        for bind in ["0.0.0.0", "127.0.0.1"] {
            let access = ResetAccess::new(bind.parse().unwrap(), Some("s3cret-token".into()));
            assert_eq!(access.check(Some("Bearer s3cret-token")), Ok(()));
            assert_eq!(access.check(Some("Bearer s3cret-tokeN")), Err(Denied::BadToken));
            assert_eq!(
                access.check(Some("s3cret-token")),
                Err(Denied::BadToken),
                "the Bearer scheme is required"
            );
            assert_eq!(access.check(None), Err(Denied::BadToken));
        }
    }
}
