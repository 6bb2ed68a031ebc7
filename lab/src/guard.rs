//! Loopback only, against DNS rebinding: a page of `evil.example` whose name now points
//! at 127.0.0.1 could otherwise drive the lab (and pause, kill and cut) from a student's
//! browser. Every request must name this machine in its `Host` (`localhost`, an address
//! in 127.0.0.0/8, `[::1]`); one that carries an `Origin` must come from such a page too.
//! The same rule as the service's resets (`seckill::http::admin`).

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use seckill::http::admin::names_this_machine;

/// The middleware: 403 with the reason for a request from elsewhere.
pub async fn loopback_only(request: Request, next: Next) -> Response {
    match refusal(request.headers()) {
        Some(reason) => (StatusCode::FORBIDDEN, reason).into_response(),
        None => next.run(request).await,
    }
}

/// Why these headers are refused, or `None`.
pub fn refusal(headers: &axum::http::HeaderMap) -> Option<String> {
    let text = |name| headers.get(name).map(|value| value.to_str().unwrap_or("(not text)"));
    match text(header::HOST) {
        Some(host) if names_this_machine(host, &[]) => {}
        host => {
            return Some(format!(
            "the lab answers only pages of this machine; Host {host:?} is not one. Open it as http://127.0.0.1:<port>/"
        ))
        }
    }
    match text(header::ORIGIN) {
        None => None,
        Some(origin) if origin_is_loopback(origin) => None,
        Some(origin) => Some(format!(
            "the lab answers only pages of this machine; Origin {origin:?} is not one"
        )),
    }
}

/// `http://127.0.0.1:7700` and the like; `null` (a file, a sandbox) is not.
fn origin_is_loopback(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|host| !host.contains('/') && names_this_machine(host, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    #[test]
    fn a_page_of_this_machine_passes() {
        for (host, origin) in [
            ("127.0.0.1:7700", None),
            ("localhost:7700", Some("http://localhost:7700")),
            ("[::1]:7700", Some("http://[::1]:7700")),
        ] {
            assert_eq!(refusal(&headers(host, origin)), None, "{host} {origin:?}");
        }
    }

    #[test]
    fn a_rebound_name_or_a_foreign_origin_is_refused() {
        for (host, origin) in [
            ("evil.example:7700", None),
            ("localhost.evil.example:7700", None),
            ("127.0.0.1:7700", Some("http://evil.example")),
            ("127.0.0.1:7700", Some("null")),
            ("127.0.0.1:7700", Some("http://127.0.0.1.evil.example/")),
        ] {
            assert!(refusal(&headers(host, origin)).is_some(), "{host} {origin:?}");
        }
        assert!(refusal(&HeaderMap::new()).unwrap().contains("Host None"));
    }
}
