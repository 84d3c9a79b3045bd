//! `promtool check metrics` (Debian's `prometheus` package) on a scrape:
//! the Prometheus text the receiver agent serves must pass its parser and
//! its lint (names, units, `_total` on counters, HELP and TYPE lines).

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

/// Runs `promtool check metrics` on `text`; panics with promtool's report
/// when it finds any problem. Without promtool it panics too: the test was
/// asked to run (kernel tests are `#[ignore]`d otherwise), and a check
/// skipped inside it would let it pass without checking.
pub fn check_metrics(what: &str, text: &str) {
    // An empty scrape would pass the lint without linting anything.
    assert!(
        text.contains("# TYPE "),
        "{what}: no metrics to check:\n{text}"
    );
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => {
            panic!(
                "{what} cannot be checked: promtool cannot run ({err}); `cargo xtask setup` installs it"
            )
        }
    };
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(text.as_bytes())
        .expect("write the metrics to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics ({}) on {what}:\n{report}\nmetrics:\n{text}",
        out.status
    );
}
