//! `IOSPLIT_PROBES=noop`, the floor: every block tracepoint gets a program
//! that returns at once; `report` says nothing was captured, never shows
//! measures, and every other command refuses it.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{binary, privileged};

#[test]
fn floor_report_attaches_every_probe_and_says_nothing_was_captured() {
    if !privileged("floor_report_attaches_every_probe_and_says_nothing_was_captured") {
        return;
    }
    let out = Command::new(binary())
        .args(["report", "--json", "--duration", "1"])
        .env("IOSPLIT_PROBES", "noop")
        .output()
        .expect("iosplit-trace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    // Every row of the probe table, on its BTF tracepoint.
    let rows = tracer_common::EventKind::COUNT;
    let attached =
        format!("({rows}/{rows} probes attached, noop BTF tracepoints, capturing nothing)");
    assert!(stderr.contains(&attached), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema"], "iosplit-trace/floor");
    assert_eq!(report["captured"], false);
    // No measures at all: an idle disk's zeros would be a lie here.
    assert!(report.get("events").is_none(), "{report}");
    assert!(report.get("devices").is_none(), "{report}");
    assert!(report["seconds"].as_f64().unwrap() >= 1.0, "{report}");

    let text = Command::new(binary())
        .args(["report", "--duration", "0.2"])
        .env("IOSPLIT_PROBES", "noop")
        .output()
        .expect("iosplit-trace runs");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(text.status.success());
    assert!(stdout.contains("nothing was captured"), "{stdout}");
}

#[test]
fn run_refuses_the_floor() {
    if !privileged("run_refuses_the_floor") {
        return;
    }
    let out = Command::new(binary())
        .args(["run", "--", "true"])
        .env("IOSPLIT_PROBES", "noop")
        .output()
        .expect("iosplit-trace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("IOSPLIT_PROBES=noop captures nothing") && stderr.contains("only `report`"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
