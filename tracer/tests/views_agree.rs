//! Every view of one recording tells the same story: the JSON report, the
//! HTML header and its commands/s series, and the Perfetto command slices
//! count the same commands (a requeued command once) and the same
//! issue→complete latencies (from the last issue to the last completion).
//!
//! Once on a synthetic recording with requeues and partial completions, and
//! once, as root, on a real recording of the root disk while 1 MiB direct
//! writes of scattered pages have their tails requeued (see `oracle.rs`).

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use iosplit_trace::frontend::analyze::{replay, Views};
use iosplit_trace::frontend::html::series::{latency_row, Series};
use iosplit_trace::frontend::html::Collector;
use iosplit_trace::geometry::{DevId, DiskGeometry};
use iosplit_trace::record::{RecordHeader, Recording, RecordingSink, Trailer, Writer};
use iosplit_trace::sink::EventSink;
use tracer_common::{BlockEvent, EventKind};

use common::{
    disk_holding, privileged, scattered_direct_writes, NoSink, ScratchDir, ScratchFile, Tracer,
};

const DISK: DevId = DevId::new(7, 9);

fn event(kind: EventKind, ts_ns: u64, sector: u64, nr_sector: u32) -> BlockEvent {
    let mut event = BlockEvent::ZERO;
    event.kind = kind as u8;
    event.dev = DISK.to_kernel();
    event.ts_ns = ts_ns;
    event.sector = sector;
    event.nr_sector = nr_sector;
    event.rwbs[0] = b'W';
    event
}

/// 200 writes of 1 MiB, each split into a 2032-sector head and a 16-sector
/// tail (as `max_segments` does on the root disk). Every third tail is
/// requeued and issued again 2 ms later; every fifth head completes in two
/// partial completions.
fn requeue_recording(path: &Path) {
    let mut writer = Writer::create(path).unwrap();
    let mut sink = RecordingSink::new(NoSink, Some(&mut writer));
    writer.header(RecordHeader {
        tool: "test".into(),
        probe_flavor: "BTF tracepoints".into(),
        recorded_by: "record".into(),
        geometry: vec![DiskGeometry {
            name: "vdz".into(),
            dev: Some(DISK),
            size_sectors: 1 << 22,
            logical_block_size: 512,
            physical_block_size: 4096,
            max_sectors_kb: 4096,
            max_hw_sectors_kb: 4096,
            max_segments: 254,
            request_based: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut events = Vec::new();
    let mut ts = 1_000_000_000u64;
    for io in 0..200u64 {
        let sector = io * 2048;
        let tail = sector + 2032;
        events.push(event(EventKind::Queue, ts, sector, 2048));
        let mut split = event(EventKind::Split, ts + 1_000, sector, 2048);
        split.aux_sector = tail;
        events.push(split);
        events.push(event(EventKind::Issue, ts + 5_000, sector, 2032));
        events.push(event(EventKind::Issue, ts + 6_000, tail, 16));
        let head_done = ts + 5_000 + 300_000 + io * 1_000;
        if io % 5 == 0 {
            events.push(event(
                EventKind::Complete,
                head_done - 100_000,
                sector,
                1016,
            ));
            events.push(event(EventKind::Complete, head_done, sector + 1016, 1016));
        } else {
            events.push(event(EventKind::Complete, head_done, sector, 2032));
        }
        let tail_issued = match io % 3 == 0 {
            true => {
                events.push(event(EventKind::Requeue, ts + 7_000, tail, 16));
                events.push(event(EventKind::Issue, ts + 2_007_000, tail, 16));
                ts + 2_007_000
            }
            false => ts + 6_000,
        };
        events.push(event(EventKind::Complete, tail_issued + 40_000, tail, 16));
        ts += 3_000_000;
    }
    // In kernel order, as a recording holds them.
    events.sort_by_key(|event| event.ts_ns);
    for event in &events {
        sink.block_event(event);
    }
    sink.finish_recording(Trailer {
        duration_s: 0.6,
        ..Default::default()
    });
    drop(sink);
    writer.close().unwrap();
}

/// What each view says about commands.
#[derive(Debug)]
struct Views3 {
    report_commands: u64,
    report_requeues: u64,
    report_latency: serde_json::Value,
    html_header_commands: u64,
    series: Series,
    /// Every command slice's op, and the write slices' durations.
    perfetto_commands: u64,
    perfetto_durations_us: Vec<f64>,
    /// Issue→complete times the report measured, all ops and devices.
    report_timed: u64,
}

fn total(report: &serde_json::Value, key: &str) -> u64 {
    report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|device| common::ops_total(&device["measures"], key))
        .sum()
}

/// The one latency distribution of the recording's busy device (every
/// command there is a write).
fn write_latency(report: &serde_json::Value) -> serde_json::Value {
    let device = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|device| common::ops_total(&device["measures"], "commands"))
        .unwrap();
    device["measures"]["ops"]["write"]["issue_to_complete_us"].clone()
}

fn analyze(recording: &Path, dir: &Path) -> Views3 {
    let html = dir.join("report.html");
    let perfetto = dir.join("trace.json");
    let out = Command::new(common::binary())
        .arg("analyze")
        .arg(recording)
        .arg("--json")
        .arg("--html")
        .arg(&html)
        .arg("--perfetto")
        .arg(&perfetto)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let page = std::fs::read_to_string(&html).unwrap();
    let header = page
        .split(" commands</p>")
        .next()
        .and_then(|head| head.rsplit(" · ").next())
        .unwrap();
    let html_header_commands = header.trim().replace(',', "").parse().unwrap();

    // The series the page's plots are drawn from, built as analyze builds them.
    let mut views = Views {
        html: Some(Collector::default()),
        perfetto: None,
    };
    let opened = Recording::open(recording).unwrap();
    replay(opened, recording, &mut views).unwrap();
    let series = views.html.unwrap().finish(&|_| None);

    let timeline: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&perfetto).unwrap()).unwrap();
    let perfetto_durations_us = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        // Completed write commands: the report times those (a command still
        // in flight when the recording stopped is counted, not timed).
        .filter(|e| {
            e["ph"] == "X"
                && e["name"] == "command"
                && e["args"]["op"] == "write"
                && e["args"]["unfinished"] != true
        })
        .map(|e| e["dur"].as_f64().unwrap())
        .collect();
    let perfetto_commands = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "command")
        .count() as u64;
    let report_timed = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|device| device["measures"]["ops"].as_object().unwrap().values())
        .map(|op| op["issue_to_complete_us"]["count"].as_u64().unwrap())
        .sum();
    Views3 {
        perfetto_commands,
        report_timed,
        report_commands: total(&report, "commands"),
        report_requeues: total(&report, "requeues"),
        report_latency: write_latency(&report),
        html_header_commands,
        series,
        perfetto_durations_us,
    }
}

