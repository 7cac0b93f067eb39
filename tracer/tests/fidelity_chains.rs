//! Readings of real traces (tests/corpus/, provenance in its MANIFEST.md)
//! that the corpus table cannot express: what is in flight at the end,
//! where a failure lies, and how the Perfetto view ends a flush.

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn corpus(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(file)
}

fn report(file: &str, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", "blkparse", "--json"])
        .args(extra)
        .arg(corpus(file))
        .output()
        .expect("run iosplit-trace");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn op<'a>(report: &'a Value, dev: &str, op: &str) -> &'a Value {
    let device = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|device| device["dev"] == dev)
        .unwrap_or_else(|| panic!("no device {dev}"));
    &device["measures"]["ops"][op]
}

/// kulkarni-nullb-discard-split: the growing-range completions complete
/// every piece, so the discard ends.
#[test]
fn a_split_discard_completed_by_growing_ranges_ends() {
    let report = report("kulkarni-nullb-discard-split.blkparse.txt", &[]);
    assert_eq!(report["correlation"]["in_flight"], 0);
    assert_eq!(report["correlation"]["incomplete"], 0);
    let discards = op(&report, "252:0", "discard");
    assert_eq!(discards["queue_to_complete_us"]["count"], 1);
    assert_eq!(discards["issue_to_complete_us"]["count"], 20);
}

/// kawasaki-zoned-nullb-eio: the failed `C WS 0 + 765` completes the
/// issued piece at 510 it covers; the failure lies where the device said
/// (sectors 0-764). The user I/O's other pieces are never issued in the
/// excerpt, so it is still in flight, not finished.
#[test]
fn a_failed_completion_covering_an_issued_piece_completes_it() {
    let report = report("kawasaki-zoned-nullb-eio.blkparse.txt", &[]);
    let writes = op(&report, "251:0", "write");
    assert_eq!(writes["failed_commands"], 1);
    assert_eq!(writes["issue_to_complete_us"]["count"], 2);
    assert_eq!(report["correlation"]["unmatched_events"], 1);
    assert_eq!(report["correlation"]["in_flight"], 1);
    let finding = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .chain(report["other_findings"].as_array().unwrap())
        .find(|finding| finding.to_string().contains("lowest_failed_sector"))
        .expect("an I/O error finding");
    assert!(
        finding.to_string().contains("\"lowest_failed_sector\":0"),
        "{finding}"
    );
}

/// susi-sata-sync-flush: the flush command is timed, and the timeline
/// ends it where its completion came (D 4.327 → C 68.945 µs).
#[test]
fn a_flush_command_ends_in_the_timeline() {
    let path = std::env::temp_dir().join(format!("fidelity-flush-{}.json", std::process::id()));
    let report = report(
        "susi-sata-sync-flush.blkparse.txt",
        &["--perfetto", path.to_str().unwrap()],
    );
    assert_eq!(
        op(&report, "8:0", "flush")["issue_to_complete_us"]["count"],
        1
    );
    let timeline: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    let command = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["name"] == "command")
        .expect("a command slice");
    assert_eq!(command["args"]["op"], "flush");
    assert!(command["args"].get("unfinished").is_none(), "{command}");
    assert!((command["dur"].as_f64().unwrap() - 64.618).abs() < 0.001);
}
