//! `iosplit-trace report`: trace for a while (or per interval, like iostat),
//! then print the measures, histograms and diagnoses.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::capture::Capture;
use crate::cli::{DeviceSelection, ReportArgs};
use crate::engine::Engine;
use crate::error::Result;

use super::output::{Format, Output};
use super::{selection, session};

pub fn run(selection: &DeviceSelection, args: &ReportArgs) -> Result<ExitCode> {
    let devices = selection::resolve_selection(selection)?;
    let mut config = selection::capture_config(&devices);
    config.owners = selection::owner_filter(selection)?;
    let engine = Engine::new(session::read_geometry(&devices)?, Default::default());
    let mut out = Output::stdout();
    // One document per interval is a stream: JSON Lines.
    let format = Format::from_flags(args.json, args.interval.is_some());
    let capture = Capture::start(&config, engine)?;
    selection::announce(&devices, &capture);
    let unsupported = capture.unsupported();
    let runtime = session::runtime()?;
    let started = Instant::now();
    let deadline = args
        .duration
        .map(|secs| started + Duration::from_secs_f64(secs));
    let interval = args.interval.map(Duration::from_secs_f64);
    let mut interval_start = started;
    loop {
        let now = Instant::now();
        let until_deadline = deadline.map(|d| d.saturating_duration_since(now));
        let until_tick = interval.map(|i| (interval_start + i).saturating_duration_since(now));
        let wait = match (until_deadline, until_tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let interrupted = runtime.block_on(async {
            tokio::select! {
                _ = async {
                    match wait {
                        Some(wait) => tokio::time::sleep(wait).await,
                        None => std::future::pending().await,
                    }
                } => false,
                _ = tokio::signal::ctrl_c() => true,
            }
        });
        let finished = interrupted || deadline.is_some_and(|d| Instant::now() >= d);
        if finished {
            break;
        }
        if interval.is_some() {
            let elapsed = interval_start.elapsed();
            let unsupported = unsupported.clone();
            let mut report = capture.query(move |engine, counters| {
                let report = session::report(engine, counters, elapsed, unsupported);
                engine.reset();
                report
            })?;
            interval_start = Instant::now();
            name_owners(&mut report, &args.by);
            // A closed pipe ends the loop here; dropping the capture detaches the probes.
            out.print(&report, format)?;
        }
    }
    // The last (or only) report covers everything up to the probes' detach.
    let elapsed = interval_start.elapsed();
    let mut report = capture
        .finish(move |engine, counters| session::report(engine, counters, elapsed, unsupported))?;
    name_owners(&mut report, &args.by);
    out.print(&report, format)?;
    Ok(ExitCode::SUCCESS)
}

/// Cgroup and file paths for the attribution's ids (off the consumer thread).
/// The text shows the `--by` views, in the order given.
fn name_owners(report: &mut crate::model::Report, by: &[crate::cli::ByView]) {
    if let Some(attribution) = report.attribution.as_mut() {
        crate::geometry::owners::resolve(attribution);
        for view in by {
            if !attribution.text_views.contains(&view.view()) {
                attribution.text_views.push(view.view());
            }
        }
    }
}
