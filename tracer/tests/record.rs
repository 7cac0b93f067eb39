//! Recordings and imports, end to end through the real binary.
//!
//! - On a partitioned loop disk, one workload is traced at once by
//!   `report --json --record F` and by the kernel's ftrace `blk` tracer.
//!   `analyze F --json` must print the live report again (all but the timing
//!   field), and the blk tracer's text imported with `--from ftrace-blk`
//!   must give the same event counts per action and the same diagnoses.
//! - Bad input (foreign, empty, future-version, truncated and corrupt files,
//!   an unknown `--from`, text without events): one line on stderr, a
//!   non-zero exit, no panic.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{
    binary, blk_action_keys, dd, privileged, split_prone_disk, BlkTracer, ScratchFile, Tracer,
};
use iosplit_trace::geometry::{DevId, DiskGeometry};
use iosplit_trace::record::{format, RecordHeader, RecordingSink, Trailer, Writer};
use iosplit_trace::sink::EventSink;
use tracer_common::{BlockEvent, EventKind};

fn iosplit(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("iosplit-trace runs")
}

fn scratch(name: &str) -> ScratchFile {
    ScratchFile(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("record-{}-{name}", std::process::id())),
    )
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// Per blk-tracer action, the report's count.
fn action_counts(report: &serde_json::Value) -> Vec<(&'static str, u64)> {
    blk_action_keys()
        .into_iter()
        .map(|(action, keys)| {
            let sum = keys
                .iter()
                .map(|key| report["events"][key].as_u64().unwrap())
                .sum();
            (action, sum)
        })
        .collect()
}

