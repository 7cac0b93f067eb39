//! `iosplit-trace record -o FILE`: trace for a while and write every event to
//! a recording, with no engine behind it. Also the header every recording
//! command (`record`, `report --record`, `run --record`) writes.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::signal::unix::SignalKind;
use tracer_common::BlockEvent;

use crate::capture::{Capture, KernelCounters};
use crate::cli::{DeviceSelection, RecordArgs};
use crate::error::Result;
use crate::geometry::DiskGeometry;
use crate::record::format::{
    BLOCK_EVENT_BYTES, DIRTY_COUNTS_BYTES, OPEN_EVENT_BYTES, PROCESS_EVENT_BYTES,
};
use crate::record::{RecordHeader, RecordingSink, Trailer, Writer};
use crate::sink::EventSink;

use super::{output, selection, session};

/// Takes events and keeps nothing: `record` needs no engine.
pub struct Discard;

impl EventSink for Discard {
    fn block_event(&mut self, _event: &BlockEvent) {}
}

/// The header of a recording made on this machine by `recorded_by`.
pub fn header<S: EventSink>(
    recorded_by: &str,
    geometry: &[DiskGeometry],
    capture: &Capture<S>,
    run_command: Option<Vec<String>>,
) -> RecordHeader {
    let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_string())
        .unwrap_or_default();
    let started_unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or(0);
    RecordHeader {
        tool: format!("iosplit-trace {}", env!("CARGO_PKG_VERSION")),
        kernel_release,
        probe_flavor: capture.flavor.name().to_string(),
        recorded_by: recorded_by.to_string(),
        started_unix_ns,
        geometry: geometry.to_vec(),
        unsupported_probes: capture.unsupported(),
        run_command,
        owners: capture.owners_read,
        event_layout: [
            BLOCK_EVENT_BYTES,
            PROCESS_EVENT_BYTES,
            OPEN_EVENT_BYTES,
            DIRTY_COUNTS_BYTES,
        ],
    }
}

/// The counters at the end, for the recording's trailer.
pub fn trailer(counters: KernelCounters, elapsed: Duration) -> Trailer {
    Trailer {
        dropped: counters.dropped,
        syscall_dropped: counters.syscall_dropped,
        read_failed: counters.read_failed,
        missed: counters.missed,
        duration_s: elapsed.as_secs_f64(),
    }
}

pub fn run(selection: &DeviceSelection, args: &RecordArgs) -> Result<ExitCode> {
    let devices = selection::resolve_selection(selection)?;
    let config = selection::capture_config(&devices, args.read.reads_owners(false));
    let geometry = session::read_geometry(&devices)?;
    let mut writer = Writer::create(&args.output)?;
    let sink = RecordingSink::new(Discard, Some(&mut writer));
    let capture = Capture::start(&config, sink)?;
    let runtime = session::runtime()?;
    let mut interrupt = session::listen(&runtime, SignalKind::interrupt())?;
    selection::announce(&devices, &capture);
    writer.header(header("record", &geometry, &capture, None));
    let started = Instant::now();
    runtime.block_on(async {
        tokio::select! {
            _ = async {
                match args.duration {
                    Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs)).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = interrupt.recv() => {}
        }
    });
    let elapsed = started.elapsed();
    capture.finish(move |sink, counters| sink.finish_recording(trailer(counters, elapsed)))?;
    let summary = writer.close()?;
    output::status(format_args!(
        "recorded {:.1} s into {} ({} blocks, {} bytes)",
        elapsed.as_secs_f64(),
        args.output.display(),
        summary.blocks,
        summary.bytes
    ));
    Ok(ExitCode::SUCCESS)
}
