//! The corpus of real traces others took (tests/corpus/; provenance and the
//! expert readings are in tests/corpus/MANIFEST.md): each imports, exits 0,
//! and reads as the manifest says wherever the importer and today's engine
//! produce the reading. Readings that need engine work are listed in the
//! manifest as pending, not asserted here.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// What one device/op of the report must show.
struct Op {
    dev: &'static str,
    op: &'static str,
    user_ios: Option<u64>,
    commands: Option<u64>,
    requeues: Option<u64>,
    /// User I/Os cut at least once.
    split_user_ios: Option<u64>,
    /// (cause key, splits) the report attributes.
    split_cause: Option<(&'static str, u64)>,
    /// Completions with an error status, all EIO in this corpus.
    failed_eio: Option<u64>,
    /// (min, max) queue→complete in µs, as the expert read them.
    q2c: Option<(f64, f64)>,
    /// (min, max) issue→complete in µs.
    i2c: Option<(f64, f64)>,
}

const OP: Op = Op {
    dev: "",
    op: "",
    user_ios: None,
    commands: None,
    requeues: None,
    split_user_ios: None,
    split_cause: None,
    failed_eio: None,
    q2c: None,
    i2c: None,
};

struct Case {
    file: &'static str,
    from: &'static str,
    /// Non-zero event counts; every other kind must be 0.
    events: &'static [(&'static str, u64)],
    duration_us: Option<f64>,
    /// `correlation.unmatched_events`, where the expert reading explains every line.
    unmatched: Option<u64>,
    ops: &'static [Op],
    /// Substrings of stderr notes.
    notes: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        file: "marod-md127-nvme-5.4.blkparse.txt",
        from: "blkparse",
        events: &[("remap", 5), ("issue", 5), ("complete", 5)],
        duration_us: Some(391.614),
        unmatched: Some(0),
        ops: &[
            Op {
                dev: "259:0",
                op: "write",
                user_ios: Some(5),
                commands: Some(5),
                i2c: Some((31.290, 42.996)),
                ..OP
            },
            // The md device the remaps came from: its bios are the user I/Os,
            // ended by the commands they became (A→C).
            Op {
                dev: "9:127",
                op: "write",
                user_ios: Some(5),
                q2c: Some((35.992, 50.411)),
                ..OP
            },
        ],
        notes: &[
            "6 events precede blkparse's first one",
            "not in time order",
            "no Q lines",
            "5 G, 5 P, 5 U",
        ],
    },
    Case {
        file: "marod-nvme-4.4.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 5), ("issue", 5), ("complete", 5)],
        duration_us: Some(376.756),
        unmatched: Some(0),
        ops: &[Op {
            dev: "259:1",
            op: "write",
            user_ios: Some(5),
            commands: Some(5),
            q2c: Some((46.276, 55.854)),
            i2c: Some((37.636, 47.736)),
            ..OP
        }],
        notes: &[
            "6 events precede blkparse's first one",
            "not in time order",
            "5 UT",
        ],
    },
    Case {
        file: "wong-xfs-zero-range-nvme.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 2), ("complete", 2)],
        duration_us: Some(62.680),
        unmatched: None,
        ops: &[Op {
            dev: "259:0",
            op: "write",
            user_ios: Some(2),
            ..OP
        }],
        notes: &["no D lines"],
    },
    Case {
        file: "wong-xfs-fzero-negative.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 1), ("complete", 1)],
        duration_us: Some(87.360),
        unmatched: None,
        ops: &[],
        notes: &["2 events precede blkparse's first one", "no D lines"],
    },
    Case {
        file: "kawasaki-zoned-nullb-eio.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 1), ("split", 6), ("issue", 2), ("complete", 3)],
        duration_us: None,
        // C WS 24576 + 765, whose request the excerpt leaves out.
        unmatched: Some(1),
        ops: &[Op {
            dev: "251:0",
            op: "write",
            user_ios: Some(1),
            commands: Some(2),
            failed_eio: Some(1),
            // The failed C WS 0 + 765 covers D WS 510 + 255: 1.965 µs.
            i2c: Some((1.965, 253.924)),
            ..OP
        }],
        notes: &["1 completions failed (errno 1 × -5)", "5 G, 5 I"],
    },
    Case {
        file: "linfeng-dmraid-bfq-passthrough.blkparse.txt",
        from: "blkparse",
        events: &[],
        duration_us: Some(0.0),
        unmatched: None,
        ops: &[],
        notes: &["no block I/O events", "2 notify (m N), 4 passthrough"],
    },
    Case {
        file: "acme-ftrace-blk-plugin-2009.ftrace.txt",
        from: "ftrace-blk",
        events: &[("remap", 1), ("queue", 1), ("issue", 1), ("complete", 1)],
        duration_us: Some(20690.0),
        unmatched: None,
        ops: &[Op {
            dev: "8:1",
            op: "read",
            user_ios: Some(1),
            commands: Some(1),
            q2c: Some((20687.0, 20687.0)),
            i2c: Some((20663.0, 20663.0)),
            ..OP
        }],
        notes: &["status that is no errno", "1 G, 1 I, 1 P, 1 U"],
    },
    Case {
        file: "kulkarni-nullb-requeue.blkparse.txt",
        from: "blkparse",
        events: &[
            ("queue", 10),
            ("issue", 13),
            ("complete", 10),
            ("requeue", 3),
        ],
        duration_us: Some(833.834),
        unmatched: Some(0),
        ops: &[Op {
            dev: "252:0",
            op: "write",
            user_ios: Some(10),
            commands: Some(10),
            requeues: Some(3),
            failed_eio: Some(0),
            q2c: Some((33.783, 115.106)),
            i2c: Some((12.554, 28.043)),
            ..OP
        }],
        notes: &["10 G, 12 I"],
    },
    Case {
        file: "kulkarni-nullb-discard-split.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 1), ("split", 19), ("issue", 20), ("complete", 20)],
        duration_us: Some(549.881),
        unmatched: Some(0),
        ops: &[Op {
            dev: "252:0",
            op: "discard",
            user_ios: Some(1),
            commands: Some(20),
            split_user_ios: Some(1),
            split_cause: Some(("max_discard", 19)),
            // Each growing-range C completes the next piece.
            q2c: Some((549.881, 549.881)),
            i2c: Some((14.828, 41.698)),
            ..OP
        }],
        notes: &["20 G, 20 I", "19 splits print no split point"],
    },
    Case {
        file: "kulkarni-nullb-mq-deadline-merge.blkparse.txt",
        from: "blkparse",
        events: &[
            ("queue", 5),
            ("backmerge", 4),
            ("issue", 1),
            // The request's C, then the five bounced bios' own.
            ("complete", 1),
            ("bio_complete", 5),
        ],
        duration_us: Some(347.291),
        unmatched: Some(0),
        ops: &[Op {
            dev: "252:0",
            op: "write",
            user_ios: Some(5),
            commands: Some(1),
            i2c: Some((31.118, 31.118)),
            ..OP
        }],
        notes: &[
            "5 B, 1 G, 1 I",
            "4 merges counted as back merges",
            "5 C lines are bounced bios' own completions",
        ],
    },
    Case {
        file: "ruffell-lvm-nvme-4.4-standard.blkparse.txt",
        from: "blkparse",
        events: &[("remap", 1), ("queue", 1), ("issue", 1), ("complete", 1)],
        duration_us: Some(1554.150),
        unmatched: None,
        ops: &[
            Op {
                dev: "259:0",
                op: "read",
                user_ios: Some(1),
                commands: Some(1),
                q2c: Some((1553.965, 1553.965)),
                i2c: Some((1548.285, 1548.285)),
                ..OP
            },
            Op {
                dev: "252:0",
                op: "read",
                user_ios: Some(1),
                ..OP
            },
        ],
        notes: &[],
    },
    Case {
        file: "ruffell-lvm-nvme-4.15-merge.blkparse.txt",
        from: "blkparse",
        events: &[
            ("remap", 2),
            ("queue", 2),
            ("backmerge", 2),
            ("issue", 1),
            ("complete", 1),
        ],
        duration_us: Some(1710.024),
        // The request's first bios (7358464 on) are before the excerpt.
        unmatched: Some(1),
        ops: &[
            // The two bios merged behind them are carried by its one command.
            Op {
                dev: "259:0",
                op: "read",
                user_ios: Some(2),
                commands: Some(1),
                q2c: Some((1708.548, 1709.905)),
                i2c: Some((1705.484, 1705.484)),
                ..OP
            },
        ],
        notes: &["1 I, 1 UT"],
    },
    Case {
        file: "dwj-lvm-on-sda2-two-level-remap.blkparse.txt",
        from: "blkparse",
        events: &[("remap", 2), ("queue", 1)],
        duration_us: None,
        unmatched: Some(0),
        // Both remaps chained: the write submitted to dm-0 is its user I/O.
        ops: &[
            Op {
                dev: "253:0",
                op: "write",
                user_ios: Some(1),
                ..OP
            },
            Op {
                dev: "8:0",
                op: "write",
                user_ios: Some(1),
                commands: Some(0),
                ..OP
            },
        ],
        notes: &[
            "partition 8:2 starts at sector 1026048 of 8:0",
            "no D lines",
            "no C lines",
        ],
    },
    Case {
        file: "martins3-md10-notify-only.blkparse.txt",
        from: "blkparse",
        events: &[],
        duration_us: Some(0.0),
        unmatched: None,
        ops: &[],
        notes: &["no block I/O events", "4 notify (m N)"],
    },
    Case {
        file: "martins3-stuck-disk-no-issue.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 1)],
        duration_us: None,
        unmatched: None,
        ops: &[Op {
            dev: "8:144",
            op: "read",
            user_ios: Some(1),
            commands: Some(0),
            ..OP
        }],
        notes: &["no D lines", "no C lines"],
    },
    Case {
        file: "martins3-virtio-dummy-notify.ftrace.txt",
        from: "ftrace-blk",
        events: &[("queue", 1), ("issue", 1), ("complete", 1)],
        duration_us: Some(91.0),
        unmatched: None,
        ops: &[Op {
            dev: "249:1",
            op: "read",
            q2c: Some((91.0, 91.0)),
            i2c: Some((67.0, 67.0)),
            ..OP
        }],
        notes: &["1 notify (m N)"],
    },
    Case {
        file: "martins3-scsi-debug-none.ftrace.txt",
        from: "ftrace-blk",
        events: &[("queue", 1), ("issue", 1), ("complete", 1)],
        duration_us: Some(982.0),
        unmatched: None,
        ops: &[Op {
            dev: "8:0",
            op: "read",
            q2c: Some((982.0, 982.0)),
            i2c: Some((967.0, 967.0)),
            ..OP
        }],
        notes: &["1 notify (m N)"],
    },
    Case {
        file: "martins3-dm-on-sdc.ftrace.txt",
        from: "ftrace-blk",
        events: &[("remap", 1), ("queue", 1), ("issue", 1), ("complete", 1)],
        duration_us: Some(79.0),
        unmatched: None,
        ops: &[Op {
            dev: "8:32",
            op: "read",
            q2c: Some((74.0, 74.0)),
            i2c: Some((62.0, 62.0)),
            ..OP
        }],
        notes: &[],
    },
    Case {
        file: "susi-sata-sync-flush.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 1), ("issue", 1), ("complete", 2)],
        duration_us: Some(69.466),
        unmatched: Some(0),
        ops: &[Op {
            dev: "8:0",
            op: "flush",
            user_ios: Some(1),
            commands: Some(1),
            // D FN → C FN 0: the flush is timed as a command, and the empty
            // preflush bio from its Q (Q FWS → C FN 0).
            i2c: Some((64.618, 64.618)),
            q2c: Some((68.945, 68.945)),
            ..OP
        }],
        notes: &["1 G"],
    },
    Case {
        file: "kulkarni-blktrace-ext-prio-all.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 4), ("issue", 4), ("complete", 4)],
        duration_us: Some(949_330.943),
        unmatched: Some(0),
        ops: &[Op {
            dev: "252:0",
            op: "write",
            user_ios: Some(4),
            commands: Some(4),
            q2c: Some((106.972, 123.823)),
            i2c: Some((33.239, 38.990)),
            ..OP
        }],
        notes: &[
            "read 20 event lines of 20",
            "20 event lines carry an I/O priority column",
        ],
    },
    Case {
        file: "kulkarni-blktrace-ext-prio-masked.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 3), ("issue", 4), ("complete", 4)],
        duration_us: Some(10_604_586.205),
        unmatched: None,
        ops: &[Op {
            dev: "252:0",
            op: "write",
            user_ios: Some(3),
            commands: Some(4),
            q2c: Some((73.088, 151.984)),
            i2c: Some((22.971, 42.951)),
            ..OP
        }],
        notes: &[
            "read 19 event lines of 19",
            "14 event lines carry an I/O priority column",
        ],
    },
    Case {
        file: "gurney-nvme-track-ios-t.blkparse.txt",
        from: "blkparse",
        events: &[("complete", 38)],
        duration_us: Some(1_523_999.581),
        unmatched: None,
        ops: &[],
        notes: &[
            "read 38 event lines of 42; also 2 elision lines",
            "no D lines",
        ],
    },
    // Zone appends complete where the device wrote them (262152, 262160 …),
    // not at the zone start they were issued to (262144).
    Case {
        file: "kulkarni-nullb-zone-append-zas.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 5), ("issue", 5), ("complete", 5)],
        duration_us: Some(853.010),
        unmatched: Some(0),
        ops: &[Op {
            dev: "252:0",
            op: "other",
            user_ios: Some(5),
            commands: Some(5),
            q2c: Some((53.981, 478.498)),
            i2c: Some((34.895, 57.909)),
            ..OP
        }],
        notes: &[
            "25 event lines carry an I/O priority column",
            "summary for 252,0 agrees with the import",
        ],
    },
    // Tracepoint lines (`block_rq_issue: 259,0 WFSU …`), 6.16's atomic U.
    Case {
        file: "harjani-nvme-atomic-U-rwbs.ftrace.txt",
        from: "ftrace-blk",
        events: &[("issue", 2), ("complete", 2)],
        duration_us: None,
        unmatched: None,
        ops: &[Op {
            dev: "259:0",
            op: "write",
            commands: Some(2),
            i2c: Some((3021.0, 3522.0)),
            ..OP
        }],
        notes: &["not in time order"],
    },
    Case {
        file: "gg7-zfs-idle-ts-prefixed.blkparse.txt",
        from: "blkparse",
        events: &[("remap", 1), ("queue", 1), ("issue", 2), ("complete", 2)],
        duration_us: Some(1_001_091.655),
        unmatched: Some(1),
        ops: &[Op {
            dev: "8:0",
            op: "write",
            user_ios: Some(1),
            commands: Some(2),
            q2c: Some((243.383, 243.383)),
            i2c: Some((216.159, 219.073)),
            ..OP
        }],
        notes: &[
            "13 lines carry words before the trace's own fields (`Jan 10 22:42:56`",
            "partition 8:1 starts at sector 2048 of 8:0",
        ],
    },
    Case {
        file: "oxdeadmeat-dmcrypt-nvme-flush-full.blkparse.txt",
        from: "blkparse",
        events: &[
            ("remap", 473),
            ("queue", 248),
            ("backmerge", 106),
            ("issue", 142),
            ("complete", 165),
        ],
        duration_us: None,
        unmatched: Some(0),
        ops: &[Op {
            dev: "259:0",
            op: "flush",
            user_ios: Some(23),
            commands: Some(23),
            // Each Q FWFS to the next C FN of the disk, first in first out.
            q2c: Some((128.003, 23632.621)),
            ..OP
        }],
        notes: &["summary for nvme0n1 agrees with the import: Q 0r/248w, D 23r/119w"],
    },
    Case {
        file: "boldi-ide-hda-cfq-2.6.17.blkparse.txt",
        from: "blkparse",
        events: &[
            ("queue", 28),
            ("backmerge", 25),
            ("issue", 2),
            ("complete", 2),
        ],
        duration_us: None,
        unmatched: None,
        ops: &[Op {
            dev: "3:0",
            op: "read",
            user_ios: Some(28),
            commands: Some(2),
            i2c: Some((3275.060, 3275.060)),
            ..OP
        }],
        notes: &[
            "3 requests on 3:0 were inserted into the I/O scheduler (I) and never dispatched",
            "or their D is among the lines the publisher left out",
            "differs from the import (an excerpt: the publisher left lines out at 3 places)",
        ],
    },
    // A preflush's own request ends in error after its flush (`C WS 0 + 0
    // [-5]`): an empty completion, and still a failed command.
    Case {
        file: "yebin-sda-flush-eio-4.19.ftrace.txt",
        from: "ftrace-blk",
        events: &[("queue", 1), ("issue", 1), ("complete", 2)],
        duration_us: None,
        unmatched: Some(0),
        ops: &[
            Op {
                dev: "8:0",
                op: "write",
                failed_eio: Some(1),
                ..OP
            },
            Op {
                dev: "8:0",
                op: "flush",
                user_ios: Some(1),
                commands: Some(1),
                ..OP
            },
        ],
        notes: &["1 completions failed (errno 1 × -5)"],
    },
    // Failed passthrough commands (smartctl's, `C N [65531]`) on five disks.
    Case {
        file: "kylemanna-sdj-sdn-passthrough-eio-65531.blkparse.txt",
        from: "blkparse",
        events: &[],
        duration_us: None,
        unmatched: None,
        ops: &[],
        notes: &["10 failed passthrough", "9 passthrough"],
    },
    // A line number, with or without a `*`, before every blkparse line.
    Case {
        file: "msmith-bcache-sda-sdb-numbered-starred.blkparse.txt",
        from: "blkparse",
        events: &[("queue", 10), ("split", 1), ("issue", 7), ("complete", 11)],
        duration_us: None,
        unmatched: None,
        ops: &[],
        notes: &["47 lines carry words before the trace's own fields (`* 1`"],
    },
    // block_bio_complete lines on dm devices end their bios, not requests.
    Case {
        file: "tsai-dm-cache-passthrough-bio-queue-complete.ftrace.txt",
        from: "ftrace-blk",
        events: &[("queue", 7), ("complete", 1), ("bio_complete", 2)],
        duration_us: None,
        unmatched: Some(1),
        ops: &[Op {
            dev: "252:3",
            op: "write",
            user_ios: Some(1),
            q2c: Some((14_667.0, 14_667.0)),
            ..OP
        }],
        notes: &[],
    },
];

