//! `iosplit-trace report`: trace for a while (or per interval, like iostat),
//! then print the measures, histograms and diagnoses.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::capture::Capture;
use crate::cli::{DeviceSelection, ReportArgs};
use crate::engine::Engine;
use crate::error::{Context, Result};
use crate::record::{RecordingSink, Writer};

use super::output::{Format, Output};
use super::{selection, session};

pub fn run(selection: &DeviceSelection, args: &ReportArgs) -> Result<ExitCode> {
    let devices = selection::resolve_selection(selection)?;
    let config = selection::capture_config(&devices);
    let disks = session::read_geometry(&devices)?;
    let mut writer = args.record.as_deref().map(Writer::create).transpose()?;
    let engine = RecordingSink::new(
        Engine::new(disks.clone(), Default::default()),
        writer.as_mut(),
    );
    let mut out = Output::stdout();
    // One document per interval is a stream: JSON Lines.
    let format = Format::from_flags(args.json, args.interval.is_some());
    let capture = Capture::start(&config, engine)?;
    selection::announce(&devices, &capture);
    if let Some(writer) = &writer {
        writer.header(super::record::header("report", &disks, &capture, None));
    }
    let unsupported = capture.unsupported();
    let runtime = session::runtime()?;
    let started = Instant::now();
    let deadline = args
        .duration
        .map(|secs| started + Duration::from_secs_f64(secs));
    let interval = args.interval.map(Duration::from_secs_f64);
    let mut interval_start = started;
    let mut geometry = session::GeometryWatch::new(&devices);
    // One listener for the whole trace: a Ctrl-C that arrives between waits
    // is kept for the next one.
    let mut interrupt = {
        let _runtime = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
    }
    .context("cannot listen for Ctrl-C")?;
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
        if interval.is_some_and(|i| interval_start.elapsed() >= i) {
            let elapsed = interval_start.elapsed();
            let unsupported = unsupported.clone();
            let report = capture.query(move |engine, counters| {
                engine.mark_interval(super::record::trailer(counters, elapsed));
                let report = session::report(engine, counters, elapsed, unsupported);
                engine.reset();
                report
            })?;
            interval_start = Instant::now();
            // A closed pipe ends the loop here; dropping the capture detaches the probes.
            out.print(&report, format)?;
        }
    }
    // Devices that went in the last moments are seen too.
    session::refresh_geometry(&capture, &mut geometry, true)?;
    // The last (or only) report covers everything up to the probes' detach.
    let elapsed = interval_start.elapsed();
    let report = capture.finish(move |engine, counters| {
        engine.finish_recording(super::record::trailer(counters, elapsed));
        session::report(engine, counters, elapsed, unsupported)
    })?;
    out.print(&report, format)?;
    if let Some(writer) = writer {
        writer.close()?;
    }
    Ok(ExitCode::SUCCESS)
}