fn diagnoses(report: &serde_json::Value) -> BTreeSet<(String, String)> {
    report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_string(),
                d["device"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn analyze_reprints_the_live_report_and_imports_agree() {
    if !privileged("analyze_reprints_the_live_report_and_imports_agree") {
        return;
    }
    let disk = split_prone_disk("record");
    let check = scratch("check.json");
    let snapshot = iosplit(&["check", "--json", &disk.name]);
    assert!(snapshot.status.success());
    std::fs::write(&check.0, &snapshot.stdout).unwrap();
    let recording = scratch("report.iotrace");
    let oracle = BlkTracer::start(&disk.name);
    let tracer = Tracer::start(&[
        "report",
        "--json",
        "--owners",
        "-d",
        &disk.name,
        "--record",
        recording.0.to_str().unwrap(),
    ]);
    let (p1, p2) = (disk.partition(1), disk.partition(2));
    for (bs, count) in [("4k", "64"), ("64k", "16"), ("1M", "4")] {
        dd(&[
            "if=/dev/zero",
            &format!("of={p1}"),
            &format!("bs={bs}"),
            &format!("count={count}"),
            "oflag=direct",
        ]);
    }
    dd(&[
        "if=/dev/zero",
        &format!("of={p2}"),
        "bs=32k",
        "count=128",
        "conv=fsync",
    ]);
    let live: serde_json::Value = serde_json::from_str(&tracer.stop()).unwrap();
    let trace = oracle.finish();
    drop(oracle);

    // The recording gives the same report; duration_s comes from its trailer.
    let mut replayed = json_of(&iosplit(&[
        "analyze",
        recording.0.to_str().unwrap(),
        "--json",
    ]));
    let mut expected = live.clone();
    for report in [&mut replayed, &mut expected] {
        let duration = report["duration_s"].as_f64().unwrap();
        assert!(duration > 0.0);
        report["duration_s"] = serde_json::Value::Null;
    }
    assert!(live["events"]["split"].as_u64().unwrap() > 0, "{live}");
    assert!(live["events"]["remap"].as_u64().unwrap() > 0, "{live}");
    assert_eq!(replayed, expected, "analyze differs from the live report");
    // The attribution sections print from the recording too, names as recorded.
    let by = iosplit(&[
        "analyze",
        recording.0.to_str().unwrap(),
        "--by",
        "process",
        "--by",
        "cgroup",
    ]);
    let by_text = String::from_utf8_lossy(&by.stdout);
    assert!(by.status.success(), "{by_text}");
    assert!(by_text.contains("by process"), "{by_text}");
    assert!(by_text.contains("by cgroup"), "{by_text}");
    if let Some(cgroup) = live["attribution"]["cgroups"][0]["cgroup"].as_str() {
        assert!(by_text.contains(cgroup), "{by_text}");
    }

    // The blk tracer's text, imported, gives the same counts and diagnoses.
    let text = scratch("trace.txt");
    std::fs::write(&text.0, &trace).unwrap();
    let imported = iosplit(&[
        "analyze",
        "--from",
        "ftrace-blk",
        "--geometry",
        check.0.to_str().unwrap(),
        text.0.to_str().unwrap(),
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&imported.stderr).into_owned();
    let imported = json_of(&imported);
    assert!(stderr.contains("no dirty-buffer events"), "{stderr}");
    assert_eq!(action_counts(&imported), action_counts(&live));
    assert_eq!(diagnoses(&imported), diagnoses(&live));
    assert!(
        !diagnoses(&live).is_empty(),
        "the workload must be diagnosed"
    );

    // With --interval, analyze prints the same stream of reports.
    let intervals = scratch("intervals.iotrace");
    let interval_args: Vec<String> = [
        "report",
        "--json",
        "--interval",
        "0.5",
        "--duration",
        "1.8",
        "-d",
        &disk.name,
        "--record",
        intervals.0.to_str().unwrap(),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let live = std::thread::spawn(move || {
        let args: Vec<&str> = interval_args.iter().map(String::as_str).collect();
        iosplit(&args)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    for round in 0..6 {
        dd(&[
            "if=/dev/zero",
            &format!("of={p1}"),
            "bs=64k",
            &format!("count={}", 4 + round),
            "oflag=direct",
        ]);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let live = live.join().unwrap();
    let replayed = iosplit(&["analyze", intervals.0.to_str().unwrap(), "--json"]);
    assert!(replayed.status.success(), "{replayed:?}");
    let lines = |out: &Output| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                let mut report: serde_json::Value = serde_json::from_str(line).unwrap();
                report["duration_s"] = serde_json::Value::Null;
                report
            })
            .collect()
    };
    let (live, replayed) = (lines(&live), lines(&replayed));
    assert!(live.len() >= 3, "{} interval reports", live.len());
    let queued: u64 = live
        .iter()
        .map(|r| r["events"]["queue"].as_u64().unwrap())
        .sum();
    assert!(queued > 0, "the intervals saw the writes");
    assert_eq!(
        replayed, live,
        "analyze differs from the live interval reports"
    );

    // A full disk stops the recording, not the report: printed, then one line and status 1.
    let full = iosplit(&[
        "report",
        "--duration",
        "1",
        "-d",
        &disk.name,
        "--record",
        "/dev/full",
    ]);
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!full.stdout.is_empty(), "the report is still printed");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// --- bad input -------------------------------------------------------------

/// A small, valid recording of queued writes on a made-up loop disk.
fn synthetic_recording(path: &Path, events: u64) {
    let mut writer = Writer::create(path).unwrap();
    let mut sink = RecordingSink::new(common::NoSink, Some(&mut writer));
    writer.header(RecordHeader {
        tool: "test".into(),
        probe_flavor: "BTF tracepoints".into(),
        recorded_by: "record".into(),
        geometry: vec![DiskGeometry {
            name: "loop9".into(),
            dev: Some(DevId::new(7, 9)),
            size_sectors: 1 << 30,
            logical_block_size: 512,
            physical_block_size: 512,
            request_based: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    for index in 0..events {
        let mut event = BlockEvent::ZERO;
        event.kind = EventKind::Queue as u8;
        event.dev = DevId::new(7, 9).to_kernel();
        event.ts_ns = 1_000_000 + index * 1000;
        event.sector = index * 8;
        event.nr_sector = 8;
        event.rwbs[0] = b'W';
        sink.block_event(&event);
    }
    sink.finish_recording(Trailer {
        duration_s: 1.0,
        ..Default::default()
    });
    drop(sink);
    writer.close().unwrap();
}

fn assert_one_line_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(out.status.code().is_some(), "killed by a signal: {stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_synthetic_recording_analyzes() {
    let file = scratch("synthetic.iotrace");
    synthetic_recording(&file.0, 100);
    let report = json_of(&iosplit(&["analyze", file.0.to_str().unwrap(), "--json"]));
    assert_eq!(report["events"]["queue"], 100);
    assert_eq!(report["duration_s"], 1.0);
}

#[test]
fn foreign_empty_and_future_files_are_refused() {
    let file = scratch("foreign");
    std::fs::write(&file.0, "hello, this is not a recording\n").unwrap();
    assert_one_line_error(
        &iosplit(&["analyze", file.0.to_str().unwrap()]),
        "not an iosplit-trace recording",
    );
    std::fs::write(&file.0, b"").unwrap();
    assert_one_line_error(
        &iosplit(&["analyze", file.0.to_str().unwrap()]),
        "shorter than the recording preamble",
    );
    let mut future = format::preamble();
    future[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&file.0, future).unwrap();
    assert_one_line_error(
        &iosplit(&["analyze", file.0.to_str().unwrap()]),
        "recording format 99",
    );
    assert_one_line_error(
        &iosplit(&["analyze", "/nonexistent/recording"]),
        "cannot analyze /nonexistent/recording",
    );
}

/// Where the file's last block of events lies (its header included).
fn last_events_block(bytes: &[u8]) -> std::ops::Range<usize> {
    let mut at = format::PREAMBLE_BYTES;
    let mut last = None;
    while at < bytes.len() {
        let head: &[u8; format::BLOCK_HEADER_BYTES] = bytes[at..][..format::BLOCK_HEADER_BYTES]
            .try_into()
            .unwrap();
        let header = format::BlockHeader::decode(head).unwrap();
        let end = at + format::BLOCK_HEADER_BYTES + header.payload_len as usize;
        if matches!(
            format::BlockKind::from_u8(header.kind),
            Some(format::BlockKind::Events | format::BlockKind::PackedEvents)
        ) {
            last = Some(at..end);
        }
        at = end;
    }
    last.expect("the recording has an events block")
}

#[test]
fn truncated_and_corrupt_files_say_so() {
    let file = scratch("cut.iotrace");
    // Two full event blocks and a partial third.
    synthetic_recording(&file.0, 2 * 18_500 + 1_000);
    let bytes = std::fs::read(&file.0).unwrap();

    // Cut inside the last events block: the report of what is complete, a
    // note, and exit 1.
    let last_events = last_events_block(&bytes);
    std::fs::write(&file.0, &bytes[..(last_events.start + last_events.end) / 2]).unwrap();
    let out = iosplit(&["analyze", file.0.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ends inside a block"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let queued = report["events"]["queue"].as_u64().unwrap();
    assert!(queued > 30_000 && queued < 38_000, "{queued}");

    // Cut inside the header: nothing to report.
    std::fs::write(&file.0, &bytes[..format::PREAMBLE_BYTES + 10]).unwrap();
    assert_one_line_error(
        &iosplit(&["analyze", file.0.to_str().unwrap()]),
        "no header block",
    );

    // One flipped byte in a complete block.
    let mut corrupt = bytes.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0x10;
    std::fs::write(&file.0, &corrupt).unwrap();
    assert_one_line_error(
        &iosplit(&["analyze", file.0.to_str().unwrap()]),
        "checksum mismatch",
    );
}

#[test]
fn unknown_or_wrong_text_is_refused() {
    let file = scratch("text");
    std::fs::write(&file.0, "no events here\n").unwrap();
    let out = iosplit(&[
        "analyze",
        "--from",
        "blktrace-binary",
        file.0.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'blktrace-binary'"),
        "{stderr}"
    );
    assert_one_line_error(
        &iosplit(&["analyze", "--from", "blkparse", file.0.to_str().unwrap()]),
        "no blkparse event lines found",
    );
    assert_one_line_error(
        &iosplit(&[
            "analyze",
            "--from",
            "ftrace-blk",
            "--geometry",
            file.0.to_str().unwrap(),
            file.0.to_str().unwrap(),
        ]),
        "is not a `check --json` snapshot",
    );
}
