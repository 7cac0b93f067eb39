//! `iosplit-trace report`: trace for a while (or per interval, like iostat),
//! then print the measures, histograms and diagnoses.

use std::process::ExitCode;

use std::time::{Duration, Instant};
use tokio::signal::unix::SignalKind;

use serde::Serialize;

use crate::capture::{Capture, CaptureConfig, ProbeFlavor};
use crate::cli::{DeviceSelection, ReportArgs};
use crate::engine::Engine;
use crate::error::Result;
use crate::record::{RecordingSink, Writer};

use super::output::{Document, Format, Output};
use super::{selection, session};

pub fn run(selection: &DeviceSelection, args: &ReportArgs) -> Result<ExitCode> {
    let devices = selection::resolve_selection(selection)?;
    let mut config = CaptureConfig {
        accept_noop: true,
        ..selection::capture_config(
            &devices,
            args.read
                .reads_owners(!args.by.is_empty() || args.filter.filters_owners()),
        )
    };
    config.owners = selection::owner_filter(&args.filter)?;
    let disks = session::read_geometry(&devices)?;
    // --html renders from a recording: the one asked for, or a temporary one.
    let temporary = TemporaryRecording((args.html.is_some() && args.record.is_none()).then(|| {
        std::env::temp_dir().join(format!("iosplit-trace-{}.iotrace", std::process::id()))
    }));
    let record_path = args.record.as_ref().or(temporary.0.as_ref());
    let mut writer = record_path.map(|p| Writer::create(p)).transpose()?;
    let engine = RecordingSink::new(
        Engine::new(disks.clone(), Default::default()),
        writer.as_mut(),
    );
    let mut out = Output::stdout();
    // One document per interval is a stream: JSON Lines.
    let format = Format::from_flags(args.json, args.interval.is_some());
    let capture = Capture::start(&config, engine)?;
    let runtime = session::runtime()?;
    // One listener for the whole trace, from before "tracing" shows: a Ctrl-C
    // that arrives between waits is kept for the next one.
    let mut interrupt = session::listen(&runtime, SignalKind::interrupt())?;
    selection::announce(&devices, &capture);
    if let Some(writer) = &writer {
        writer.header(super::record::header("report", &disks, &capture, None));
    }
    let unsupported = capture.unsupported();
    let owners_read = capture.owners_read;
    let started = Instant::now();
    let deadline = args
        .duration
        .map(|secs| started + Duration::from_secs_f64(secs));
    let interval = args.interval.map(Duration::from_secs_f64);
    let mut interval_start = started;
    let mut geometry = session::GeometryWatch::new(&devices, &disks);
    loop {
        let now = Instant::now();
        let until_deadline = deadline.map(|d| d.saturating_duration_since(now));
        let until_tick = interval.map(|i| (interval_start + i).saturating_duration_since(now));
        // Wake at least once per refresh to see devices come and go.
        let wait = [until_deadline, until_tick]
            .into_iter()
            .flatten()
            .fold(session::GEOMETRY_REFRESH, Duration::min);
        let interrupted = runtime.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(wait) => false,
                _ = interrupt.recv() => true,
            }
        });
        let finished = interrupted || deadline.is_some_and(|d| Instant::now() >= d);
        if finished {
            break;
        }
        session::refresh_geometry(&capture, &mut geometry, false)?;
        if capture.flavor == ProbeFlavor::Noop {
            continue;
        }
        if interval.is_some_and(|i| interval_start.elapsed() >= i) {
            let elapsed = interval_start.elapsed();
            let unsupported = unsupported.clone();
            let mut report = capture.query(move |engine, counters| {
                let mut report =
                    session::report(engine, counters, elapsed, unsupported, owners_read);
                name_owners(engine, &mut report);
                engine.mark_interval(super::record::trailer(counters, elapsed));
                engine.reset();
                report
            })?;
            interval_start = Instant::now();
            session::show_views(&mut report, &args.by);
            // A closed pipe ends the loop here; dropping the capture detaches the probes.
            out.print(&report, format)?;
        }
    }
    // Devices that went in the last moments are seen too.
    session::refresh_geometry(&capture, &mut geometry, true)?;
    if capture.flavor == ProbeFlavor::Noop {
        let seconds = started.elapsed().as_secs_f64();
        capture.finish(|_, _| ())?;
        if let Some(path) = record_path {
            // Nothing was captured: leave no recording that looks like an idle disk.
            drop(writer);
            let _ = std::fs::remove_file(path);
            return Err(crate::error::Error::usage(
                "IOSPLIT_PROBES=noop captures nothing, so --record or --html has nothing to keep: drop one of them",
            ));
        }
        out.print(&FloorRun::new(seconds), format)?;
        return Ok(ExitCode::SUCCESS);
    }
    // The last (or only) report covers everything up to the probes' detach.
    let elapsed = interval_start.elapsed();
    let mut report = capture.finish(move |engine, counters| {
        // As an import and a replay end: at the newest event.
        engine.settle_at_end(0);
        let mut report = session::report(engine, counters, elapsed, unsupported, owners_read);
        name_owners(engine, &mut report);
        engine.finish_recording(super::record::trailer(counters, elapsed));
        report
    })?;
    session::show_views(&mut report, &args.by);
    out.print(&report, format)?;
    if let Some(writer) = writer {
        writer.close()?;
    }
    if let (Some(html), Some(recording)) = (&args.html, record_path) {
        super::analyze::write_html(recording, html)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Cgroup and file paths for the attribution's ids (off the consumer thread).
/// The text shows the `--by` views, in the order given.
/// Resolves owner names on this machine, and keeps them in the recording
/// (if any) so `analyze` prints the same names elsewhere.
fn name_owners<S>(engine: &mut RecordingSink<S>, report: &mut crate::model::Report) {
    if let Some(attribution) = report.attribution.as_mut() {
        crate::owners::resolve(attribution);
        engine.record_names(&crate::model::OwnerNames::of(attribution));
    }
}

/// `--html` without `--record`: the recording it renders from, removed however `report` ends.
struct TemporaryRecording(Option<std::path::PathBuf>);

impl Drop for TemporaryRecording {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What `report` prints under `IOSPLIT_PROBES=noop`: that nothing was
/// captured, so no measure (not even an idle disk's zeros) is shown.
#[derive(Serialize)]
struct FloorRun {
    schema: &'static str,
    probes: &'static str,
    captured: bool,
    seconds: f64,
    note: &'static str,
}

impl FloorRun {
    fn new(seconds: f64) -> FloorRun {
        FloorRun {
            schema: "iosplit-trace/floor",
            probes: "noop",
            captured: false,
            seconds,
            note: FLOOR_NOTE,
        }
    }
}

const FLOOR_NOTE: &str = "IOSPLIT_PROBES=noop: the block tracepoints had programs that return at \
once; nothing was captured, so there are no measures (this run only measures the tracepoints' cost)";

impl Document for FloorRun {
    fn render_text(&self, _width: u16) -> String {
        format!("{} ({:.1} s)\n", self.note, self.seconds)
    }
}
