//! The event stream against the kernel's own `blk` tracer: one workload on a
//! partitioned loop disk traced by the blk tracer and by iosplit-trace with
//! each probe flavor (raw and classic tracepoints) at once. Per-action counts
//! must match the blk tracer, and the two flavors must give the same answers.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{count_actions, dd, privileged, BlkTracer, LoopDisk, PartitionSpec, Tracer};

#[test]
fn event_counts_match_the_kernels_blk_tracer() {
    if !privileged("event_counts_match_the_kernels_blk_tracer") {
        return;
    }
    let mut disk = LoopDisk::new(
        "oracle",
        96,
        &[
            PartitionSpec {
                start: 2048,
                size: 65536,
            },
            // An odd size: the kernel gives this partition 512-byte blocks.
            PartitionSpec {
                start: 69632,
                size: 100001,
            },
        ],
    );
    // Small requests force splits of the larger writes.
    disk.set_queue("max_sectors_kb", "64");
    let oracle = BlkTracer::start(&disk.name);
    let args = ["report", "--json", "-d", &disk.name];
    let raw = Tracer::start_with(&args, &[("IOSPLIT_PROBES", "raw")]);
    let classic = Tracer::start_with(&args, &[("IOSPLIT_PROBES", "classic")]);

    let p1 = disk.partition(1);
    let p2 = disk.partition(2);
    for (bs, count) in [
        ("512", "64"),
        ("4k", "64"),
        ("64k", "16"),
        ("1M", "4"),
        ("4M", "2"),
    ] {
        dd(&[
            "if=/dev/zero",
            &format!("of={p1}"),
            &format!("bs={bs}"),
            &format!("count={count}"),
            "oflag=direct",
        ]);
        dd(&[
            "if=/dev/zero",
            &format!("of={p2}"),
            &format!("bs={bs}"),
            &format!("count={count}"),
            "conv=fsync",
        ]);
    }
    dd(&[
        "if=/dev/zero",
        &format!("of={p2}"),
        "bs=32k",
        "count=64",
        "conv=fsync",
    ]);
    dd(&[
        &format!("if={p1}"),
        "of=/dev/null",
        "bs=1M",
        "count=8",
        "iflag=direct",
    ]);

    let raw = raw.stop();
    let classic = classic.stop();
    let trace = oracle.finish();
    let raw: serde_json::Value = serde_json::from_str(&raw).expect("report is JSON");
    let classic: serde_json::Value = serde_json::from_str(&classic).expect("report is JSON");
    for (flavor, report) in [("raw", &raw), ("classic", &classic)] {
        eprintln!("--- {flavor} tracepoints");
        check_against_oracle(report, &trace, &disk);
    }
    assert_eq!(
        counts_of(&raw),
        counts_of(&classic),
        "raw and classic tracepoints disagree"
    );
}

/// Everything in a report that does not depend on timing: events and, per
/// disk and partition and op, every count and size histogram.
fn counts_of(report: &serde_json::Value) -> serde_json::Value {
    let mut report = report.clone();
    report["events"]["missed"] = 0.into();
    let strip = |measures: &mut serde_json::Value| {
        for op in measures["ops"].as_object_mut().unwrap().values_mut() {
            let op = op.as_object_mut().unwrap();
            op.retain(|key, _| !key.ends_with("_us"));
        }
    };
    for device in report["devices"].as_array_mut().unwrap() {
        strip(&mut device["measures"]);
        for part in device["partitions"].as_array_mut().unwrap() {
            strip(&mut part["measures"]);
        }
    }
    serde_json::json!({
        "events": report["events"],
        "correlation": report["correlation"],
        "devices": report["devices"],
        "diagnoses": report["diagnoses"].as_array().unwrap().iter().map(|d| &d["code"]).collect::<Vec<_>>(),
    })
}

fn check_against_oracle(report: &serde_json::Value, trace: &str, disk: &LoopDisk) {
    let events = &report["events"];
    let ours = |key: &str| {
        events[key]
            .as_u64()
            .unwrap_or_else(|| panic!("events.{key} missing"))
    };
    let theirs = count_actions(trace, &disk.blk_dev());
    let oracle_count = |action: &str| theirs.get(action).copied().unwrap_or(0);

    assert_eq!(ours("dropped"), 0, "the tracer dropped events");
    assert_eq!(ours("missed"), 0, "the kernel skipped probe runs");
    assert!(ours("split") > 0, "the workload must split: {events}");
    assert!(ours("remap") > 0, "partition writes must remap: {events}");
    let pairs = [
        ("A", ours("remap")),
        ("Q", ours("queue")),
        ("X", ours("split")),
        ("M", ours("backmerge") + ours("rq_merge")),
        ("F", ours("frontmerge")),
        ("D", ours("issue")),
        ("C", ours("complete") + ours("bio_complete")),
    ];
    let mismatches: Vec<String> = pairs
        .iter()
        .filter(|(action, count)| oracle_count(action) != *count)
        .map(|(action, count)| {
            format!(
                "{action}: blk tracer {} vs ours {count}",
                oracle_count(action)
            )
        })
        .collect();
    eprintln!("blk tracer: {theirs:?}\niosplit-trace: {events}");

    // The engine's totals for the disk agree with the oracle too.
    let device = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == disk.name.as_str())
        .expect("the disk is in the report");
    let total = |key: &str| -> u64 {
        device["measures"]["ops"]
            .as_object()
            .unwrap()
            .values()
            .map(|op| op[key].as_u64().unwrap())
            .sum()
    };
    let engine = [
        ("Q", total("user_ios")),
        ("X", total("splits")),
        ("D", total("commands")),
        ("M+F", total("merges")),
    ];
    let merges = oracle_count("M") + oracle_count("F");
    for (action, ours) in engine {
        let expected = if action == "M+F" {
            merges
        } else {
            oracle_count(action)
        };
        assert_eq!(
            ours, expected,
            "engine total for {action} differs from the blk tracer"
        );
    }
    assert_eq!(
        report["correlation"]["incomplete"], 0,
        "{}",
        report["correlation"]
    );

    // max_sectors_kb=64 cut every large direct write on partition 1.
    let p1_name = format!("{}p1", disk.name);
    let split = report["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "split_amplification" && d["device"] == p1_name.as_str())
        .unwrap_or_else(|| {
            panic!(
                "no split_amplification on {p1_name}: {}",
                report["diagnoses"]
            )
        });
    assert_eq!(split["evidence"]["cause"], "max_sectors", "{split}");
    assert!(
        mismatches.is_empty(),
        "event counts differ from the kernel's blk tracer: {mismatches:?}\nblk: {theirs:?}\nours: {events}"
    );
}
