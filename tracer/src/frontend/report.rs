//! `iosplit-trace report`: trace for a while, then print what happened.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tracer_common::{BlockEvent, EventKind};

use crate::capture::{Capture, EventSink, KernelCounters};
use crate::cli::{ReportArgs, Scope};
use crate::error::{Error, Result};
use crate::model::{CorrelationStats, EventCounts, Report, SCHEMA_NAME, SCHEMA_VERSION};

use super::scope;

/// Counts events per kind.
#[derive(Default)]
pub struct Tally {
    pub events: EventCounts,
}

impl EventSink for Tally {
    fn block_event(&mut self, event: &BlockEvent) {
        if let Some(kind) = EventKind::from_u8(event.kind) {
            *self.events.slot(kind) += 1;
        }
    }
}

fn snapshot(
    tally: &Tally,
    counters: KernelCounters,
    duration: Duration,
    unsupported: Vec<String>,
) -> Report {
    let mut events = tally.events;
    events.dropped = counters.dropped;
    events.syscall_dropped = counters.syscall_dropped;
    events.read_failed = counters.read_failed;
    Report {
        schema: SCHEMA_NAME,
        schema_version: SCHEMA_VERSION,
        duration_s: duration.as_secs_f64(),
        events,
        correlation: CorrelationStats::default(),
        diagnoses: Vec::new(),
        devices: Vec::new(),
        run: None,
        unsupported_probes: unsupported,
    }
}

pub fn run(scope_args: &Scope, args: &ReportArgs) -> Result<ExitCode> {
    let devices = scope::resolve_scope(scope_args)?;
    let config = scope::capture_config(&devices);
    let capture = Capture::start(&config, Tally::default())?;
    let started = Instant::now();
    scope::announce(&devices, &capture);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| Error::failure(format!("cannot start the runtime: {err}")))?;
    let duration = args.duration.map(Duration::from_secs_f64);
    runtime.block_on(async {
        let stop = async {
            match duration {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    });
    let unsupported = capture.unsupported();
    let report = capture
        .query(move |tally, counters| snapshot(tally, counters, started.elapsed(), unsupported))?;
    drop(capture);
    print_report(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_report(report: &Report, json: bool) -> Result<()> {
    if json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|err| Error::failure(format!("cannot encode the report: {err}")))?;
        println!("{text}");
    } else {
        println!(
            "{} block events in {:.1}s, {} dropped",
            report.events.total(),
            report.duration_s,
            report.events.dropped
        );
    }
    Ok(())
}
