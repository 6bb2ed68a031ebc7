//! The history's checks as the terminal prints them (`loadtest check`): one line a check,
//! its status, then what it found, one finding a line.

use std::fmt::Write;

use crate::history::checks::{Check, Status};

/// `unique  pass`, `sold-out  FAIL`, each finding under its check.
pub fn text(checks: &[Check]) -> String {
    let width = checks.iter().map(|check| check.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for check in checks {
        let status = match check.status {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Unknown => "unknown",
            Status::Skipped => "skipped",
        };
        let _ = writeln!(out, "{:width$}  {status}", check.name);
        for finding in &check.findings {
            let _ = writeln!(out, "{:width$}    {finding}", "");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_is_a_line_with_its_findings_under_it() {
        let checks = [
            Check {
                name: "unique".into(),
                status: Status::Pass,
                findings: Vec::new(),
                culprits: Vec::new(),
            },
            Check {
                name: "sold-out".into(),
                status: Status::Fail,
                findings: vec!["first".into(), "second".into()],
                culprits: vec![3],
            },
        ];
        assert_eq!(
            text(&checks),
            "unique    pass\nsold-out  FAIL\n            first\n            second\n"
        );
    }
}
