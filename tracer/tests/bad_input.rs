//! Bad input: one clear line on stderr, a non-zero exit, no panic or backtrace.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

use common::{binary, privileged};

fn iosplit(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("iosplit-trace runs")
}

fn assert_clear_error(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "{stderr}");
}

#[test]
fn negative_duration_is_refused() {
    let out = iosplit(&["report", "--duration", "-5"]);
    assert_clear_error(&out, 2, "positive number of seconds");
}

#[test]
fn unknown_device_is_refused_before_tracing() {
    let out = iosplit(&["check", "no-such-disk"]);
    assert_clear_error(&out, 2, "unknown device `no-such-disk`");
    let out = iosplit(&["report", "-d", "sdzz9", "--duration", "1"]);
    assert_clear_error(&out, 2, "unknown device `sdzz9`");
}

#[test]
fn run_needs_a_command_that_exists() {
    let out = iosplit(&["run", "--"]);
    assert_clear_error(&out, 2, "missing command after `--`");
    let out = iosplit(&["run", "--", "no-such-program-xyz"]);
    assert_clear_error(&out, 127, "command not found: `no-such-program-xyz`");
}

#[test]
fn an_unknown_probe_flavor_is_refused() {
    if !privileged("an_unknown_probe_flavor_is_refused") {
        return;
    }
    let out = Command::new(binary())
        .args(["report", "--duration", "1"])
        .env("IOSPLIT_PROBES", "fentry")
        .output()
        .expect("iosplit-trace runs");
    assert_clear_error(&out, 2, "IOSPLIT_PROBES=fentry is not a probe flavor");
}

#[test]
fn live_view_without_a_terminal_points_to_report() {
    let out = iosplit(&[]);
    assert_clear_error(&out, 2, "use `iosplit-trace report`");
}

#[test]
fn tracing_without_privileges_says_how_to_fix_it() {
    if !privileged("tracing_without_privileges_says_how_to_fix_it") {
        return;
    }
    // Drop to nobody with no capabilities, as a user without sudo would run it.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(binary())
        .args(["report", "--duration", "1"])
        .output()
        .expect("setpriv runs");
    assert_clear_error(&out, 1, "sudo");
}