/// The `q`-quantile of `values` (nearest rank).
fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The log2 row holding the series' `q`-quantile latency.
fn series_quantile_row(series: &Series, q: f64) -> usize {
    let mut rows = vec![0u64; series.latency[0].len()];
    for bin in &series.latency {
        for (row, count) in bin.iter().enumerate() {
            rows[row] += count;
        }
    }
    let total: u64 = rows.iter().sum();
    let rank = ((q * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    rows.iter()
        .position(|count| {
            seen += count;
            seen >= rank
        })
        .unwrap()
}

fn assert_views_agree(views: &mut Views3) {
    let commands = views.report_commands;
    assert!(commands > 0, "{views:?}");
    assert_eq!(views.html_header_commands, commands, "HTML header");
    assert_eq!(views.series.commands, commands, "HTML series total");
    assert_eq!(
        views.series.commands_per_bin.iter().sum::<u64>(),
        commands,
        "HTML commands/s series"
    );
    assert_eq!(views.perfetto_commands, commands, "Perfetto command slices");
    let series_timed: u64 = views.series.latency.iter().flatten().sum();
    assert_eq!(
        series_timed, views.report_timed,
        "HTML latency heatmap entries"
    );
    let latency = &views.report_latency;
    assert_eq!(
        views.perfetto_durations_us.len() as u64,
        latency["count"].as_u64().unwrap(),
        "Perfetto write command slices"
    );
    for (q, key) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        let reported = latency[key].as_u64().unwrap() as f64;
        // The report keeps 2 significant digits (under 1%) and gives a
        // bucket's low end, in whole µs; the slices are exact.
        let sliced = quantile(&mut views.perfetto_durations_us, q);
        assert!(
            sliced + 1.0 >= reported && sliced <= reported * 1.01 + 1.0,
            "{key}: Perfetto {sliced} µs, report {reported} µs"
        );
        if views.report_timed == latency["count"].as_u64().unwrap() {
            // Writes only: the heatmap's quantile row is the report's.
            assert_eq!(
                series_quantile_row(&views.series, q),
                latency_row(reported as u64),
                "{key}: the HTML heatmap's row holds the report's {reported} µs"
            );
        }
    }
}

#[test]
fn views_agree_on_a_recording_with_requeues() {
    let dir = ScratchDir::new("views", "synthetic");
    let recording = dir.0.join("requeues.iosplit");
    requeue_recording(&recording);
    let mut views = analyze(&recording, &dir.0);
    assert_eq!(views.report_requeues, 67, "{views:?}");
    // 200 heads and 200 tails; the 67 re-issues are not new commands.
    assert_eq!(views.report_commands, 400);
    assert_eq!(views.report_timed, 400, "every command timed, all writes");
    assert_views_agree(&mut views);
    // The requeued tails are timed from their re-issue: 40 µs, not 2 ms.
    let max = views.report_latency["max"].as_u64().unwrap();
    assert!(max < 600, "max {max} µs: {}", views.report_latency);
    let tails = views
        .perfetto_durations_us
        .iter()
        .filter(|us| (39.0..=41.0).contains(*us))
        .count();
    assert_eq!(tails, 200, "every tail takes 40 µs from its last issue");
}

/// Direct 1 MiB writes of scattered pages before the tracer stops: their
/// 16-sector tails are requeued on this machine kind's root disk.
const ROOT_WRITES: u64 = 64;

#[test]
fn views_agree_on_a_real_recording_of_the_root_disk() {
    if !privileged("views_agree_on_a_real_recording_of_the_root_disk") {
        return;
    }
    let dir = ScratchDir::new("views", "vda");
    let target = ScratchFile(PathBuf::from(format!(
        "/var/tmp/iosplit-views-{}",
        std::process::id()
    )));
    let disk = disk_holding(Path::new("/var/tmp"));
    let recording = dir.0.join("root.iosplit");
    let tracer = Tracer::start(&["record", "-d", &disk, "-o", recording.to_str().unwrap()]);
    scattered_direct_writes(&target.0, ROOT_WRITES);
    tracer.stop();
    let mut views = analyze(&recording, &dir.0);
    assert_views_agree(&mut views);
    // Without indirect descriptors (feature bit 28) each write's tail waits
    // for ring room: the case the views used to disagree on.
    let features =
        std::fs::read_to_string(format!("/sys/block/{disk}/device/features")).unwrap_or_default();
    if features.as_bytes().get(28) == Some(&b'0') {
        assert!(views.report_requeues > 0, "{disk}: no requeue recorded");
    }
    eprintln!(
        "{disk}: {} commands, {} requeues in the recording",
        views.report_commands, views.report_requeues
    );
}