fn corpus(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(file)
}

fn analyze(from: &str, file: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", from, "--json"])
        .arg(corpus(file))
        .output()
        .expect("run iosplit-trace")
}

/// The engine's histograms keep latencies in buckets: within 1% (and 1 µs).
fn close(engine: f64, expert: f64) -> bool {
    (engine - expert).abs() <= 1.0 + expert * 0.01
}

#[test]
fn every_corpus_file_is_listed_in_the_manifest_and_here() {
    let manifest = std::fs::read_to_string(corpus("MANIFEST.md")).unwrap();
    for entry in std::fs::read_dir(corpus("")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "MANIFEST.md" {
            continue;
        }
        let named = manifest.contains(&name)
            || (name.starts_with("martins3-") && manifest.contains(&name[..name.len() - 4]));
        assert!(named, "{name} has no provenance in MANIFEST.md");
        // Every text trace also gets tests/corpus_reading.rs's independent reading.
        let text = name.ends_with(".blkparse.txt") || name.ends_with(".ftrace.txt");
        assert!(
            name.starts_with("corrupt-") || text || CASES.iter().any(|case| case.file == name),
            "{name} has no case in tests/corpus.rs"
        );
    }
}

#[test]
fn every_corpus_trace_reads_as_the_manifest_says() {
    let mut failures = Vec::new();
    for case in CASES {
        let out = analyze(case.from, case.file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            failures.push(format!("{}: exit {:?}: {stderr}", case.file, out.status));
            continue;
        }
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut fail = |what: String| failures.push(format!("{}: {what}", case.file));
        for (kind, count) in report["events"].as_object().unwrap() {
            let want = case
                .events
                .iter()
                .find(|(k, _)| k == kind)
                .map_or(0, |(_, n)| *n);
            if count.as_u64() != Some(want) {
                fail(format!("events.{kind} = {count}, expected {want}"));
            }
        }
        if let Some(want) = case.unmatched {
            let got = &report["correlation"]["unmatched_events"];
            if got.as_u64() != Some(want) {
                fail(format!("unmatched_events = {got}, expected {want}"));
            }
        }
        if let Some(want) = case.duration_us {
            let got = report["duration_s"].as_f64().unwrap() * 1e6;
            if (got - want).abs() > 0.01 {
                fail(format!("duration {got} µs, expected {want}"));
            }
        }
        for op in case.ops {
            let device = report["devices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["dev"] == op.dev);
            let Some(m) = device.map(|d| &d["measures"]["ops"][op.op]) else {
                fail(format!("no device {}", op.dev));
                continue;
            };
            if let Some((cause, want)) = op.split_cause {
                if m["split_causes"][cause].as_u64() != Some(want) {
                    fail(format!(
                        "{} {} split_causes = {}, expected {cause} {want}",
                        op.dev, op.op, m["split_causes"]
                    ));
                }
            }
            if let Some(want) = op.failed_eio.filter(|n| *n > 0) {
                if m["errors"]["EIO"].as_u64() != Some(want) {
                    fail(format!(
                        "{} {} errors = {}, expected EIO {want}",
                        op.dev, op.op, m["errors"]
                    ));
                }
            }
            for (field, want) in [
                ("user_ios", op.user_ios),
                ("commands", op.commands),
                ("requeues", op.requeues),
                ("split_user_ios", op.split_user_ios),
                ("failed_commands", op.failed_eio),
            ] {
                if let Some(want) = want {
                    if m[field].as_u64() != Some(want) {
                        fail(format!(
                            "{} {} {field} = {}, expected {want}",
                            op.dev, op.op, m[field]
                        ));
                    }
                }
            }
            for (field, want) in [
                ("queue_to_complete_us", op.q2c),
                ("issue_to_complete_us", op.i2c),
            ] {
                if let Some((min, max)) = want {
                    let (got_min, got_max) = (m[field]["min"].as_f64(), m[field]["max"].as_f64());
                    let ok = got_min.is_some_and(|g| close(g, min))
                        && got_max.is_some_and(|g| close(g, max));
                    if !ok {
                        fail(format!(
                            "{} {} {field} min/max {got_min:?}/{got_max:?}, expected {min}/{max}",
                            op.dev, op.op
                        ));
                    }
                }
            }
        }
        for note in case.notes {
            if !stderr.contains(note) {
                fail(format!("no note containing {note:?} in:\n{stderr}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_corrupt_blktrace_file_is_one_clear_line_and_exit_1() {
    let out = analyze("blktrace", "corrupt-not-a-blktrace.blktrace.0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a blktrace file"), "{stderr}");
    assert!(
        stderr.contains("corrupt-not-a-blktrace.blktrace.0"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn text_that_is_no_trace_is_one_clear_line_and_exit_1() {
    let out = analyze("blkparse", "MANIFEST.md");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no blkparse event lines found"), "{stderr}");
}

/// Without `--geometry` a device is what the trace showed, said as such: no
/// zeros passed off as a geometry, and a partition starts where its remaps
/// say (dwj: 26696576 − 25670528 = 1026048 on 8:0).
#[test]
fn unknown_geometry_is_said_unknown_and_partition_starts_come_from_remaps() {
    let out = analyze("blkparse", "dwj-lvm-on-sda2-two-level-remap.blkparse.txt");
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let disk = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["dev"] == "8:0")
        .expect("8:0 reported");
    assert_eq!(disk["geometry_known"], false);
    let partition = &disk["partitions"][0];
    assert_eq!(partition["dev"], "8:2");
    assert_eq!(partition["geometry_known"], false);
    assert_eq!(partition["geometry"]["start"], 1026048);

    let text = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .args(["analyze", "--from", "blkparse"])
        .arg(corpus("dwj-lvm-on-sda2-two-level-remap.blkparse.txt"))
        .output()
        .unwrap();
    // Words only: the report wraps at the terminal's width.
    let text = String::from_utf8_lossy(&text.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(text.contains("8:0 (8:0): disk, geometry unknown"), "{text}");
    assert!(
        text.contains("start sector 1,026,048 (read off its remaps), size unknown"),
        "{text}"
    );
    assert!(!text.contains("logical 0 B"), "{text}");
}

/// Each corpus trace reads the same in every view: the text report's per
/// device lines, the JSON, the HTML header and the Perfetto command slices
/// count the same user I/Os and commands.
#[test]
fn every_corpus_trace_reads_the_same_in_text_json_html_and_perfetto() {
    let dir = std::env::temp_dir().join(format!("iosplit-corpus-views-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for case in CASES {
        let (html, perfetto) = (dir.join("report.html"), dir.join("trace.json"));
        let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
            .args(["analyze", "--from", case.from, "--json", "--html"])
            .arg(&html)
            .arg("--perfetto")
            .arg(&perfetto)
            .arg(corpus(case.file))
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!("{}: views failed", case.file));
            continue;
        }
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let json_total = |key: &str| -> u64 {
            report["devices"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|d| d["measures"]["ops"].as_object().unwrap().values())
                .map(|op| op[key].as_u64().unwrap())
                .sum()
        };
        let (user_ios, commands) = (json_total("user_ios"), json_total("commands"));

        let text = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
            .args(["analyze", "--from", case.from])
            .arg(corpus(case.file))
            .env("COLUMNS", "200")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        // Disk-level op lines: "  write: 5 user I/Os (avg 4 KiB) -> 5 commands (…)".
        let (mut text_user_ios, mut text_commands) = (0, 0);
        for line in text
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        {
            let Some((_, rest)) = line.split_once(": ") else {
                continue;
            };
            let number = |text: &str| text.replace(',', "").parse::<u64>().ok();
            let words: Vec<&str> = rest.split_whitespace().collect();
            if words.get(1..3) == Some(&["user", "I/Os"][..]) {
                text_user_ios += number(words[0]).unwrap_or(0);
                if let Some(at) = words.iter().position(|w| *w == "->") {
                    text_commands += words.get(at + 1).and_then(|w| number(w)).unwrap_or(0);
                }
            } else if words.get(1) == Some(&"commands") {
                // Commands without user I/Os: "write: 2 commands (avg 16 KiB)".
                text_commands += number(words[0]).unwrap_or(0);
            }
        }
        if (text_user_ios, text_commands) != (user_ios, commands) {
            failures.push(format!(
                "{}: text says {text_user_ios} user I/Os and {text_commands} commands, JSON {user_ios} and {commands}",
                case.file
            ));
        }

        let page = std::fs::read_to_string(&html).unwrap();
        let html_commands = page
            .split(" commands</p>")
            .next()
            .and_then(|head| head.rsplit(" · ").next())
            .and_then(|n| n.trim().replace(',', "").parse::<u64>().ok());
        // The header counts a command on the disk below a stack; the bios
        // the stacked devices handed down (their own commands) it says apart.
        let handed_down = page
            .split_once("which carried them again: ")
            .and_then(|(_, rest)| rest.split(';').next())
            .map_or(0, |n| n.replace(',', "").parse::<u64>().unwrap());
        let html_commands = html_commands.map(|n| n + handed_down);
        if html_commands != Some(commands) {
            failures.push(format!(
                "{}: HTML header says {html_commands:?} commands, JSON {commands}",
                case.file
            ));
        }
        let timeline: Value = serde_json::from_slice(&std::fs::read(&perfetto).unwrap()).unwrap();
        let slices = timeline["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == "command")
            .count() as u64;
        if slices != commands {
            failures.push(format!(
                "{}: Perfetto has {slices} command slices, JSON {commands} commands",
                case.file
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
