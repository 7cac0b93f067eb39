//! `analyze --html` and `--perfetto` on a synthetic recording (no root needed):
//! the page renders in Debian's headless chromium with no console errors,
//! its plots hold data, and the screenshot is not blank.

// Tests may unwrap: a failure is the test failing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use iosplit_trace::geometry::{DevId, DiskGeometry, PartitionGeometry};
use iosplit_trace::record::{RecordHeader, RecordingSink, Trailer, Writer};
use iosplit_trace::sink::EventSink;
use tracer_common::{BlockEvent, EventKind};

use common::{NoSink, ScratchDir};

const DISK: DevId = DevId::new(7, 9);
const PARTITION: DevId = DevId::new(7, 10);
/// A partition starting at sector 63: off the 4 KiB grid.
const PART_START: u64 = 63;

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

/// 1 MiB writes into a misaligned partition, each split into 128 KiB
/// commands, over two seconds, with the rate and latency changing midway.
fn synthetic_recording(path: &Path) {
    let mut writer = Writer::create(path).unwrap();
    let mut sink = RecordingSink::new(NoSink, Some(&mut writer));
    writer.header(RecordHeader {
        tool: "test".into(),
        probe_flavor: "BTF tracepoints".into(),
        recorded_by: "record".into(),
        geometry: vec![DiskGeometry {
            name: "loop9".into(),
            dev: Some(DISK),
            size_sectors: 1 << 21,
            logical_block_size: 512,
            physical_block_size: 4096,
            minimum_io_size: 4096,
            max_sectors_kb: 128,
            max_hw_sectors_kb: 128,
            request_based: true,
            partitions: vec![PartitionGeometry {
                name: "loop9p1".into(),
                dev: Some(PARTITION),
                number: 1,
                start: PART_START,
                size: (1 << 21) - PART_START,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut ts = 1_000_000_000u64;
    for io in 0..400u64 {
        let relative = (io * 2048) % ((1 << 21) - 4096);
        let sector = PART_START + relative;
        let mut remap = event(EventKind::Remap, ts, sector, 2048);
        remap.aux_dev = PARTITION.to_kernel();
        remap.aux_sector = relative;
        sink.block_event(&remap);
        sink.block_event(&event(EventKind::Queue, ts, sector, 2048));
        let latency = if io < 200 { 200_000 } else { 2_000_000 };
        for piece in 0..8u64 {
            let start = sector + piece * 256;
            if piece < 7 {
                let mut split = event(
                    EventKind::Split,
                    ts + 1000,
                    start,
                    2048 - 256 * piece as u32,
                );
                split.aux_sector = start + 256;
                sink.block_event(&split);
            }
            sink.block_event(&event(
                EventKind::Issue,
                ts + 5000 + piece * 1000,
                start,
                256,
            ));
            sink.block_event(&event(
                EventKind::Complete,
                ts + 5000 + latency + piece * 3000,
                start,
                256,
            ));
        }
        ts += if io < 200 { 5_000_000 } else { 2_500_000 };
    }
    sink.finish_recording(Trailer {
        duration_s: 1.5,
        ..Default::default()
    });
    drop(sink);
    writer.close().unwrap();
}

fn chromium(dir: &Path, args: &[&str], page: &Path) -> std::process::Output {
    let profile = dir.join("profile");
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium is installed (cargo xtask setup)")
}

fn assert_no_console_errors(stderr: &str) {
    for line in stderr.lines() {
        let lower = line.to_lowercase();
        assert!(
            !(line.contains("Uncaught") || lower.contains("console") && lower.contains("error")),
            "browser console: {line}"
        );
    }
}

#[test]
fn html_report_renders_in_a_headless_browser() {
    let dir = ScratchDir::new("html", "render");
    let recording = dir.0.join("trace.iotrace");
    let page = dir.0.join("report.html");
    let timeline = dir.0.join("timeline.json");
    synthetic_recording(&recording);
    let out = Command::new(env!("CARGO_BIN_EXE_iosplit-trace"))
        .arg("analyze")
        .arg(&recording)
        .arg("--html")
        .arg(&page)
        .arg("--perfetto")
        .arg(&timeline)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing is fetched.
    for remote in ["http://", "https://", "<script", "<link"] {
        let outside_svg_namespace = html.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !outside_svg_namespace.contains(remote),
            "page refers to {remote}"
        );
    }
    for title in [
        "sizes",
        "User I/Os/s versus commands/s",
        "latency",
        "Offsets over time",
        "Split causes",
        "Diagnoses",
    ] {
        assert!(html.contains(title), "missing section {title}");
    }
    assert!(
        html.contains("split_amplification"),
        "the split diagnosis is shown"
    );

    let dom = chromium(&dir.0, &["--dump-dom"], &page);
    let stderr = String::from_utf8_lossy(&dom.stderr);
    assert!(dom.status.success(), "{stderr}");
    assert_no_console_errors(&stderr);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let svgs = dom.matches("<svg").count();
    let rects = dom.matches("<rect").count();
    let paths = dom.matches("<polyline").count()
        + dom.matches("<path").count()
        + dom.matches("<line").count();
    // Sizes, rates, latency, one offset heatmap, split causes.
    assert!(svgs >= 5, "{svgs} plots");
    // Bars and heatmap cells, beyond each plot's background.
    assert!(rects > 100, "{rects} rectangles");
    assert!(paths > 10, "{paths} lines");

    let screenshot = dir.0.join("shot.png");
    let shot = chromium(
        &dir.0,
        &[
            &format!("--screenshot={}", screenshot.display()),
            "--window-size=1000,2400",
            "--hide-scrollbars",
        ],
        &page,
    );
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    assert_no_console_errors(&String::from_utf8_lossy(&shot.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(&screenshot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let channels = frame.color_type.samples();
    let mut colors = std::collections::HashSet::new();
    let mut non_white = 0usize;
    for pixel in pixels[..frame.buffer_size()].chunks(channels) {
        colors.insert(pixel.to_vec());
        if pixel[..3].iter().any(|c| *c < 240) {
            non_white += 1;
        }
    }
    assert!(colors.len() > 20, "{} distinct colors", colors.len());
    let share = non_white as f64 / (frame.width * frame.height) as f64;
    assert!(share > 0.02, "only {share:.3} of the screenshot is drawn");
    if let Ok(keep) = std::env::var("IOSPLIT_KEEP_SCREENSHOT") {
        // For a person to look at: the screenshot, and the page beside it.
        std::fs::copy(&screenshot, &keep).unwrap();
        std::fs::copy(&page, format!("{keep}.html")).unwrap();
    }

    // The timeline: every flow start has its end, each user I/O reaches its 8 commands.
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&timeline).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let count = |ph: &str, name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .count()
    };
    assert_eq!(count("X", "user I/O"), 400);
    assert_eq!(count("X", "command"), 3200);
    assert_eq!(count("s", "carried by"), 3200);
    assert_eq!(count("f", "carried by"), 3200);
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"] == "loop9"));
    assert!(events.iter().any(|e| e["ph"] == "M"
        && e["args"]["name"]
            .as_str()
            .unwrap_or("")
            .starts_with("loop9p1 user I/Os")));
}

/// `report --html` on a real traced workload: the page is written at the end,
/// holds the disk's offset heatmap, and the temporary recording is gone.
#[test]
fn report_html_renders_a_live_trace() {
    if !common::privileged("report_html_renders_a_live_trace") {
        return;
    }
    let dir = ScratchDir::new("html", "live");
    let page = dir.0.join("live.html");
    let mut disk = common::LoopDisk::new(
        "html",
        64,
        &[common::PartitionSpec {
            start: 63,
            size: 65536,
        }],
    );
    disk.set_queue("max_sectors_kb", "64");
    let before = temporary_recordings();
    let tracer =
        common::Tracer::start(&["report", "-d", &disk.name, "--html", page.to_str().unwrap()]);
    common::dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.partition(1)),
        "bs=1M",
        "count=8",
        "oflag=direct",
    ]);
    let report = tracer.stop();
    assert!(report.contains("split"), "{report}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!("<h3>{}</h3>", disk.name)),
        "no offset heatmap for {}",
        disk.name
    );
    assert!(
        html.contains("<td>max_sectors</td>"),
        "1 MiB writes split at 64 KiB"
    );
    // Five plot backgrounds, then bars and heatmap cells.
    let rects = html.matches("<rect").count();
    assert!(rects > 10, "{rects} rectangles");
    assert_eq!(
        temporary_recordings(),
        before,
        "the temporary recording is removed"
    );
}

fn temporary_recordings() -> usize {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("iosplit-trace-") && name.ends_with(".iotrace")
        })
        .count()
}
