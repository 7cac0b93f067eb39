//! Bad input: one clear line on stderr, a non-zero exit, no panic or backtrace.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// compare's inputs: a missing file, JSON that is no report, bytes that are
/// neither, a malformed --pair: one line each, no panic.
#[test]
fn compare_refuses_what_is_no_report_in_one_line() {
    let dir = std::env::temp_dir().join(format!("iosplit-bad-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, junk) = (dir.join("not-a-report.json"), dir.join("junk.bin"));
    std::fs::write(&json, "{\"a\": 1}").unwrap();
    std::fs::write(&junk, "garbage").unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let missing = dir.join("missing.json");
    assert_clear_error(
        &iosplit(&["compare", &path(&missing), &path(&json)]),
        1,
        "cannot read",
    );
    assert_clear_error(
        &iosplit(&["compare", &path(&json), &path(&json)]),
        2,
        "is JSON but no report",
    );
    assert_clear_error(
        &iosplit(&["compare", &path(&junk), &path(&json)]),
        1,
        "neither a JSON report nor a recording",
    );
    assert_clear_error(
        &iosplit(&["compare", "--pair", "loop0", &path(&json), &path(&json)]),
        2,
        "--pair takes BEFORE=AFTER",
    );
    let _ = std::fs::remove_dir_all(&dir);
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

/// Runs `iosplit-trace ARGS` with stdout a pipe whose reader is already gone
/// (what `| head` leaves once head has exited).
fn into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(binary())
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("iosplit-trace runs")
}

/// Runs `iosplit-trace ARGS | head -c 1`: reads one byte, closes the pipe,
/// and waits. Returns the exit status, stderr and how long it ran.
fn head_one_byte(args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let mut child = Command::new(binary())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iosplit-trace starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    stdout.read_exact(&mut byte).expect("one byte of output");
    drop(stdout);
    let out = child.wait_with_output().expect("iosplit-trace ends");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// A closed pipe ends the program quietly: success, and no error line.
fn assert_quiet_success(code: Option<i32>, stderr: &str) {
    assert_eq!(code, Some(0), "stderr: {stderr}");
    for word in ["Broken pipe", "cannot write", "panicked", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(word), "{word:?} in: {stderr}");
    }
}

#[test]
fn check_into_a_closed_pipe_is_quiet_success() {
    for args in [&["check"][..], &["check", "--json"]] {
        let out = into_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_quiet_success(out.status.code(), &stderr);
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn generated_pages_into_a_closed_pipe_are_quiet_success() {
    let out = into_closed_pipe(&["generate", "man"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_quiet_success(out.status.code(), &stderr);
    assert_eq!(stderr, "");
}

#[test]
fn run_refuses_an_output_file_it_cannot_create_before_running() {
    let marker = std::env::temp_dir().join(format!("iosplit-not-run-{}", std::process::id()));
    let marker_text = marker.to_str().unwrap();
    let out = iosplit(&[
        "run",
        "-o",
        "/nonexistent-dir/report.json",
        "--",
        "touch",
        marker_text,
    ]);
    assert_clear_error(
        &out,
        1,
        "cannot create /nonexistent-dir/report.json: No such file or directory",
    );
    assert!(!marker.exists(), "the command ran anyway");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn report_json_lines_into_head_end_quietly() {
    if !privileged("report_json_lines_into_head_end_quietly") {
        return;
    }
    // The first line reaches head; the next interval's write finds the pipe
    // closed, and that must end the program at once, not at --duration.
    let (code, stderr, took) =
        head_one_byte(&["report", "--interval", "0.2", "--json", "--duration", "30"]);
    assert_quiet_success(code, &stderr);
    assert!(
        took < Duration::from_secs(20),
        "ran {took:?}: EPIPE ignored"
    );
}

#[test]
fn text_report_into_head_or_a_closed_pipe_ends_quietly() {
    if !privileged("text_report_into_head_or_a_closed_pipe_ends_quietly") {
        return;
    }
    let (code, stderr, took) = head_one_byte(&["report", "--interval", "0.2", "--duration", "30"]);
    assert_quiet_success(code, &stderr);
    assert!(
        took < Duration::from_secs(20),
        "ran {took:?}: EPIPE ignored"
    );

    let out = into_closed_pipe(&["report", "--duration", "0.5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_quiet_success(out.status.code(), &stderr);
}

#[test]
fn run_into_a_full_disk_is_one_line_and_a_failure() {
    if !privileged("run_into_a_full_disk_is_one_line_and_a_failure") {
        return;
    }
    let out = iosplit(&["run", "-o", "/dev/full", "--", "true"]);
    assert_clear_error(
        &out,
        1,
        "iosplit-trace: cannot write to /dev/full: No space left on device",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors = stderr.lines().filter(|l| l.contains("/dev/full")).count();
    assert_eq!(errors, 1, "{stderr}");
}

#[test]
fn run_into_a_closed_pipe_keeps_the_commands_status() {
    if !privileged("run_into_a_closed_pipe_keeps_the_commands_status") {
        return;
    }
    let out = into_closed_pipe(&["run", "--", "sh", "-c", "exit 3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for word in ["Broken pipe", "cannot write", "panicked"] {
        assert!(!stderr.contains(word), "{word:?} in: {stderr}");
    }
    assert_eq!(out.status.code(), Some(3), "{stderr}");
}

#[test]
fn log_records_reach_stderr_only_when_rust_log_asks() {
    if !privileged("log_records_reach_stderr_only_when_rust_log_asks") {
        return;
    }
    let trace = |rust_log: Option<&str>| {
        let mut command = Command::new(binary());
        command.args(["report", "--duration", "0.3"]);
        command.env_remove("RUST_LOG");
        if let Some(filter) = rust_log {
            command.env("RUST_LOG", filter);
        }
        let out = command.output().expect("iosplit-trace runs");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // aya's loader logs while the probes load, so this also shows the
    // logger is installed before them (the probes' logger forwards to it).
    let logged = trace(Some("debug"));
    assert!(logged.contains("[DEBUG aya"), "{logged}");
    let quiet = trace(None);
    assert!(!quiet.contains("DEBUG"), "{quiet}");
    assert!(!quiet.contains("ERROR"), "{quiet}");
}
